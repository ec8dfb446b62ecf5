package bundle_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io/fs"
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

// TestLoadKeyErrors: a key file that cannot be used is a *KeyError that
// names the file, says what is wrong and what to pass instead.
func TestLoadKeyErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	pubPath, keyPath, err := bundle.GenerateKey(filepath.Join(dir, "keys"))
	if err != nil {
		t.Fatal(err)
	}
	ec, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ecPubDER, _ := x509.MarshalPKIXPublicKey(&ec.PublicKey)
	ecPrivDER, _ := x509.MarshalPKCS8PrivateKey(ec)
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	pemOf := func(typ string, der []byte) []byte { return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}) }
	missing := filepath.Join(dir, "nope.pub")
	text := write("notes.txt", []byte("not a key\n"))
	cert := write("ca.pem", pemOf("CERTIFICATE", []byte("x")))
	ecPub := write("ec.pub", pemOf("PUBLIC KEY", ecPubDER))
	ecKey := write("ec.key", pemOf("PRIVATE KEY", ecPrivDER))
	garbage := write("garbage.pub", pemOf("PUBLIC KEY", []byte("x")))
	tests := []struct {
		name   string
		public bool
		path   string
		want   string
	}{
		{"PublicMissing", true, missing, "bundle: public key " + missing + ": no such file (coder bundle keygen writes bundle.pub)"},
		{"PublicNotPEM", true, text, "bundle: public key " + text + `: not a PEM file (want a "PUBLIC KEY" block): pass the bundle.pub that coder bundle keygen wrote`},
		{"PublicIsPrivate", true, keyPath, "bundle: public key " + keyPath + ": holds a PRIVATE KEY, want a PUBLIC KEY: pass bundle.pub, not bundle.key"},
		{"PublicIsCertificate", true, cert, "bundle: public key " + cert + `: holds a "CERTIFICATE" PEM block, want a "PUBLIC KEY": pass the bundle.pub that coder bundle keygen wrote`},
		{"PublicNotEd25519", true, ecPub, "bundle: public key " + ecPub + ": an ECDSA key, want an ed25519 key"},
		{"PublicGarbage", true, garbage, "bundle: public key " + garbage + ": not a PKIX public key"},
		{"PrivateIsPublic", false, pubPath, "bundle: private key " + pubPath + ": holds a PUBLIC KEY, want a PRIVATE KEY: pass bundle.key, not bundle.pub"},
		{"PrivateNotEd25519", false, ecKey, "bundle: private key " + ecKey + ": an ECDSA key, want an ed25519 key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var err error
			if tt.public {
				_, err = bundle.LoadPublicKey(tt.path)
			} else {
				_, err = bundle.LoadPrivateKey(tt.path)
			}
			var ke *bundle.KeyError
			if !errors.As(err, &ke) || ke.Path != tt.path || ke.Public != tt.public {
				t.Fatalf("got %v (%T), want a *KeyError for %s", err, err, tt.path)
			}
			if !strings.HasPrefix(err.Error(), tt.want) {
				t.Errorf("got  %s\nwant %s…", err, tt.want)
			}
		})
	}
	if _, err := bundle.LoadPublicKey(missing); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: got %v, want fs.ErrNotExist", err)
	}
}
