package bundle_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"airgapcoder/bundle"
)

// TestDelta: a delta bundle of release B against release A carries B's
// full manifest (the same bytes as B's full bundle) and only the files A
// lacks; extracting it with A unpacked gives exactly B, every file checked.
// Without the base, with a changed base file, or with its delta.json
// changed, it is refused and nothing is left.
func TestDelta(t *testing.T) {
	ctx := context.Background()
	pub, priv := testKey(t, "delta")
	a := testPayload(t)
	aRes, err := bundle.Write(ctx, bundle.WriteOptions{PayloadDir: makePayload(t, a), OutputDir: t.TempDir(), Manifest: testManifest(a), Key: priv})
	if err != nil {
		t.Fatal(err)
	}
	baseDir := filepath.Join(t.TempDir(), "a")
	if _, err := bundle.Extract(ctx, aRes.Path, baseDir, pub, false); err != nil {
		t.Fatal(err)
	}

	// B: a new coder binary, a new file, and an unchanged file moved.
	b := testPayload(t)
	b["bin/coder-linux-amd64"] = payloadEntry{compressible(300_000, 99), 0o755}
	b["templates/docker/extra.tf"] = payloadEntry{compressible(4_000, 98), 0o644}
	b["templates/moved/main.tf"] = b["templates/docker/main.tf"]
	mb := testManifest(b)
	mb.Release = "2026.12.1"
	mb.Components.Coder[0].SHA256 = sum(b["bin/coder-linux-amd64"].data)
	payloadB := makePayload(t, b)
	full, err := bundle.Write(ctx, bundle.WriteOptions{PayloadDir: payloadB, OutputDir: t.TempDir(), Manifest: mb, Key: priv})
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	delta, err := bundle.Write(ctx, bundle.WriteOptions{PayloadDir: payloadB, OutputDir: out, Manifest: mb, Key: priv, Base: &aRes.Manifest})
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(delta.Path) != "acme-coder-2026.12.1-from-2026.11.1.bundle" {
		t.Errorf("delta file name %s", filepath.Base(delta.Path))
	}
	// The manifest is the full bundle's, byte for byte.
	fullMembers, deltaMembers := readMembers(t, full.Path), readMembers(t, delta.Path)
	if !bytes.Equal(fullMembers[0].data, deltaMembers[0].data) || !bytes.Equal(fullMembers[1].data, deltaMembers[1].data) {
		t.Error("the delta's manifest.json or manifest.sig differs from the full bundle's")
	}
	var carried []string
	for _, m := range deltaMembers[4:] {
		carried = append(carried, strings.TrimSuffix(strings.TrimPrefix(m.hdr.Name, bundle.PayloadPrefix), bundle.ZstdSuffix))
	}
	if want := []string{"bin/coder-linux-amd64", "templates/docker/extra.tf"}; !slices.Equal(carried, want) {
		t.Errorf("the delta carries %v, want %v", carried, want)
	}
	if delta.Size >= full.Size/2 {
		t.Errorf("delta %d bytes, full %d: want far smaller", delta.Size, full.Size)
	}

	// Inspect and Verify say what it is.
	_, info, err := bundle.Inspect(delta.Path)
	if err != nil {
		t.Fatal(err)
	}
	if d := info.Delta; d == nil || d.Base.Release != "2026.11.1" || d.Base.FilesDigest != aRes.Manifest.FilesDigest() || len(d.Omitted) != len(b)-2 ||
		d.CarriedSize >= d.PayloadSize {
		t.Fatalf("Inspect: delta %+v", info.Delta)
	}
	if i := slices.IndexFunc(info.Delta.Omitted, func(o bundle.DeltaFile) bool { return o.Path == "templates/moved/main.tf" }); i < 0 || info.Delta.Omitted[i].BasePath != "templates/docker/main.tf" {
		t.Errorf("the moved file is not taken from its old path: %+v", info.Delta.Omitted)
	}
	if err := bundle.Verify(ctx, delta.Path, pub, nil); err != nil {
		t.Fatalf("Verify: %v", err)
	}

	// Without the base: refused, nothing written.
	target := filepath.Join(t.TempDir(), "b")
	if _, err := bundle.Extract(ctx, delta.Path, target, pub, false); err == nil || !strings.Contains(err.Error(), "is a delta bundle against acme-coder 2026.11.1") {
		t.Fatalf("Extract without a base: got %v", err)
	}
	checkAbsent(t, target)

	// With the base: exactly B.
	m, err := bundle.ExtractWith(ctx, delta.Path, target, bundle.ExtractOptions{PublicKey: pub, BaseDir: baseDir})
	if err != nil {
		t.Fatal(err)
	}
	if m.FilesDigest() != full.Manifest.FilesDigest() {
		t.Error("the extracted manifest is not B's")
	}
	for p, e := range b {
		got, err := os.ReadFile(filepath.Join(target, filepath.FromSlash(p)))
		if err != nil || !bytes.Equal(got, e.data) {
			t.Errorf("%s after the delta: %v, content equal %v", p, err, bytes.Equal(got, e.data))
		}
		if st, err := os.Stat(filepath.Join(target, filepath.FromSlash(p))); err == nil && st.Mode().Perm() != e.mode {
			t.Errorf("%s: mode %v, want %v", p, st.Mode().Perm(), e.mode)
		}
	}

	// A base file changed since it was installed: refused naming it.
	changed := filepath.Join(baseDir, "certs", "corp-root-ca.pem")
	if err := os.WriteFile(changed, []byte("tampered"), 0o644); err != nil {
		t.Fatal(err)
	}
	target2 := filepath.Join(t.TempDir(), "b")
	_, err = bundle.ExtractWith(ctx, delta.Path, target2, bundle.ExtractOptions{PublicKey: pub, BaseDir: baseDir})
	var ve *bundle.VerifyError
	if !errors.As(err, &ve) || ve.File != "certs/corp-root-ca.pem" || !strings.Contains(ve.Reason, "changed since it was installed") {
		t.Fatalf("a changed base file: got %v", err)
	}
	checkAbsent(t, target2)

	// delta.json changed after signing: refused before any payload.
	ms := readMembers(t, delta.Path)
	i := findMember(t, ms, bundle.DeltaMember)
	ms[i].data = bytes.Replace(ms[i].data, []byte(`"base_path": "certs/`), []byte(`"base_path": "certz/`), 1)
	tampered := filepath.Join(t.TempDir(), filepath.Base(delta.Path))
	writeMembers(t, tampered, ms)
	if err := bundle.Verify(ctx, tampered, pub, nil); !errors.As(err, &ve) || ve.File != bundle.DeltaMember || !strings.Contains(ve.Reason, "signature does not match") {
		t.Fatalf("a changed delta.json: got %v", err)
	}

	// A delta.json signed by the same key but made for another manifest.
	ms = readMembers(t, delta.Path)
	i = findMember(t, ms, bundle.DeltaMember)
	var d bundle.Delta
	if err := json.Unmarshal(ms[i].data, &d); err != nil {
		t.Fatal(err)
	}
	d.FilesDigest = aRes.Manifest.FilesDigest()
	ms[i].data = mustJSON(t, d)
	ms[findMember(t, ms, bundle.DeltaSigMember)].data = ed25519.Sign(priv, ms[i].data)
	writeMembers(t, tampered, ms)
	if err := bundle.Verify(ctx, tampered, pub, nil); !errors.As(err, &ve) || ve.File != bundle.DeltaMember || !strings.Contains(ve.Reason, "belongs to another manifest") {
		t.Fatalf("a delta.json of another manifest: got %v", err)
	}
}

func checkAbsent(t *testing.T, dir string) {
	t.Helper()
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s exists after a refused extract", dir)
	}
	entries, _ := os.ReadDir(filepath.Dir(dir))
	for _, e := range entries {
		if strings.Contains(e.Name(), "unverified") {
			t.Errorf("staging folder %s left behind", e.Name())
		}
	}
}
