#!/usr/bin/env bash
# make run: the product's main job on this machine, with no network. Builds a
# bundle from local sources (our binary, the official Coder provider that make
# build builds, the local terraform and
# PostgreSQL, the example templates), installs it into a scratch folder and
# boots the appliance in the foreground.
set -euo pipefail
cd "$(dirname "$0")/.."
run=${RUN_DIR:-$PWD/.run}
address=${ADDRESS:-127.0.0.1:3000}       # plain HTTP: only redirects to HTTPS
tls_address=${TLS_ADDRESS:-127.0.0.1:3443}
coder=$PWD/build/coder
mkdir -p "$run"
chmod 755 "$run"

if [[ ! -f $run/keys/bundle.key ]]; then
  "$coder" bundle keygen --output "$run/keys" >/dev/null
fi
pgdir=$(ls -d /usr/lib/postgresql/*/ | sort -V | tail -n1)
cat >"$run/bundle.yaml" <<YAML
version: 1
name: local
release: 0.0.0-dev.$(date -u +%Y%m%d%H%M%S)
platforms: [linux/amd64]
coder: {binary: self}
terraform: {version: 1.11.4, path: $(command -v terraform)}
postgres: {path: ${pgdir%/}}
providers:
  - {path: $PWD/build/providers}
templates:
  - $PWD/examples/templates/process
YAML
echo "==> building the bundle (offline, from local sources)"
bundle=$("$coder" bundle build -f "$run/bundle.yaml" --output "$run/bundles" --sign-key "$run/keys/bundle.key" --cache-dir "$run/cache" | grep '\.bundle$' | tail -n1)
echo "==> installing $bundle into $run/appliance"
"$coder" appliance install "$bundle" --dir "$run/appliance" --public-key "$run/keys/bundle.pub"
ca=$run/appliance/certs/ca.pem
cat <<MSG
==> starting the appliance on https://$tls_address (http://$address redirects there)
    its CA ($ca) is generated on first boot; the CLI trusts it with --ca-file,
    and coder login stores it for the commands after it.
    create the first user (the bundled "process" template is pushed for it):
      $coder login https://$tls_address --ca-file $ca --first-user-username admin --first-user-email admin@example.com --first-user-password '<a long password>'
      $coder create dev --template process
      $coder ssh dev
      ssh -o ProxyCommand='$coder ssh --stdio %h' dev
      curl --cacert $ca https://$tls_address/healthz
MSG
exec "$coder" appliance up --dir "$run/appliance" --http-address "$address" --tls-address "$tls_address"
