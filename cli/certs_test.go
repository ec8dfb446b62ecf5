package cli_test

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// writeCACert writes a self-signed CA certificate valid from notBefore to
// notAfter as PEM and returns the file.
func writeCACert(t *testing.T, cn string, notBefore, notAfter time.Time) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: notBefore, NotAfter: notAfter,
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestCertsCommands runs coder certs generate and import through the binary:
// usage errors exit 2, refused certificates exit 1 with their reason and
// leave trust.pem byte-identical.
func TestCertsCommands(t *testing.T) {
	dir := t.TempDir()
	env := baseEnv(t)
	trust := filepath.Join(dir, "certs", "trust.pem")

	usage := [][]string{
		{"certs", "generate", "--dir", dir},
		{"certs", "generate", "--hosts", "localhost"},
		{"certs", "generate", "--hosts", "https://x.corp", "--dir", dir},
		{"certs", "import", "--dir", dir},
		{"certs", "import", "x.pem"},
		{"certs", "frobnicate"},
	}
	for _, args := range usage {
		if _, stderr, code := run(t, env, args...); code != 2 {
			t.Errorf("coder %s: exit %d, want 2\n%s", strings.Join(args, " "), code, stderr)
		}
	}

	out := mustRun(t, env, "certs", "generate", "--hosts", "mirror.corp,127.0.0.1", "--dir", dir)
	for _, want := range []string{"created the appliance CA", "issued " + filepath.Join(dir, "certs", "server.pem") + " for mirror.corp, 127.0.0.1", "trust store " + trust} {
		if !strings.Contains(out, want) {
			t.Errorf("certs generate output lacks %q:\n%s", want, out)
		}
	}
	out = mustRun(t, env, "certs", "generate", "--hosts", "127.0.0.1,mirror.corp", "--dir", dir)
	if !strings.Contains(out, "kept ") {
		t.Errorf("second certs generate: want the certificate kept:\n%s", out)
	}

	good := writeCACert(t, "Corp Root", time.Now().Add(-time.Hour), time.Now().Add(5*365*24*time.Hour))
	// The directory may come from the environment too.
	out = mustRun(t, baseEnv(t, "CODER_APPLIANCE_DIR="+dir), "certs", "import", good)
	if !strings.Contains(out, `imported "CN=Corp Root"`) {
		t.Errorf("certs import output:\n%s", out)
	}
	before, err := os.ReadFile(trust)
	if err != nil {
		t.Fatal(err)
	}

	garbage := filepath.Join(t.TempDir(), "garbage.pem")
	os.WriteFile(garbage, []byte("not a certificate\n"), 0o644)
	refused := []struct {
		name, file, want string
	}{
		{"expired CA", writeCACert(t, "Old Root", time.Now().Add(-48*time.Hour), time.Now().Add(-time.Hour)), "expired on"},
		{"leaf", filepath.Join(dir, "certs", "server.pem"), "not a CA certificate"},
		{"garbage", garbage, "not a certificate"},
		{"private key", filepath.Join(dir, "certs", "ca-key.pem"), "is a private key"},
	}
	for _, tt := range refused {
		t.Run(tt.name, func(t *testing.T) {
			_, stderr, code := run(t, env, "certs", "import", "--dir", dir, good, tt.file)
			if code != 1 || !strings.Contains(stderr, tt.want) || !strings.Contains(stderr, "nothing changed") {
				t.Errorf("exit %d, stderr %q; want 1 and a message containing %q", code, stderr, tt.want)
			}
			if strings.Count(strings.TrimSpace(stderr), "\n") != 0 {
				t.Errorf("stderr has more than one line:\n%s", stderr)
			}
			after, err := os.ReadFile(trust)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(after, before) {
				t.Error("trust.pem changed")
			}
		})
	}

	out = mustRun(t, env, "certs", "refresh", "--dir", dir)
	if !strings.Contains(out, "trust store") {
		t.Errorf("certs refresh output:\n%s", out)
	}
	if after, _ := os.ReadFile(trust); !bytes.Equal(after, before) {
		t.Error("certs refresh changed trust.pem although nothing else changed")
	}
}
