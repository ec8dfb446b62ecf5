# Jupyter Notebook from Debian's jupyter-notebook package as a path-based
# coder_app, added to the process template (examples/templates/process) by
# TestBrowserJupyterPathApp. It is set up as Coder's Jupyter modules set up
# a path-based app (subdomain = false): Jupyter's base_url is the app's
# path and the coder_app's url ends in the same path (coderd strips the
# /@owner/workspace/apps/jupyter prefix and joins the rest to the url's
# path); Jupyter's token is off, since coderd authenticates the visitor.
# Jupyter's own checks keep their defaults: Origin must match Host (HTTP
# API and kernel WebSockets) and state-changing requests need its XSRF
# cookie.
#
# It listens on loopback only. A deployment reached by a host name rather
# than a loopback address would also need
# --NotebookApp.allow_remote_access=True (Coder's module gets the same by
# listening on 0.0.0.0): the app sees the visitor's Host, and Jupyter
# refuses non-local Host names when it listens on loopback.

locals {
  jupyter_base_path = "/@${local.owner}/${local.workspace}/apps/jupyter"
}

variable "jupyter_port" {
  type        = number
  default     = 19999
  description = "Port Jupyter Notebook listens on inside the workspace."
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
      --NotebookApp.base_url=${local.jupyter_base_path}/ \
      --NotebookApp.token='' --NotebookApp.password='' \
      </dev/null >"$HOME/jupyter.log" 2>&1 &
    echo $! >"$HOME/jupyter.pid"
  EOT
}

resource "coder_app" "jupyter" {
  agent_id     = coder_agent.main.id
  slug         = "jupyter"
  display_name = "Jupyter Notebook"
  url          = "http://localhost:${var.jupyter_port}${local.jupyter_base_path}/"
  subdomain    = false
  share        = "owner"
}
