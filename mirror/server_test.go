package mirror

import (
	"crypto/tls"
	"net/http"
	"testing"
	"time"

	"airgapcoder/internal/bodydeadline/bodydeadlinetest"
	"airgapcoder/internal/testtier"
)

// TestServerBodyDeadline: a client that sends a request body a byte a
// second, over the mirror's real HTTPS listener, is cut off within the body
// deadline (plus slack) on every service, while a download (no body) is
// served as usual.
func TestServerBodyDeadline(t *testing.T) {
	testtier.Heavy(t, "waits out 1 s body deadlines in real time")
	t.Parallel()
	const deadline = time.Second
	const slack = 4 * time.Second
	m := startMirror(t, t.TempDir(), func(o *ServerOptions) { o.BodyReadTimeout = deadline })
	addr, store := m.addr, m.store

	for _, tc := range []struct{ name, head string }{
		{"registry blob upload", "POST /v2/library/app/blobs/uploads/ HTTP/1.1"},
		{"registry manifest", "PUT /v2/library/app/manifests/1.0 HTTP/1.1"},
		{"provider mirror", "POST /terraform/providers/registry.terraform.io/coder/coder/index.json HTTP/1.1"},
		{"module registry", "POST " + ModulesPath + " HTTP/1.1"},
		{"healthz", "POST /healthz HTTP/1.1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: store.Pool(), ServerName: "127.0.0.1"})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = conn.Close() })
			took, _ := bodydeadlinetest.SlowBody(t, conn, tc.head+"\nHost: "+addr+"\nContent-Length: 100\n", deadline+slack)
			if took > deadline+slack {
				t.Errorf("cut after %s, want within %s + %s", took, deadline, slack)
			}
		})
	}

	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: store.Pool()}}}
	bodydeadlinetest.HealthzOK(t, client, "https://"+addr+"/healthz")
}
