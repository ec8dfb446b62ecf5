package mirror

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"airgapcoder/certs"
)

// TestServerBodyDeadline: a client that sends a request body a byte a
// second, over the mirror's real HTTPS listener, is cut off within the body
// deadline (plus slack) on every service, while a download (no body) is
// served as usual.
func TestServerBodyDeadline(t *testing.T) {
	t.Parallel()
	const deadline = time.Second
	const slack = 4 * time.Second
	dir := t.TempDir()
	if _, err := certs.EnsureServer(dir, []string{"127.0.0.1"}, certs.Options{}); err != nil {
		t.Fatal(err)
	}
	store, err := certs.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := certs.LoadServerCertificate(dir)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := NewServer(ServerOptions{Dir: dir, Certificate: cert, Listener: ln, ShutdownTimeout: 5 * time.Second, BodyReadTimeout: deadline})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("server Run: %v", err)
		}
	})
	<-srv.Ready()
	addr := srv.Addr().String()

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
			start := time.Now()
			if _, err := io.WriteString(conn, tc.head+"\r\nHost: "+addr+"\r\nContent-Length: 100\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
			stop := make(chan struct{})
			defer close(stop)
			go func() {
				tick := time.NewTicker(time.Second)
				defer tick.Stop()
				for {
					select {
					case <-stop:
						return
					case <-tick.C:
						if _, err := conn.Write([]byte("x")); err != nil {
							return
						}
					}
				}
			}()
			_ = conn.SetReadDeadline(start.Add(deadline + slack))
			got, err := io.ReadAll(conn)
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("the connection is still open after %s (got %q so far): the body has no deadline", deadline+slack, got)
			}
			if took := time.Since(start); took > deadline+slack {
				t.Errorf("cut after %s, want within %s + %s", took, deadline, slack)
			}
		})
	}

	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: store.Pool()}}}
	res, err := client.Get("https://" + addr + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK || !strings.Contains(string(body), "OK") {
		t.Errorf("GET /healthz: got %d %q, want 200 OK", res.StatusCode, body)
	}
}
