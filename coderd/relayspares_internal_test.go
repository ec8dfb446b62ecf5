package coderd

import (
	"net"
	"testing"
	"time"

	"airgapcoder/internal/testwait"
	"airgapcoder/relayconn"
)

// tcpPair returns both ends of a loopback TCP connection.
func tcpPair(t *testing.T) (dialed, accepted net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	dialed, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if accepted, err = ln.Accept(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dialed.Close(); accepted.Close() })
	return dialed, accepted
}

// A spare the agent closed while it waited is thrown away, never handed
// to a user's connection: take returns a live one, or none; a session full
// of closed spares takes new ones; and none is kept after the session.
func TestSparesSkipClosed(t *testing.T) {
	var s spares
	_, live := tcpPair(t)
	agentGone, gone := tcpPair(t)
	if !s.add(live) || !s.add(gone) {
		t.Fatal("add refused a spare below the limit")
	}
	agentGone.Close()
	testwait.For(t, 5*time.Second, "the agent's FIN on coderd's side", testwait.Bool(func() bool { return !relayconn.Quiet(gone) }))
	if got := s.take(); got != live {
		t.Fatalf("take returned %v, want the live spare", got)
	}
	if got := s.take(); got != nil {
		t.Fatalf("take returned %v after the only live spare was taken, want nil", got)
	}
	// The closed one was closed on coderd's side too.
	if _, err := gone.Write([]byte{0}); err == nil {
		t.Error("the closed spare is still open on coderd's side")
	}

	// Full of spares the agent closed: a new one is still kept.
	var closed []net.Conn
	for range maxSpares {
		a, c := tcpPair(t)
		if !s.add(c) {
			t.Fatal("add refused a spare below the limit")
		}
		a.Close()
		closed = append(closed, c)
	}
	for _, c := range closed {
		testwait.For(t, 5*time.Second, "the agent's FIN on coderd's side", testwait.Bool(func() bool { return !relayconn.Quiet(c) }))
	}
	_, fresh := tcpPair(t)
	if !s.add(fresh) {
		t.Fatal("a session full of closed spares refused a live one")
	}
	if got := s.take(); got != fresh {
		t.Fatalf("take returned %v, want the live spare", got)
	}
	// Full of live ones: one more is refused.
	for range maxSpares {
		_, c := tcpPair(t)
		if !s.add(c) {
			t.Fatal("add refused a spare below the limit")
		}
	}
	if _, c := tcpPair(t); s.add(c) {
		t.Error("add kept more than maxSpares live spares")
	}
	s.close()
	if _, c := tcpPair(t); s.add(c) {
		t.Error("add kept a spare after the session ended")
	}
}
