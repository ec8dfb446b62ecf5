// Package builder builds bundles on a connected host (coder bundle build):
// it owns bundle.yaml (Config: parsing with errors that name the line and
// the field, and checking), fetching every source it lists, verifying what
// was fetched, the content-addressed download cache, and the one HTTP
// client all of that goes through. The bytes it produces are written by
// package bundle (bundle.Write), which owns the file format and its trust
// chain; this package decides only what goes into the payload and into the
// manifest's Components.
//
// It must not be linked by anything that runs on the offline side
// (appliance install, upgrade and the servers): it is the only package of
// the bundle pipeline that talks to the network, and it brings
// go-containerregistry, hc-install and the PostgreSQL repacker with it.
// It must not write the bundle format itself, skip a check it can make (a
// provider SHA256SUMS and its GPG signature, an image or layer digest, a
// Maven checksum, the terraform version), or trust its cache without
// hashing a file again, and it never disables certificate verification.
//
// # A build
//
//  1. bundle.yaml is parsed and checked (LoadConfig): every mistake is
//     reported with its line before anything is fetched.
//  2. The sources are fetched concurrently into a staging payload folder,
//     at most Options.Parallel downloads at a time, through one HTTP client
//     (see httpclient.go) and the content-addressed cache (see cache.go):
//     coder binaries, terraform, PostgreSQL, providers (registry protocol,
//     checked against the registry's GPG-signed SHA256SUMS), images (one
//     OCI layout, shared blobs stored once) and CA certificates. Each kind
//     of source has its file, sources_<kind>.go. Image layers are the
//     exception: once its image is resolved, a compressed layer is only
//     listed, and downloaded in step 4 (layers.go).
//  3. Templates are copied last, once the bundle's providers and images are
//     known: a template that needs something the bundle lacks fails the
//     build, and each gets a .terraform.lock.hcl for every bundled platform.
//  4. bundle.Write packs the payload with a manifest whose Components are
//     the bill of materials (versions, sources, upstream digests), signs
//     it, and the staging folder is removed. The layers download meanwhile,
//     in the order the bundle stream wants them, and the stream takes each
//     from the cache as it arrives (bundle.PendingBlob): the bundle is
//     written while the network is busy, not after.
//
// Nothing in the payload depends on the clock or on the order downloads
// finished in, so the same inputs and key give the same bytes; the build
// time comes from SOURCE_DATE_EPOCH (bundle.DefaultBuildTime) when set.
package builder
