# The "container" template: each workspace is a container run with the
# container CLI of the provisioner's host (podman, or docker), from an image
# the appliance's registry serves, with a named volume as its home. The agent
# runs inside the container and reaches coderd at its access URL over the
# host's network.
#
# Needs: podman (or docker) on the provisioner's host, and the image in the
# bundle's images. On first boot the appliance rewrites the image reference
# below to its registry (127.0.0.1:8443/docker.io/library/debian:12, say) and
# writes its CA to /etc/containers/certs.d/<registry>/ca.crt (and Docker's
# certs.d), so the pull is verified against the appliance CA.
#
# Stop removes the container and keeps the home volume; start brings the
# container back on the same volume; delete removes both.

terraform {
  required_providers {
    coder = {
      source = "coder/coder"
    }
  }
}

variable "engine" {
  type        = string
  default     = "podman"
  description = "Container CLI on the provisioner's host: podman or docker (set with coder templates push --variable engine=docker)."
  validation {
    condition     = contains(["podman", "docker"], var.engine)
    error_message = "engine must be podman or docker."
  }
}

data "coder_provisioner" "me" {}

data "coder_workspace" "me" {}

data "coder_workspace_owner" "me" {}

data "coder_parameter" "image" {
  name         = "image"
  display_name = "Image"
  description  = "Workspace image, from the appliance's registry. It needs sh and curl (or wget) for the agent's init script."
  type         = "string"
  default      = "docker.io/library/debian:12"
  mutable      = true
}

locals {
  name   = "coder-${data.coder_workspace_owner.me.name}-${lower(data.coder_workspace.me.name)}"
  volume = "coder-${data.coder_workspace.me.id}-home"
}

resource "coder_agent" "main" {
  os   = "linux"
  arch = data.coder_provisioner.me.arch
  dir  = "/home/coder"

  metadata {
    key          = "disk"
    display_name = "Home disk"
    script       = "coder stat disk --path /home/coder"
    interval     = 30
    timeout      = 5
  }
}

# The home volume: made on the first start, kept across stop and start,
# removed on delete.
resource "terraform_data" "home" {
  input = {
    engine = var.engine
    volume = local.volume
  }

  provisioner "local-exec" {
    command = "$ENGINE volume inspect \"$VOLUME\" >/dev/null 2>&1 || $ENGINE volume create \"$VOLUME\""
    environment = {
      ENGINE = var.engine
      VOLUME = local.volume
    }
  }

  provisioner "local-exec" {
    when    = destroy
    command = "$ENGINE volume rm -f \"$VOLUME\""
    environment = {
      ENGINE = self.input.engine
      VOLUME = self.input.volume
    }
  }
}

# The container: exists while the workspace is started.
resource "terraform_data" "container" {
  count      = data.coder_workspace.me.start_count
  depends_on = [terraform_data.home]

  triggers_replace = [data.coder_parameter.image.value]

  input = {
    engine = var.engine
    name   = local.name
  }

  provisioner "local-exec" {
    # Open-file and process limits stay within the provisioner's own hard
    # limits: the engines' defaults can exceed what the host allows (runc
    # then fails with "error setting rlimit"), and podman itself runs with
    # at most 32768 processes.
    command = <<-EOT
      set -e
      nofile=$(ulimit -Hn); [ "$nofile" = unlimited ] && nofile=1048576
      nproc=$(awk '/^Max processes/ {print $4}' /proc/self/limits)
      { [ "$nproc" = unlimited ] || [ "$nproc" -gt 32768 ]; } && nproc=32768
      $ENGINE rm -f "$NAME" >/dev/null 2>&1 || true
      $ENGINE run -d --name "$NAME" --hostname "$WORKSPACE" --network host \
        --ulimit "nofile=$nofile:$nofile" --ulimit "nproc=$nproc:$nproc" \
        -v "$VOLUME:/home/coder" -w /home/coder -e HOME=/home/coder -e CODER_AGENT_TOKEN \
        --entrypoint sh "$IMAGE" -c "$INIT_SCRIPT"
      echo "container $NAME started from $IMAGE"
    EOT
    environment = {
      ENGINE            = var.engine
      NAME              = local.name
      WORKSPACE         = lower(data.coder_workspace.me.name)
      VOLUME            = local.volume
      IMAGE             = data.coder_parameter.image.value
      INIT_SCRIPT       = coder_agent.main.init_script
      CODER_AGENT_TOKEN = coder_agent.main.token
    }
  }

  provisioner "local-exec" {
    # SIGTERM first, so the agent runs its shutdown scripts.
    when    = destroy
    command = "$ENGINE stop -t 30 \"$NAME\" >/dev/null 2>&1 || true; $ENGINE rm -f \"$NAME\""
    environment = {
      ENGINE = self.input.engine
      NAME   = self.input.name
    }
  }
}

resource "coder_metadata" "container" {
  count       = data.coder_workspace.me.start_count
  resource_id = terraform_data.container[0].id
  item {
    key   = "image"
    value = data.coder_parameter.image.value
  }
  item {
    key   = "volume"
    value = local.volume
  }
}
