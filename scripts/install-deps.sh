#!/usr/bin/env bash
# Installs what building and testing need, idempotently: Debian packages only
# when missing (so a machine that has them needs no package index), and the
# Go modules pinned in go.sum.
set -euo pipefail

# jupyter-notebook and python3-ipykernel: a real web app behind a path-based
# dev URL (coderd/site's TestBrowserJupyterPathApp).
packages=(postgresql-15 strace xz-utils curl wget openssh-client ca-certificates openssl iproute2 procps skopeo podman runc uidmap busybox-static chromium iperf3 haproxy git libnss3-tools
  jupyter-notebook python3-ipykernel)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "install-deps: installing ${missing[*]}"
  sudo_cmd=()
  [[ $(id -u) -eq 0 ]] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
if ! command -v go >/dev/null; then
  export PATH=$PATH:/usr/local/go/bin
fi
go mod download
# The official Coder Terraform provider, built from tools/go.mod (make build and
# the tests build it offline from the module cache).
(cd "$(dirname "$0")/../tools" && go mod download)

# Terraform is part of these machines (it cannot be fetched here): check the
# pinned version is present, and say what is wrong when it is not.
want=1.11.4
# (Read the whole output: `| head -n1` can SIGPIPE terraform, which under
# pipefail would read as "not installed".)
if ! out=$(terraform version 2>/dev/null); then
  echo "install-deps: terraform $want is required on the PATH (the tests run the real binary)" >&2
  exit 1
fi
got=${out%%$'\n'*}
case $got in
*"v$want") ;;
*) echo "install-deps: found '$got', want Terraform v$want on the PATH" >&2; exit 1 ;;
esac
