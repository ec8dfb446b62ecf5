// Package mirror serves and lays out the offline copies of what Terraform and
// container runtimes download: the provider network mirror protocol over a
// provider tree, and (later) an OCI registry over the bundle's images. It
// documents the file formats it writes and reads; it must never fetch from
// the internet.
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
// Every file is written to a temporary name in its final folder, synced and
// renamed, so a reader never sees a half-written zip or JSON file. Writers
// must not run concurrently on the same provider tree: the JSON merges are
// read-modify-write without a lock.
package mirror
