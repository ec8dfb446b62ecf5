package certs

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"airgapcoder/internal/testfs"
)

func TestGenerate(t *testing.T) {
	dir := t.TempDir()
	opts, _ := fakeSystem(t)
	cdir := CertsDir(dir)
	hosts := []string{"mirror.corp.internal", "10.1.2.3"}

	res, err := Generate(dir, hosts, opts)
	if err != nil {
		t.Fatal(err)
	}
	if !res.CACreated || !res.Issued {
		t.Fatalf("first run: got CACreated=%v Issued=%v, want both", res.CACreated, res.Issued)
	}
	for name, want := range map[string]os.FileMode{CAFile: 0o644, CAKeyFile: 0o600, ServerFile: 0o644, ServerKeyFile: 0o600, TrustFile: 0o644} {
		st, err := os.Stat(filepath.Join(cdir, name))
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != want {
			t.Errorf("%s: mode %v, want %v", name, st.Mode().Perm(), want)
		}
	}
	if leftovers := testfs.Names(t, cdir); len(leftovers) != 5 {
		t.Errorf("certs/: got %v, want exactly the five files (no temporary files)", leftovers)
	}

	ca := res.CA
	pub, ok := ca.PublicKey.(*ecdsa.PublicKey)
	switch {
	case !ok || pub.Curve != elliptic.P256():
		t.Errorf("CA key: got %T, want ECDSA P-256", ca.PublicKey)
	case !ca.IsCA || !ca.BasicConstraintsValid || !ca.MaxPathLenZero:
		t.Errorf("CA constraints: IsCA=%v valid=%v MaxPathLenZero=%v", ca.IsCA, ca.BasicConstraintsValid, ca.MaxPathLenZero)
	case ca.NotAfter.Sub(time.Now()) < 9*365*24*time.Hour:
		t.Errorf("CA validity: until %s, want about 10 years", ca.NotAfter)
	}
	srv := res.Server
	if d := srv.NotAfter.Sub(time.Now()); d < 360*24*time.Hour || d > 366*24*time.Hour {
		t.Errorf("server validity: %s, want about a year", d)
	}

	store, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(readFile(t, store.CertFile()), readFile(t, filepath.Join(cdir, CAFile))) {
		t.Error("trust.pem lacks the appliance CA")
	}
	for _, h := range hosts {
		if _, err := srv.Verify(x509.VerifyOptions{Roots: store.Pool(), DNSName: h}); err != nil {
			t.Errorf("server certificate for %s: %v", h, err)
		}
	}
	if _, err := srv.Verify(x509.VerifyOptions{Roots: store.Pool(), DNSName: "other.corp"}); err == nil {
		t.Error("server certificate verifies for a host it was not issued for")
	}

	snapshot := func() map[string][]byte {
		m := map[string][]byte{}
		for _, n := range []string{CAFile, CAKeyFile, ServerFile, ServerKeyFile, TrustFile} {
			m[n] = readFile(t, filepath.Join(cdir, n))
		}
		return m
	}
	first := snapshot()

	// Same hosts (another order, another case): nothing changes.
	res, err = Generate(dir, []string{"10.1.2.3", "MIRROR.corp.internal"}, opts)
	if err != nil {
		t.Fatal(err)
	}
	if res.CACreated || res.Issued {
		t.Errorf("rerun: got CACreated=%v Issued=%v (%s), want neither", res.CACreated, res.Issued, res.Reason)
	}
	for n, b := range snapshot() {
		if !bytes.Equal(b, first[n]) {
			t.Errorf("rerun changed %s", n)
		}
	}

	// Another host list: a new server certificate from the same CA.
	res, err = Generate(dir, []string{"mirror.corp.internal"}, opts)
	if err != nil {
		t.Fatal(err)
	}
	if res.CACreated || !res.Issued || !strings.Contains(res.Reason, "hosts changed") {
		t.Errorf("host change: got CACreated=%v Issued=%v reason %q", res.CACreated, res.Issued, res.Reason)
	}
	if !bytes.Equal(readFile(t, filepath.Join(cdir, CAFile)), first[CAFile]) {
		t.Error("host change replaced the CA")
	}

	// Within 30 days of expiry: renewed.
	later := Options{SystemBundle: opts.SystemBundle, Now: func() time.Time { return time.Now().Add(340 * 24 * time.Hour) }}
	res, err = Generate(dir, []string{"mirror.corp.internal"}, later)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Issued || !strings.Contains(res.Reason, "expires") {
		t.Errorf("near expiry: got Issued=%v reason %q, want a renewal", res.Issued, res.Reason)
	}

	// Bad hosts are refused before anything is written.
	for _, bad := range []string{"https://x.corp", "x.corp:8443", "a b", "-x.corp"} {
		if _, err := Generate(dir, []string{bad}, opts); !errors.Is(err, ErrInvalidHost) {
			t.Errorf("host %q: got %v, want ErrInvalidHost", bad, err)
		}
	}
}

