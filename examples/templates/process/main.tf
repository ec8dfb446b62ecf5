# The "process" template: the workspace is a folder on the provisioner's host
# and the agent runs there as a plain process. It needs nothing but the
# official Coder provider and Terraform's built-in terraform_data, so it works
# on any appliance, offline, and is what the tests use.
#
# On the appliance the provisioner names its workspace launcher in
# CODER_WORKSPACE_LAUNCHER: the agent then runs as the owner's own OS account
# (ws-<owner>, no sudo), never as root or the appliance's service user, in
# <appliance>/workspaces/<owner>/<workspace>, and only that account sees the
# agent's token. Elsewhere (a plain `coder server`) it runs as the
# provisioner's user under var.base_dir.

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

# A template admin's setting (coder templates push --variable base_dir=...),
# not a member's: it says where workspaces live when there is no launcher.
variable "base_dir" {
  type        = string
  default     = "/tmp/coder-workspaces"
  description = "Folder under which each workspace gets a home folder when the provisioner has no workspace launcher (on the appliance the launcher decides)."
  validation {
    condition     = startswith(var.base_dir, "/") && !strcontains(var.base_dir, "..")
    error_message = "base_dir must be an absolute path without \"..\"."
  }
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
  owner     = data.coder_workspace_owner.me.name
  workspace = data.coder_workspace.me.name
  # Without a launcher: the workspace's folder under base_dir.
  home = "${var.base_dir}/${local.owner}/${local.workspace}"
}

# Shells, scripts and apps start in the agent's HOME: the workspace folder.
resource "coder_agent" "main" {
  os             = data.coder_provisioner.me.os
  arch           = data.coder_provisioner.me.arch
  startup_script = data.coder_parameter.startup_script.value

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

# The agent process: started on start, stopped on stop. Through the
# launcher when there is one; else setsid -f and the redirections let it
# outlive terraform (see DESIGN §4). Either way the agent gets only its
# token and init script, not terraform's environment (which holds the
# owner's session token).
resource "terraform_data" "agent" {
  count = data.coder_workspace.me.start_count

  input = {
    owner     = local.owner
    workspace = local.workspace
    home      = local.home
    pidfile   = "${local.home}/.coder-agent.pid"
  }

  provisioner "local-exec" {
    command = <<-EOT
      set -e
      if [ -n "$CODER_WORKSPACE_LAUNCHER" ]; then
        exec "$CODER_WORKSPACE_LAUNCHER" start --owner "$OWNER" --workspace "$WORKSPACE" \
          --env CODER_AGENT_TOKEN --env INIT_SCRIPT -- sh -c 'exec sh -c "$INIT_SCRIPT"'
      fi
      mkdir -p "$HOME_DIR"
      env -i PATH="$PATH" HOME="$HOME_DIR" CODER_AGENT_TOKEN="$CODER_AGENT_TOKEN" INIT_SCRIPT="$INIT_SCRIPT" \
        setsid -f sh -c 'cd "$HOME"; echo $$ > "$0"; exec sh -c "$INIT_SCRIPT"' "$PIDFILE" >"$HOME_DIR/.coder-agent.log" 2>&1 </dev/null
      for i in $(seq 1 50); do [ -s "$PIDFILE" ] && break; sleep 0.1; done
      echo "agent process $(cat "$PIDFILE") started in $HOME_DIR"
    EOT
    environment = {
      OWNER             = local.owner
      WORKSPACE         = local.workspace
      HOME_DIR          = local.home
      PIDFILE           = "${local.home}/.coder-agent.pid"
      INIT_SCRIPT       = coder_agent.main.init_script
      CODER_AGENT_TOKEN = coder_agent.main.token
    }
  }

  provisioner "local-exec" {
    when    = destroy
    command = <<-EOT
      # (A workspace started before the launcher has no owner in its state.)
      if [ -n "$CODER_WORKSPACE_LAUNCHER" ] && [ -n "$OWNER" ]; then
        exec "$CODER_WORKSPACE_LAUNCHER" stop --owner "$OWNER" --workspace "$WORKSPACE"
      fi
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
      OWNER     = self.input.owner
      WORKSPACE = self.input.workspace
      PIDFILE   = self.input.pidfile
    }
  }
}
