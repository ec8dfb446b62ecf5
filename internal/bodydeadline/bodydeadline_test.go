package bodydeadline

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestWrapEndsWithTheBody: once a body has been read, the
// deadline no longer applies: a handler that works for longer than it
// keeps its request's context and answers, and a connection taken over
// after a request with a body does not inherit it.
func TestWrapEndsWithTheBody(t *testing.T) {
	t.Parallel()
	const d = 300 * time.Millisecond
	srv := httptest.NewServer(Wrap(d, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if r.URL.Path == "/hijack" {
			conn, buf, err := http.NewResponseController(w).Hijack()
			if err != nil {
				t.Errorf("hijack: %v", err)
				return
			}
			defer conn.Close()
			_, _ = buf.WriteString("HTTP/1.1 101 Switching Protocols\r\n\r\n")
			_ = buf.Flush()
			line, err := buf.ReadString('\n') // sent by the client after 3 deadlines
			if err != nil {
				t.Errorf("read the taken-over connection: %v", err)
				return
			}
			_, _ = conn.Write([]byte("echo " + line))
			return
		}
		select {
		case <-time.After(3 * d): // a handler slower than the deadline
		case <-r.Context().Done():
			t.Errorf("the request's context ended while its handler worked: %v", r.Context().Err())
			return
		}
		_, _ = w.Write(body)
	})))
	t.Cleanup(srv.Close)

	res, err := http.Post(srv.URL+"/work", "text/plain", strings.NewReader("hello"))
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK || string(got) != "hello" {
		t.Errorf("slow handler: got %d %q, want 200 \"hello\"", res.StatusCode, got)
	}

	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(conn, "POST /hijack HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	if status, err := br.ReadString('\n'); err != nil || !strings.Contains(status, "101") {
		t.Fatalf("hijack: got %q %v, want 101", status, err)
	}
	_, _ = br.ReadString('\n')
	time.Sleep(3 * d) // paces the client: quiet on an upgraded connection past the body deadline, not a wait for the server
	if _, err := io.WriteString(conn, "ping\n"); err != nil {
		t.Fatal(err)
	}
	if echo, err := br.ReadString('\n'); err != nil || echo != "echo ping\n" {
		t.Errorf("taken-over connection after 3 deadlines: got %q %v, want \"echo ping\"", echo, err)
	}
}

// TestWrapHTTP2: over HTTP/2 the deadline is the stream's: a
// body that stalls fails to read at the deadline, and the stream is
// answered, while the connection's other streams go on.
func TestWrapHTTP2(t *testing.T) {
	t.Parallel()
	const d = 300 * time.Millisecond
	srv := httptest.NewUnstartedServer(Wrap(d, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err != nil {
			http.Error(w, err.Error(), http.StatusRequestTimeout)
			return
		}
		_, _ = io.WriteString(w, r.Proto)
	})))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	client := srv.Client()

	body, stall := io.Pipe()
	t.Cleanup(func() { _ = stall.Close() })
	go func() { _, _ = stall.Write([]byte("x")) }() // one byte, then nothing
	start := time.Now()
	res, err := client.Post(srv.URL, "text/plain", body)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if took := time.Since(start); res.ProtoMajor != 2 || res.StatusCode != http.StatusRequestTimeout || took > d+4*time.Second {
		t.Errorf("stalled body: got %s %d after %s, want HTTP/2 408 within %s + 4s", res.Proto, res.StatusCode, took, d)
	}

	res, err = client.Post(srv.URL, "text/plain", strings.NewReader("hello"))
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK || string(got) != "HTTP/2.0" {
		t.Errorf("next stream: got %d %q, want 200 over HTTP/2.0", res.StatusCode, got)
	}
}
