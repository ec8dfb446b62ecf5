package codersdk_test

import (
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"airgapcoder/codersdk"
)

// A client from NewHTTPClient resumes its TLS session on a new connection
// to the same server (each relay connection is one), and still verifies
// the server: one its CA does not sign is refused.
func TestNewHTTPClientResumesSessions(t *testing.T) {
	var mu sync.Mutex
	var resumed []bool
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		resumed = append(resumed, r.TLS.DidResume)
		mu.Unlock()
	}))
	defer srv.Close()
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	hc, err := codersdk.NewHTTPClient(ca)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
		req.Close = true // a new connection each time
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	mu.Lock()
	defer mu.Unlock()
	if len(resumed) != 3 || resumed[0] || !resumed[1] || !resumed[2] {
		t.Fatalf("resumed per connection: %v, want a full handshake, then resumptions", resumed)
	}

	other, err := codersdk.NewHTTPClient(nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp, err := other.Get(srv.URL); err == nil {
		resp.Body.Close()
		t.Fatal("a client without the server's CA connected")
	}
}
