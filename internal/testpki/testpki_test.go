package testpki_test

import (
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"airgapcoder/internal/testpki"
)

// TestServe: a server with the certificate is trusted by a client with the
// CA's pool, and by no other.
func TestServe(t *testing.T) {
	p, err := testpki.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{p.Cert}}
	srv.StartTLS()
	t.Cleanup(srv.Close)

	for _, tc := range []struct {
		name    string
		config  *tls.Config
		wantErr string
	}{
		{"trusting the CA", &tls.Config{RootCAs: p.CertPool()}, ""},
		{"system roots", &tls.Config{}, "x509: certificate signed by unknown authority"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := &http.Transport{TLSClientConfig: tc.config}
			t.Cleanup(tr.CloseIdleConnections)
			resp, err := (&http.Client{Transport: tr}).Get(srv.URL)
			if err == nil {
				resp.Body.Close()
			}
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("got %v, want success", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("got %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
}

// TestSelfSigned: the certificate names what it was asked for, is valid
// exactly in its window, verifies against a pool that holds only itself,
// and its key is the one that goes with it.
func TestSelfSigned(t *testing.T) {
	notBefore := time.Now().Add(-time.Hour).Truncate(time.Second)
	notAfter := notBefore.Add(48 * time.Hour)
	c := testpki.SelfSigned(t, notBefore, notAfter, "eu.example", "*.apps.eu.example", "127.0.0.2")
	leaf := c.Leaf
	if leaf.Subject.CommonName != "eu.example" || !slices.Equal(leaf.DNSNames, []string{"eu.example", "*.apps.eu.example"}) ||
		len(leaf.IPAddresses) != 1 || leaf.IPAddresses[0].String() != "127.0.0.2" {
		t.Errorf("got CN %q, DNS names %v, IPs %v; want eu.example, [eu.example *.apps.eu.example], [127.0.0.2]", leaf.Subject.CommonName, leaf.DNSNames, leaf.IPAddresses)
	}
	if !leaf.NotBefore.Equal(notBefore) || !leaf.NotAfter.Equal(notAfter) {
		t.Errorf("valid from %v to %v, want %v to %v", leaf.NotBefore, leaf.NotAfter, notBefore, notAfter)
	}
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	for _, name := range []string{"eu.example", "x.apps.eu.example", "127.0.0.2"} {
		if _, err := leaf.Verify(x509.VerifyOptions{DNSName: name, Roots: pool}); err != nil {
			t.Errorf("verify for %s: %v", name, err)
		}
	}
	if _, err := leaf.Verify(x509.VerifyOptions{DNSName: "us.example", Roots: pool}); err == nil {
		t.Error("verify for us.example: no error, want one")
	}
	if _, err := leaf.Verify(x509.VerifyOptions{DNSName: "eu.example", Roots: pool, CurrentTime: notAfter.Add(time.Minute)}); err == nil {
		t.Error("verify after NotAfter: no error, want one")
	}
	priv, ok := c.PrivateKey.(*ecdsa.PrivateKey)
	if !ok || !priv.PublicKey.Equal(leaf.PublicKey) {
		t.Errorf("the private key (%T) does not go with the certificate", c.PrivateKey)
	}
}
