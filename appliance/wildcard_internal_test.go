package appliance

import (
	"crypto/x509"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"airgapcoder/certs"
	"airgapcoder/internal/egress"
	"airgapcoder/internal/testpki"
)

// TestConfigWildcardAccessURL: wildcard-access-url is read from
// appliance.yaml, checked as coder server checks it, and its wildcard
// name is one the serving certificate must cover.
func TestConfigWildcardAccessURL(t *testing.T) {
	for _, tt := range []struct{ value, wantErr string }{
		{"*.apps.example.internal", ""},
		{"*-apps.example.internal", ""},
		{"apps.example.internal", "wildcard-access-url"},
		{"https://*.apps.example.internal", "without a scheme"},
	} {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, ConfigFile), []byte("wildcard-access-url: \""+tt.value+"\"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		c, err := LoadConfig(dir, nil)
		if tt.wantErr == "" {
			if err != nil || c.WildcardAccessURL != tt.value {
				t.Errorf("wildcard-access-url %q: got %q, %v", tt.value, c.WildcardAccessURL, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("wildcard-access-url %q: got %v, want an error containing %q", tt.value, err, tt.wantErr)
		}
	}
}

// TestWildcardCertificate: with wildcard-access-url the certificate the
// appliance CA issues covers the app hosts (and the egress guard takes the
// name); a site's certificate that does not is refused, naming the
// wildcard.
func TestWildcardCertificate(t *testing.T) {
	cfg := DefaultConfig()
	cfg.AccessURL = "https://coder.example.internal:3443"
	cfg.WildcardAccessURL = "*.apps.example.internal"
	w, err := cfg.wildcard()
	if err != nil {
		t.Fatal(err)
	}
	hosts := []string{"localhost", "127.0.0.1", cfg.AccessHost(), w.CertificateName()}
	if _, err := egress.New(hosts, nil); err != nil {
		t.Fatalf("egress guard with the wildcard name: %v", err)
	}
	dir := t.TempDir()
	issued, err := certs.EnsureServer(dir, hosts, certs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := checkAdvertisedNames(issued.Server, cfg); err != nil {
		t.Errorf("the appliance's own certificate: %v", err)
	}
	if err := issued.Server.VerifyHostname("web--main--dev--alice.apps.example.internal"); err != nil {
		t.Errorf("an app host: %v", err)
	}

	site := siteCertificate(t, "coder.example.internal", "127.0.0.1")
	err = checkAdvertisedNames(site, cfg)
	if err == nil || !strings.Contains(err.Error(), "*.apps.example.internal") || !strings.Contains(err.Error(), "subdomain apps") {
		t.Errorf("a site certificate without the wildcard: got %v, want a refusal naming *.apps.example.internal", err)
	}
	if err := checkAdvertisedNames(siteCertificate(t, "coder.example.internal", "127.0.0.1", "*.apps.example.internal"), cfg); err != nil {
		t.Errorf("a site certificate with the wildcard: %v", err)
	}
}

func siteCertificate(t *testing.T, names ...string) *x509.Certificate {
	t.Helper()
	return testpki.SelfSigned(t, time.Now().Add(-time.Hour), time.Now().Add(time.Hour), names...).Leaf
}
