package appliance

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/pem"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"airgapcoder/certs"
)

// TestOverviewRedactedConfig: the overview's settings name every key of
// appliance.yaml (a new key cannot be forgotten) and hold no password.
func TestOverviewRedactedConfig(t *testing.T) {
	c := DefaultConfig()
	c.PostgresURL = "postgres://coder:planted-password@db.example.internal/coder?sslmode=verify-full&sslpassword=planted-ssl"
	c.EgressAllow = []string{"git.example.internal"}
	c.ProxySessionToken = "0d6e:planted-proxy-token" // a proxy's
	got := redactedConfig(c)
	for key := range knownKeys {
		if _, ok := got[key]; !ok {
			t.Errorf("the overview's settings lack %s: %v", key, got)
		}
	}
	if pg := got["postgres-url"]; pg != "postgres://coder:[redacted]@db.example.internal/coder?sslmode=verify-full&sslpassword=[redacted]" {
		t.Errorf("postgres-url: got %q", pg)
	}
	if got["provisioner-daemons"] != 3 || got["block-direct-connections"] != true || got["tls-address"] != "127.0.0.1:3443" ||
		!slices.Equal(got["egress-allow"].([]string), []string{"git.example.internal"}) {
		t.Errorf("got %v", got)
	}
	for k, v := range got {
		if s, ok := v.(string); ok && strings.Contains(s, "planted") {
			t.Errorf("%s holds a planted secret: %q", k, s)
		}
	}
}

// TestCertificatePEMs: every certificate that certs.List names has its PEM
// in the overview, under its fingerprint, and a key kept in the same file
// as a certificate is not shown.
func TestCertificatePEMs(t *testing.T) {
	dir := t.TempDir()
	if _, err := certs.Generate(dir, []string{"127.0.0.1"}, certs.Options{}); err != nil {
		t.Fatal(err)
	}
	server := filepath.Join(certs.CertsDir(dir), certs.ServerFile)
	cert, err := os.ReadFile(server)
	if err != nil {
		t.Fatal(err)
	}
	key, err := os.ReadFile(filepath.Join(certs.CertsDir(dir), certs.ServerKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(server, append(cert, key...), 0o600); err != nil {
		t.Fatal(err)
	}
	list, err := certs.List(dir)
	if err != nil {
		t.Fatal(err)
	}
	pems := certificatePEMs(dir)
	if len(list) != 2 || len(pems) != len(list) {
		t.Fatalf("got %d PEMs for %d listed certificates, want one for each of the CA and the serving certificate", len(pems), len(list))
	}
	for _, c := range list {
		block, rest := pem.Decode([]byte(pems[c.SHA256]))
		if block == nil || block.Type != "CERTIFICATE" || len(rest) != 0 {
			t.Errorf("%s: got %q, want one CERTIFICATE block", c.Role, pems[c.SHA256])
			continue
		}
		if sum := sha256.Sum256(block.Bytes); hex.EncodeToString(sum[:]) != c.SHA256 {
			t.Errorf("%s: the PEM's fingerprint is %x, want %s", c.Role, sum, c.SHA256)
		}
	}
	for fp, p := range pems {
		if strings.Contains(p, "PRIVATE KEY") {
			t.Errorf("%s: the overview shows a private key", fp)
		}
	}
}
