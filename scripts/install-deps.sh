#!/usr/bin/env bash
# Installs what building and testing need, idempotently: Debian packages only
# when missing (so a machine that has them needs no package index), and the
# Go modules pinned in go.sum.
set -euo pipefail

packages=(postgresql-15 strace xz-utils curl openssh-client ca-certificates)
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
