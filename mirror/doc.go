// Package mirror serves and lays out the offline copies of what Terraform and
// container runtimes download: the provider network mirror protocol over a
// provider tree, Terraform's module registry protocol over the bundle's
// module packages (modules.go), a read-only OCI registry over the bundle's
// images, and the copy of those images into a site registry. It documents the file formats
// it writes and reads; it must never fetch from the internet (the only
// outbound connections it makes are PushImages' to the registry it is told).
//
// # Served URLs
//
// Server serves a bundle folder DIR over HTTPS, with the serving
// certificate its caller hands it (an appliance's DIR/certs/server.pem,
// which package certs loads; the mirror never reads certificate files);
// ServerOptions can point the two trees elsewhere (an installed appliance's
// current release):
//
//	/terraform/providers/…   the provider network mirror over DIR/providers
//	/terraform/modules/…     the module registry over DIR/modules (modules.go)
//	/v2/…                    the OCI distribution registry over DIR/images
//	/healthz                 "OK"
//
// The provider mirror answers GET and HEAD of index.json, <version>.json and
// the zips (see ProviderHandler) and 404 for anything else.
//
// The registry answers GET and HEAD of /v2/ (with
// Docker-Distribution-API-Version: registry/2.0), manifests and indexes by
// tag and by digest (stored media type, Docker-Content-Digest), blobs (Range,
// including open-ended and suffix ranges, If-Range and ETag = digest, through
// http.ServeContent straight from the blob file), /v2/<name>/tags/list and
// /v2/_catalog (both with n and last). Every write (POST, PUT, PATCH,
// DELETE) is refused with 405 and the registry error format,
// {"errors":[{"code":"UNSUPPORTED","message":…}]}.
//
// # Image layout
//
// DIR/images is an OCI image layout (oci-layout, index.json, blobs/sha256/).
// Each entry of index.json is one image: an image manifest or an index (all
// platforms of a multi-platform image), annotated with
// org.opencontainers.image.ref.name = the image's original full reference,
// such as "docker.io/library/alpine:3.20" (io.containerd.image.name is read
// when ref.name holds only a tag). Shared layers are stored once.
//
// An image HOST/PATH:TAG is served as repository HOST/PATH (the original host
// is the first path component, so images of different registries never
// collide), so that it is pulled as ADDR/HOST/PATH:TAG, and PushImages writes
// it to REGISTRY[/PREFIX]/HOST/PATH:TAG. References are normalised as Docker
// does ("alpine" is docker.io/library/alpine:latest); a host with a port,
// host:5000, becomes host_5000, because a repository path cannot hold a
// colon.
//
// A repository serves exactly the manifests, configs and layers reachable
// from its own tags; anything else is MANIFEST_UNKNOWN or BLOB_UNKNOWN.
//
// # Provider tree
//
// A provider tree is the "packed" layout that `terraform providers mirror`
// writes, which is at the same time a valid filesystem_mirror folder and the
// static content of a provider network mirror:
//
//	<dir>/<hostname>/<namespace>/<type>/index.json
//	<dir>/<hostname>/<namespace>/<type>/<version>.json
//	<dir>/<hostname>/<namespace>/<type>/terraform-provider-<type>_<version>_<os>_<arch>.zip
//
// Names are lower case (Terraform normalises provider addresses so), and
// <version> is a semantic version without a leading "v".
//
// index.json lists the versions present, each with an empty object:
//
//	{"versions":{"0.1.0":{},"0.2.0":{}}}
//
// <version>.json lists one archive per platform; url is relative to the
// <version>.json file itself, and hashes holds the h1: and zh: hashes that a
// .terraform.lock.hcl records:
//
//	{"archives":{"linux_amd64":{"url":"terraform-provider-coder_0.1.0_linux_amd64.zip",
//	  "hashes":["h1:…","zh:…"]}}}
//
// Terraform's filesystem_mirror ignores both JSON files (it reads the zip names
// only); the network mirror protocol needs them.
//
// Each zip holds one file, the provider executable, named
// terraform-provider-<type>_v<version> (".exe" added for windows), mode 0755,
// deflated, with a fixed modification time, so that packing the same
// executable twice gives the same bytes and so the same zh: hash. The
// compressed bytes depend on Go's compress/flate: a Go upgrade may change zh:
// (never h1:).
//
// # Hashes
//
// h1: is golang.org/x/mod/sumdb/dirhash.Hash1 over the files of the unpacked
// zip (names and contents only), the hash Terraform computes for an installed
// package. zh: is the hex SHA-256 of the zip file as a whole, the hash a
// registry publishes in its SHA256SUMS file.
//
// # Trust
//
// The package trusts the executables it is handed: it records their hashes,
// it does not verify where they came from. Whoever calls AddProvider (bundle
// build, after checking a registry's signed SHA256SUMS; make build, for the
// project's own provider) vouches for the binary.
//
// The registry trusts the image layout as installed: bundle install verified
// every file's hash, so NewRegistry only re-hashes the (small) manifests and
// checks that every config and layer file exists with its recorded size;
// layers are never re-hashed, at start or per request. A damaged layout stops
// NewRegistry with an error naming the blob.
//
// PushImages trusts exactly the CAs of the transport it is given (the
// appliance's trust store, certs.Store) and refuses plain HTTP, including
// go-containerregistry's fallback to http:// for registries on private
// addresses.
//
// Every file is written to a temporary name in its final folder, synced and
// renamed, so a reader never sees a half-written zip or JSON file. Writers
// must not run concurrently on the same provider tree: the JSON merges are
// read-modify-write without a lock.
package mirror