func TestEnsureServer(t *testing.T) {
	opts, _ := fakeSystem(t)

	t.Run("generates when missing, widens its own", func(t *testing.T) {
		dir := t.TempDir()
		res, err := EnsureServer(dir, []string{"localhost", "127.0.0.1"}, opts)
		if err != nil || !res.CACreated || !res.Issued {
			t.Fatalf("got %+v, %v; want a new CA and certificate", res, err)
		}
		res, err = EnsureServer(dir, []string{"localhost"}, opts)
		if err != nil || res.Issued {
			t.Fatalf("covered hosts: got Issued=%v, %v; want the certificate kept", res.Issued, err)
		}
		res, err = EnsureServer(dir, []string{"mirror.corp"}, opts)
		if err != nil || !res.Issued {
			t.Fatalf("new host: got Issued=%v, %v; want a new certificate", res.Issued, err)
		}
		if got := strings.Join(certHosts(res.Server), ","); got != "127.0.0.1,localhost,mirror.corp" {
			t.Errorf("hosts: got %s, want the old ones plus the new one", got)
		}
	})

	t.Run("keeps the site's certificate", func(t *testing.T) {
		dir := t.TempDir()
		siteCA := makeCert(t, certSpec{cn: "Site CA", ca: true})
		site := makeCert(t, certSpec{cn: "mirror.site", dnsNames: []string{"mirror.site"}, parent: &siteCA})
		writeServer(t, dir, site)
		res, err := EnsureServer(dir, []string{"mirror.site", "localhost"}, opts)
		if err != nil {
			t.Fatal(err)
		}
		if res.Issued || res.CACreated || !strings.Contains(res.Reason, "localhost") {
			t.Errorf("got Issued=%v CACreated=%v reason %q; want the site's certificate kept, with a note about localhost", res.Issued, res.CACreated, res.Reason)
		}
		if !bytes.Equal(readFile(t, filepath.Join(CertsDir(dir), ServerFile)), site.pem()) {
			t.Error("the site's server.pem was replaced")
		}
		if _, err := os.Stat(filepath.Join(CertsDir(dir), TrustFile)); err != nil {
			t.Errorf("trust.pem not created: %v", err)
		}
	})

	t.Run("repairs its own pair, refuses to touch a broken site pair", func(t *testing.T) {
		dir := t.TempDir()
		if _, err := EnsureServer(dir, []string{"localhost"}, opts); err != nil {
			t.Fatal(err)
		}
		// A key that does not match server.pem (say, a write cut short).
		other := makeCert(t, certSpec{cn: "x", ca: true})
		keyPath := filepath.Join(CertsDir(dir), ServerKeyFile)
		if err := os.WriteFile(keyPath, other.keyPEM(t), 0o600); err != nil {
			t.Fatal(err)
		}
		res, err := EnsureServer(dir, []string{"localhost"}, opts)
		if err != nil || !res.Issued {
			t.Fatalf("mismatched own pair: got Issued=%v, %v; want a new certificate", res.Issued, err)
		}
		if _, err := LoadServerCertificate(dir); err != nil {
			t.Errorf("after repair: %v", err)
		}

		site := t.TempDir()
		siteCA := makeCert(t, certSpec{cn: "Site CA", ca: true})
		writeServer(t, site, makeCert(t, certSpec{cn: "s", dnsNames: []string{"localhost"}, parent: &siteCA}))
		if err := os.WriteFile(filepath.Join(CertsDir(site), ServerKeyFile), other.keyPEM(t), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := EnsureServer(site, []string{"localhost"}, opts); err == nil || !strings.Contains(err.Error(), "fix server.pem") {
			t.Errorf("broken site pair: got %v, want a refusal", err)
		}
	})

	t.Run("CA without its key", func(t *testing.T) {
		dir := t.TempDir()
		if _, err := Generate(dir, []string{"localhost"}, opts); err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(filepath.Join(CertsDir(dir), CAKeyFile)); err != nil {
			t.Fatal(err)
		}
		if _, err := Generate(dir, []string{"other"}, opts); err == nil || !strings.Contains(err.Error(), "remove both") {
			t.Errorf("got %v, want an error about the CA pair", err)
		}
	})

	t.Run("refuses the site's expired certificate", func(t *testing.T) {
		dir := t.TempDir()
		siteCA := makeCert(t, certSpec{cn: "Site CA", ca: true, notBefore: time.Now().Add(-1000 * time.Hour)})
		old := makeCert(t, certSpec{cn: "old", dnsNames: []string{"localhost"}, parent: &siteCA,
			notBefore: time.Now().Add(-900 * time.Hour), notAfter: time.Now().Add(-time.Hour)})
		writeServer(t, dir, old)
		if _, err := EnsureServer(dir, []string{"localhost"}, opts); err == nil || !strings.Contains(err.Error(), "expired") {
			t.Errorf("got %v, want an error saying server.pem expired", err)
		}
	})
}

func writeServer(t *testing.T, dir string, c testCert) {
	t.Helper()
	cdir := CertsDir(dir)
	if err := os.MkdirAll(cdir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cdir, ServerFile), c.pem(), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cdir, ServerKeyFile), c.keyPEM(t), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestHTTPClient checks the store's client trusts the appliance CA, and a
// store without it refuses the same server.
func TestHTTPClient(t *testing.T) {
	opts, _ := fakeSystem(t)
	dir := t.TempDir()
	if _, err := Generate(dir, []string{"localhost", "127.0.0.1"}, opts); err != nil {
		t.Fatal(err)
	}
	cert, err := LoadServerCertificate(dir)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "hi") }))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.StartTLS()
	t.Cleanup(srv.Close)

	store, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := store.HTTPClient().Get(srv.URL)
	if err != nil {
		t.Fatalf("GET with the trust store: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "hi" {
		t.Errorf("body: got %q, want hi", body)
	}

	other := t.TempDir()
	if err := Refresh(other, opts); err != nil {
		t.Fatal(err)
	}
	without, err := Load(other)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := without.HTTPClient().Get(srv.URL); err == nil || !strings.Contains(err.Error(), "x509") {
		t.Errorf("GET without the CA: got %v, want an x509 error", err)
	}
}

// TestNoSkipVerify keeps verification switches out of the packages that make
// outbound connections.
func TestNoSkipVerify(t *testing.T) {
	var files []string
	for _, pattern := range []string{"*.go", "../mirror/*.go", "../cli/certs.go", "../cli/mirror.go"} {
		m, err := filepath.Glob(pattern)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		if bytes.Contains(readFile(t, f), []byte("Insecure"+"SkipVerify")) {
			t.Errorf("%s mentions Insecure"+"SkipVerify", f)
		}
	}
}
