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

# Gitea, the Git server and second OpenID Connect provider of the tests
# (internal/testgitea, whose Version names the same release), built once per
# version into a cache folder outside the clone like Hydra. Its go.mod
# carries replace directives, so it builds inside a writable copy of its
# downloaded module; CGO and the sqlite tags: the tests run it on SQLite.
# Without the bindata tag Gitea reads templates/, options/ and public/ from
# disk (STATIC_ROOT_PATH), so they are copied beside the binary. The folder
# is assembled under a temporary name, checked, then renamed.
gitea_version=v1.26.0
gitea_dir=${XDG_CACHE_HOME:-$HOME/.cache}/airgapcoder/gitea-$gitea_version
# (A folder without the frontend stand-ins is from an older version of this
# step: rebuilt.)
if [[ ! -x $gitea_dir/gitea || ! -f $gitea_dir/public/assets/js/index.js ]]; then
  echo "install-deps: building Gitea $gitea_version into $gitea_dir"
  mkdir -p "${gitea_dir%/*}"
  # (From the cache folder: outside any module, so no go.mod is touched.)
  gitea_src=$(cd "${gitea_dir%/*}" && go mod download -json "code.gitea.io/gitea@$gitea_version" |
    sed -n 's|^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$|\1|p')
  [[ -d $gitea_src ]] || { echo "install-deps: go mod download gave no folder for code.gitea.io/gitea@$gitea_version" >&2; exit 1; }
  tmp=$gitea_dir.tmp.$$
  trap 'rm -rf "$tmp"' EXIT
  rm -rf "$tmp"
  mkdir "$tmp"
  cp -R "$gitea_src" "$tmp/src"
  chmod -R u+w "$tmp/src"
  (cd "$tmp/src" && CGO_ENABLED=1 go build -trimpath -tags 'sqlite sqlite_unlock_notify' \
    -ldflags "-s -w -X main.Version=${gitea_version#v}" -o "$tmp/gitea" .)
  cp -R "$tmp/src/templates" "$tmp/src/options" "$tmp/src/public" "$tmp/"
  rm -rf "$tmp/src"
  # The frontend (scripts and styles, built with npm) is not built here. The
  # pages the tests use are plain HTML forms that work without it, but a
  # page whose script is missing calls alert(), which stops a real browser:
  # stand-ins for the files the pages load, an empty manifest (no hashed
  # names) and the default theme (Gitea wants one).
  assets=$tmp/public/assets
  mkdir -p "$assets/.vite" "$assets/js" "$assets/css"
  echo '{}' >"$assets/.vite/manifest.json"
  for f in js/iife.js js/index.js js/eventsource.sharedworker.js js/swagger.js css/index.css; do
    echo "/* stand-in: Gitea's frontend is not built here (scripts/install-deps.sh) */" >"$assets/$f"
  done
  echo 'gitea-theme-meta-info { --theme-display-name: "Auto"; --theme-color-scheme: "auto"; }' >"$assets/css/theme-gitea-auto.css"
  out=$("$tmp/gitea" --version)
  [[ $out == *"version ${gitea_version#v} "* ]] || { echo "install-deps: built Gitea reports '$out', want ${gitea_version#v}" >&2; exit 1; }
  rm -rf "$gitea_dir" # a folder without its binary is an interrupted copy
  mv -T "$tmp" "$gitea_dir"
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
