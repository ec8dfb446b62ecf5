// Package bodydeadlinetest sends a request whose body crawls, for the tests
// of every server that bounds its bodies (package bodydeadline), and checks
// that such a server still answers a request without a body.
package bodydeadlinetest

import (
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// SlowBody writes head (a request's lines, "\n"-separated, Content-Length
// among them) on conn, then its body one byte a second (a space, which a
// JSON decoder takes as the start of more to come, so what ends the request
// is the deadline, not a syntax error), and returns how long
// the server took to end the connection and what it answered. It fails the
// test when the connection is still open after limit.
func SlowBody(t testing.TB, conn net.Conn, head string, limit time.Duration) (time.Duration, string) {
	t.Helper()
	start := time.Now()
	if _, err := io.WriteString(conn, strings.ReplaceAll(strings.TrimSuffix(head, "\n"), "\n", "\r\n")+"\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	defer close(done)
	go func() {
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				if _, err := conn.Write([]byte(" ")); err != nil { // whitespace: valid before any JSON value
					return
				}
			}
		}
	}()
	_ = conn.SetReadDeadline(start.Add(limit))
	got, err := io.ReadAll(conn)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the connection is still open after %s (got %q so far): the body has no deadline", limit, got)
	}
	return time.Since(start), string(got)
}

// HealthzOK fails the test unless a GET of url (a server's /healthz) with
// client answers 200 with "OK" in its body: a server that cut the slow
// bodies still serves a request without one.
func HealthzOK(t testing.TB, client *http.Client, url string) {
	t.Helper()
	res, err := client.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK || !strings.Contains(string(body), "OK") {
		t.Errorf("GET %s: got %d %q, want 200 OK", url, res.StatusCode, body)
	}
}
