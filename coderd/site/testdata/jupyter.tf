# Jupyter Notebook from Debian's jupyter-notebook package as a coder_app,
# added to the process template (examples/templates/process) by the
# TestBrowserJupyter* tests. It is set up as Coder's Jupyter modules set it
# up, with the token off, since coderd authenticates the visitor:
#
#   - path-based (jupyter_subdomain = false, as the modules' subdomain =
#     false): Jupyter's base_url is the app's path and the coder_app's url
#     ends in the same path (coderd strips the /@owner/workspace/apps/jupyter
#     prefix and joins the rest to the url's path);
#   - subdomain (jupyter_subdomain = true, the modules' default): the app
#     owns the root of its own origin, so base_url and the url's path are
#     "/".
#
# Jupyter's own checks keep their defaults: Origin must match Host (HTTP
# API and kernel WebSockets) and state-changing requests need its XSRF
# cookie.
#
# It listens on loopback only, and Jupyter listening on loopback refuses a
# Host that is not a local name unless allow_remote_access is on (Coder's
# module gets the same by listening on 0.0.0.0). The app sees the visitor's
# Host: on a subdomain app that is the app host
# (jupyter--main--dev--admin.apps.test), so the subdomain app allows remote
# access; the path-based app is reached at 127.0.0.1 here, and a deployment
# reached by a host name would need the same setting.

variable "jupyter_port" {
  type        = number
  default     = 19999
  description = "Port Jupyter Notebook listens on inside the workspace."
}

variable "jupyter_subdomain" {
  type        = bool
  default     = false
  description = "Serve Jupyter as a subdomain app (an origin of its own under the wildcard access URL) instead of under the app's path."
}

locals {
  jupyter_base_url = var.jupyter_subdomain ? "/" : "/@${local.owner}/${local.workspace}/apps/jupyter/"
}

resource "coder_script" "jupyter" {
  agent_id     = coder_agent.main.id
  display_name = "Jupyter Notebook"
  run_on_start = true
  script       = <<-EOT
    #!/bin/sh
    set -e
    # Jupyter will not start as root without --allow-root (CI runs as root).
    as_root=""
    [ "$(id -u)" != 0 ] || as_root=--allow-root
    jupyter-notebook --no-browser $as_root --ip=127.0.0.1 --port=${var.jupyter_port} \
      --notebook-dir="$HOME" \
      --NotebookApp.base_url=${local.jupyter_base_url} \
      --NotebookApp.token='' --NotebookApp.password='' \
      ${var.jupyter_subdomain ? "--NotebookApp.allow_remote_access=True" : ""} \
      </dev/null >"$HOME/jupyter.log" 2>&1 &
    echo $! >"$HOME/jupyter.pid"
  EOT
}

resource "coder_app" "jupyter" {
  agent_id     = coder_agent.main.id
  slug         = "jupyter"
  display_name = "Jupyter Notebook"
  url          = "http://localhost:${var.jupyter_port}${local.jupyter_base_url}"
  subdomain    = var.jupyter_subdomain
  share        = "owner"
}
