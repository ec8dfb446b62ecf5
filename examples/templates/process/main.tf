# The "process" template: the workspace is a folder on the provisioner's host
# and the agent runs there as a plain process. It needs nothing but the
# official Coder provider and Terraform's built-in terraform_data, so it works
# on any appliance, offline, and is what the tests use.

terraform {
  required_providers {
    coder = {
      source = "coder/coder"
    }
  }
}

data "coder_provisioner" "me" {}

data "coder_workspace" "me" {}

data "coder_workspace_owner" "me" {}

data "coder_parameter" "base_dir" {
  name         = "base_dir"
  display_name = "Base folder"
  description  = "Folder on the provisioner's host under which each workspace gets a home folder."
  type         = "string"
  default      = "/tmp/coder-workspaces"
  mutable      = false
  order        = 1
}

data "coder_parameter" "startup_script" {
  name         = "startup_script"
  display_name = "Startup script"
  description  = "Shell script the agent runs when the workspace starts."
  type         = "string"
  form_type    = "textarea"
  default      = "echo workspace ready"
  mutable      = true
  order        = 2
}

locals {
  home = "${data.coder_parameter.base_dir.value}/${data.coder_workspace_owner.me.name}/${data.coder_workspace.me.name}"
}

resource "coder_agent" "main" {
  os             = data.coder_provisioner.me.os
  arch           = data.coder_provisioner.me.arch
  dir            = local.home
  startup_script = data.coder_parameter.startup_script.value
  env = {
    WORKSPACE_HOME = local.home
  }

  metadata {
    key          = "load"
    display_name = "Load average"
    script       = "cut -d' ' -f1 /proc/loadavg"
    interval     = 10
    timeout      = 1
  }
}

resource "coder_app" "web" {
  agent_id     = coder_agent.main.id
  slug         = "web"
  display_name = "Web server"
  url          = "http://localhost:8080"
}

# The agent process: started on start, stopped on stop. setsid -f and the
# redirections let it outlive terraform (see DESIGN §4).
resource "terraform_data" "agent" {
  count = data.coder_workspace.me.start_count

  input = {
    home    = local.home
    pidfile = "${local.home}/.coder-agent.pid"
  }

  provisioner "local-exec" {
    command = <<-EOT
      set -e
      mkdir -p "$HOME_DIR"
      setsid -f sh -c 'echo $$ > "$0"; exec sh -c "$INIT_SCRIPT"' "$PIDFILE" >"$HOME_DIR/.coder-agent.log" 2>&1 </dev/null
      for i in $(seq 1 50); do [ -s "$PIDFILE" ] && break; sleep 0.1; done
      echo "agent process $(cat "$PIDFILE") started in $HOME_DIR"
    EOT
    environment = {
      HOME_DIR          = local.home
      PIDFILE           = "${local.home}/.coder-agent.pid"
      INIT_SCRIPT       = coder_agent.main.init_script
      CODER_AGENT_TOKEN = coder_agent.main.token
    }
  }

  provisioner "local-exec" {
    when    = destroy
    command = <<-EOT
      if [ -s "$PIDFILE" ]; then
        pid=$(cat "$PIDFILE")
        kill "$pid" 2>/dev/null || true
        for i in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$pid" 2>/dev/null || true
        rm -f "$PIDFILE"
        echo "agent process $pid stopped"
      fi
    EOT
    environment = {
      PIDFILE = self.input.pidfile
    }
  }
}
