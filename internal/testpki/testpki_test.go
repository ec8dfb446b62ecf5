package testpki_test

import (
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

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
