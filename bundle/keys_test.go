package bundle_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"airgapcoder/bundle"
)

func TestKeys(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "keys")
	pubPath, keyPath, err := bundle.GenerateKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	for path, mode := range map[string]os.FileMode{keyPath: 0o600, pubPath: 0o644} {
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != mode {
			t.Errorf("%s: mode %v, want %v", filepath.Base(path), st.Mode().Perm(), mode)
		}
	}
	before, _ := os.ReadFile(keyPath)
	if _, _, err := bundle.GenerateKey(dir); err == nil || !strings.Contains(err.Error(), "refusing to overwrite") {
		t.Errorf("second GenerateKey: got %v, want a refusal", err)
	}
	if after, _ := os.ReadFile(keyPath); !bytes.Equal(before, after) {
		t.Error("second GenerateKey changed bundle.key")
	}
	priv, err := bundle.LoadPrivateKey(keyPath)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := bundle.LoadPublicKey(pubPath)
	if err != nil {
		t.Fatal(err)
	}
	if !pub.Equal(priv.Public()) {
		t.Error("bundle.pub does not match bundle.key")
	}
	if _, err := bundle.LoadPublicKey(keyPath); err == nil {
		t.Error("LoadPublicKey(bundle.key): got nil, want an error")
	}
	if _, err := bundle.LoadPrivateKey(pubPath); err == nil {
		t.Error("LoadPrivateKey(bundle.pub): got nil, want an error")
	}
	if got := dirContents(t, dir); len(got) != 2 {
		t.Errorf("key folder holds %q, want the two key files only", got)
	}

	// The signature and key ID can be checked with standard tools.
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Fatal("openssl is not installed (scripts/install-deps.sh installs it)")
	}
	files := testPayload(t)
	res, err := bundle.Write(context.Background(), bundle.WriteOptions{PayloadDir: makePayload(t, files), OutputDir: t.TempDir(), Manifest: testManifest(files), Key: priv})
	if err != nil {
		t.Fatal(err)
	}
	ms := readMembers(t, res.Path)
	tmp := t.TempDir()
	os.WriteFile(filepath.Join(tmp, "manifest.json"), ms[0].data, 0o644)
	os.WriteFile(filepath.Join(tmp, "manifest.sig"), ms[1].data, 0o644)
	out, err := exec.Command("openssl", "pkeyutl", "-verify", "-pubin", "-inkey", pubPath, "-rawin",
		"-in", filepath.Join(tmp, "manifest.json"), "-sigfile", filepath.Join(tmp, "manifest.sig")).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "Success") {
		t.Errorf("openssl pkeyutl -verify: %v\n%s", err, out)
	}
	der, err := exec.Command("openssl", "pkey", "-pubin", "-in", pubPath, "-outform", "DER").Output()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := "sha256:"+sum(der), bundle.KeyID(pub); got != want || res.Manifest.KeyID != want {
		t.Errorf("key ID: openssl gives %s, KeyID %s, manifest %s", got, want, res.Manifest.KeyID)
	}
}
