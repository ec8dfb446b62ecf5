# The "docker" template: each workspace is a container on the Docker engine
# of the provisioner's host, from an image the appliance's registry serves.
# The agent runs inside the container and reaches coderd at its access URL.
#
# Needs in the bundle (bundle.yaml):
#   providers:
#     - source: registry.terraform.io/coder/coder
#       versions: ["2.20.0"]
#     - source: registry.terraform.io/kreuzwerker/docker
#       versions: ["3.6.2"]
#   images:
#     - docker.io/library/ubuntu:24.04
# and a Docker engine on the provisioner's host.

terraform {
  required_providers {
    coder = {
      source = "coder/coder"
    }
    docker = {
      source  = "kreuzwerker/docker"
      version = "~> 3.0"
    }
  }
}

data "coder_parameter" "image" {
  name         = "image"
  display_name = "Image"
  description  = "Workspace image, from the appliance's registry (e.g. coder.example.internal:8443/docker.io/library/ubuntu:24.04)."
  type         = "string"
  mutable      = true
}

variable "docker_host" {
  type        = string
  default     = "unix:///var/run/docker.sock"
  description = "Docker engine the workspaces run on (set per template with coder templates push --variable docker_host=...)."
}

data "coder_workspace" "me" {}

data "coder_workspace_owner" "me" {}

provider "docker" {
  host = var.docker_host
}

resource "coder_agent" "main" {
  os   = "linux"
  arch = "amd64"
  dir  = "/home/coder"
}

resource "docker_volume" "home" {
  name = "coder-${data.coder_workspace.me.id}-home"
}

resource "docker_container" "workspace" {
  count    = data.coder_workspace.me.start_count
  image    = data.coder_parameter.image.value
  name     = "coder-${data.coder_workspace_owner.me.name}-${data.coder_workspace.me.name}"
  hostname = data.coder_workspace.me.name
  # The init script carries the appliance CA, so the image need not trust it.
  entrypoint = ["sh", "-c", coder_agent.main.init_script]
  env        = ["CODER_AGENT_TOKEN=${coder_agent.main.token}"]
  volumes {
    container_path = "/home/coder"
    volume_name    = docker_volume.home.name
  }
}
