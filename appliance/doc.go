// Package appliance turns a verified bundle into a running, offline system
// on one host, and keeps it running: install, up, status, upgrade, backup
// and restore. The host is the deployment's primary (role: primary, the
// default) or a workspace proxy of a primary (role: proxy: the proxy and
// nothing else; proxy.go).
//
// It owns the appliance folder (DIR):
//
//	DIR/appliance.yaml          settings (every key documented in config.go)
//	DIR/releases/<release>/     an unpacked bundle payload, never modified
//	DIR/current -> releases/…   the release `up` runs (switched atomically)
//	DIR/previous -> releases/…  the release before, for rollback
//	DIR/data/postgres/          the database (never inside a release)
//	DIR/data/home/              the service user's HOME (rootless podman's storage)
//	DIR/certs/                  CA, serving certificate, trust.pem (package certs)
//	DIR/run/                    runtime files (the service user's, 0700)
//	DIR/cache/                  provisioner work folders and plugin cache (0700)
//	DIR/launcher/               the workspace launcher's socket and pids (root's)
//	DIR/workspaces/<owner>/     each owner's workspaces, that owner's account's (0700)
//	DIR/staging/                install's scratch space; nothing else is
//	                            written until a bundle has been verified
//
// It must not reach the network beyond the host: every component it starts
// is configured for the air gap (telemetry and update checks off, direct
// connections blocked, terraform against the local mirror), and a config
// that tries to turn any of that back on is refused.
package appliance
