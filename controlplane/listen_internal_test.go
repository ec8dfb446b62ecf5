package controlplane

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"testing"
	"time"

	"airgapcoder/coderd/appurl"
	"airgapcoder/internal/bodydeadline/bodydeadlinetest"
)

// TestHTTPServerBodyDeadline: the public listeners' server cuts a client
// that sends a body a byte a second within the body deadline (plus slack),
// also on handlers that are not the API's (the plain HTTP listener's
// redirect, which never reads the body: net/http would read it before
// answering), and keeps serving requests without a body.
func TestHTTPServerBodyDeadline(t *testing.T) {
	t.Parallel()
	const deadline = time.Second
	const slack = 4 * time.Second
	target, _ := url.Parse("https://coder.example.internal")
	health := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "OK") })
	srv := newHTTPServer(redirectToHTTPS(target, appurl.Wildcard{}, health), nil, slog.New(slog.DiscardHandler), deadline)
	if srv.ReadHeaderTimeout != 10*time.Second {
		t.Errorf("ReadHeaderTimeout: got %s, want 10s", srv.ReadHeaderTimeout)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		_ = srv.Close()
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("serve: %v", err)
		}
	})
	addr := ln.Addr().String()

	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	took, _ := bodydeadlinetest.SlowBody(t, conn, "POST /api/v2/users/login HTTP/1.1\nHost: "+addr+"\nContent-Length: 100\n", deadline+slack)
	if took > deadline+slack {
		t.Errorf("cut after %s, want within %s + %s", took, deadline, slack)
	}

	bodydeadlinetest.HealthzOK(t, http.DefaultClient, "http://"+addr+"/healthz")
}
