#!/usr/bin/env bash
# Re-vendors the dashboard's third-party browser code: installs exactly what
# web/package-lock.json pins (npm ci) and copies the files the dashboard loads
# into coderd/site/static/vendor/, with their versions in VERSIONS. The copies
# are committed, so go build and go test never need npm or the network;
# coderd/site's TestVendorMatchesLockFile fails when VERSIONS and the lock file
# disagree.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
web=$root/web
out=$root/coderd/site/static/vendor
(cd "$web" && npm ci --no-audit --no-fund --ignore-scripts)
mods=$web/node_modules/@xterm
mkdir -p "$out"
tmp=$(mktemp -d "$out/.tmp.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
cp "$mods/xterm/lib/xterm.js" "$tmp/xterm.js"
cp "$mods/xterm/css/xterm.css" "$tmp/xterm.css"
cp "$mods/xterm/LICENSE" "$tmp/xterm.LICENSE"
cp "$mods/addon-fit/lib/addon-fit.js" "$tmp/addon-fit.js"
cp "$mods/addon-fit/LICENSE" "$tmp/addon-fit.LICENSE" 2>/dev/null || cp "$mods/xterm/LICENSE" "$tmp/addon-fit.LICENSE"
{
  echo "# Written by make web-vendor from web/package-lock.json; checked by coderd/site tests."
  for p in xterm addon-fit; do
    # name, version installed, and the tarball integrity the lock file pins
    node -p "const l=require('$web/package-lock.json').packages['node_modules/@xterm/$p'];
      ['@xterm/$p', require('$mods/$p/package.json').version, l.integrity].join(' ')"
  done
} >"$tmp/VERSIONS"
for f in "$tmp"/*; do mv -f "$f" "$out/$(basename "$f")"; done
echo "web-vendor: $(tr '\n' ' ' <"$out/VERSIONS")"
