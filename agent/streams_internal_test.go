package agent

import (
	"io"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/yamux"
)

// yamuxStreams returns both ends of one yamux stream over loopback TCP, as
// coderd (client) and the agent (server) hold them.
func yamuxStreams(t *testing.T) (coderdSide, agentSide net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	client, err := yamux.Client(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	server, err := yamux.Server(s, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close(); _ = server.Close() })
	coderdSide, err = client.Open()
	if err != nil {
		t.Fatal(err)
	}
	if agentSide, err = server.Accept(); err != nil {
		t.Fatal(err)
	}
	return coderdSide, agentSide
}

// TestForwardWaiting: what the stream holds goes to the target, the call
// does not wait for bytes that have not come, and reads wait as before
// afterwards.
func TestForwardWaiting(t *testing.T) {
	coderdSide, agentSide := yamuxStreams(t)
	if _, err := coderdSide.Write([]byte("GET / HTTP/1.1\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	// Wait until the bytes are in the agent's stream: a read of one byte
	// takes the first, the rest stay.
	var first [1]byte
	if _, err := io.ReadFull(agentSide, first[:]); err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond) // yamux hands over a frame whole; be sure: its buffer shows nothing outside
	target, targetPeer := net.Pipe()
	got := make(chan string, 1)
	go func() {
		b := make([]byte, 64)
		n, _ := targetPeer.Read(b)
		got <- string(b[:n])
	}()
	forwardWaitingReturns(t, agentSide, target, "with bytes held")
	select {
	case s := <-got:
		if s != "ET / HTTP/1.1\r\n\r\n" {
			t.Fatalf("the target got %q, want the bytes the stream held", s)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the target got nothing; want the bytes the stream held")
	}

	// Nothing held: it returns at once, and a read after it still waits
	// for what comes later (no deadline left behind).
	forwardWaitingReturns(t, agentSide, target, "with nothing held")
	_ = agentSide.SetReadDeadline(time.Time{}) // as the agent's answer does
	later := make(chan string, 1)
	go func() {
		b := make([]byte, 16)
		n, err := agentSide.Read(b)
		if err != nil {
			later <- err.Error()
			return
		}
		later <- string(b[:n])
	}()
	time.Sleep(50 * time.Millisecond) // the reader blocks in Read first: a blocked goroutine shows nothing outside
	if _, err := coderdSide.Write([]byte("more")); err != nil {
		t.Fatal(err)
	}
	if s := <-later; s != "more" {
		t.Fatalf("a read after forwardWaiting got %q, want %q", s, "more")
	}
}

// forwardWaitingReturns runs forwardWaiting and fails unless it returns nil
// without waiting for bytes that nobody sends.
func forwardWaitingReturns(t *testing.T, stream, target net.Conn, what string) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- forwardWaiting(stream, target) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("forwardWaiting %s: %v", what, err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("forwardWaiting %s waited for bytes that were never sent", what)
	}
}
