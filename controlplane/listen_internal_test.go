package controlplane

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
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
	srv := newHTTPServer(redirectToHTTPS(target, health), nil, slog.New(slog.DiscardHandler), deadline)
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
	start := time.Now()
	if _, err := io.WriteString(conn, "POST /api/v2/users/login HTTP/1.1\r\nHost: "+addr+"\r\nContent-Length: 100\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
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
	close(stop)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the connection is still open after %s (got %q so far): the body has no deadline", deadline+slack, got)
	}
	if took := time.Since(start); took > deadline+slack {
		t.Errorf("cut after %s, want within %s + %s", took, deadline, slack)
	}

	res, err := http.Get("http://" + addr + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK || !strings.Contains(string(body), "OK") {
		t.Errorf("GET /healthz: got %d %q, want 200 OK", res.StatusCode, body)
	}
}
