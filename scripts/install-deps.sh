#!/usr/bin/env bash
# Installs what building and testing need, idempotently: Debian packages only
# when missing (so a machine that has them needs no package index), and the
# Go modules pinned in go.sum.
set -euo pipefail

# jupyter-notebook and python3-ipykernel: a real web app behind a path-based
# dev URL (coderd/site's TestBrowserJupyterPathApp). gcc and libc6-dev: CGO
# for Hydra's SQLite (below).
packages=(postgresql-15 strace xz-utils curl wget openssh-client ca-certificates openssl iproute2 procps skopeo podman runc uidmap busybox-static chromium iperf3 haproxy git libnss3-tools gcc libc6-dev
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

# Ory Hydra, the OpenID Connect provider of the OIDC tests (internal/testidp),
# built once per version from tools/hydra/go.mod (a wrapper module: Hydra's
# own go.mod replaces a module, which `go install` refuses) into a cache
# outside the clone, where CI's fresh clones on this machine find it again: a
# build takes minutes. CGO and the sqlite tag: the tests run it with
# DSN=memory. Built to a temporary name, checked, then renamed.
hydra_mod=$(cd "$(dirname "$0")/../tools/hydra" && pwd)
hydra_version=$(sed -n 's|^[[:space:]]*github.com/ory/hydra/v2 \(v[^ ]*\).*|\1|p' "$hydra_mod/go.mod")
[[ -n $hydra_version ]] || { echo "install-deps: no github.com/ory/hydra/v2 version in $hydra_mod/go.mod" >&2; exit 1; }
hydra_bin=${XDG_CACHE_HOME:-$HOME/.cache}/airgapcoder/hydra-$hydra_version/hydra
if [[ ! -x $hydra_bin ]]; then
  echo "install-deps: building Ory Hydra $hydra_version into $hydra_bin"
  mkdir -p "${hydra_bin%/*}"
  tmp=$hydra_bin.tmp.$$
  trap 'rm -f "$tmp"' EXIT
  (cd "$hydra_mod" && CGO_ENABLED=1 go build -trimpath -tags sqlite,sqlite_omit_load_extension \
    -ldflags "-s -w -X github.com/ory/hydra/v2/driver/config.Version=$hydra_version" \
    -o "$tmp" github.com/ory/hydra/v2)
  out=$("$tmp" version)
  [[ $out == *"$hydra_version"* ]] || { echo "install-deps: built Hydra reports '$out', want $hydra_version" >&2; exit 1; }
  mv -f "$tmp" "$hydra_bin"
  trap - EXIT
fi

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
