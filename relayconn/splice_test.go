package relayconn_test

import (
	"bytes"
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"airgapcoder/relayconn"
)

// tcpPair returns the two ends of a loopback TCP connection, closed when
// the test ends.
func tcpPair(t *testing.T) (dialed, accepted *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	acceptc := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		acceptc <- c
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s := <-acceptc
	if s == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { _ = c.Close(); _ = s.Close() })
	return c.(*net.TCPConn), s.(*net.TCPConn)
}

// closedByPeer reports whether c's peer closed the connection: a read ends
// at EOF (or a reset, when the peer closed with bytes unread) within 10 s.
func closedByPeer(t *testing.T, c net.Conn) bool {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	n, err := io.Copy(io.Discard, c)
	if n > 0 {
		t.Errorf("%d unexpected bytes before the end", n)
	}
	return err == nil || errors.Is(err, syscall.ECONNRESET)
}

// readN reads n bytes from c within 10 s.
func readN(t *testing.T, c net.Conn, n int) []byte {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	b := make([]byte, n)
	if _, err := io.ReadFull(c, b); err != nil {
		t.Fatalf("read %d bytes: %v", n, err)
	}
	return b
}

// TestSpliceCloseRules splices a (the user's, or local, side) and b over
// real sockets, makes one side end or fail, and checks which sides Splice
// closes, whether replies still flow, and what it counted. Each rule runs
// with CopyBuffered and with CopyPipelined uploads, after 1 MiB went up
// (a bulk transfer, so the pipelined copy's reader is running).
func TestSpliceCloseRules(t *testing.T) {
	t.Parallel()
	up := bytes.Repeat([]byte("0123456789abcdef"), 64<<10) // 1 MiB, a→b
	down := []byte("world")                                // b→a
	reply := []byte("reply after the end")                 // b→a, after a's end
	for _, tc := range []struct {
		name      string
		halfClose bool
		// end makes something end: aPeer and bPeer are the far ends of a
		// and b, aEnd is a itself.
		end func(aPeer, bPeer *net.TCPConn, aEnd net.Conn)
		// replyFlows: after end, b's bytes still reach a's peer, and
		// Splice returns only once b ends.
		replyFlows bool
		aReset     bool // a's peer reset its side: nothing to read there
	}{
		{name: "a ends, full close", end: func(a, _ *net.TCPConn, _ net.Conn) { _ = a.CloseWrite() }},
		{name: "a ends, half close", halfClose: true, replyFlows: true, end: func(a, _ *net.TCPConn, _ net.Conn) { _ = a.CloseWrite() }},
		{name: "b ends, full close", end: func(_, b *net.TCPConn, _ net.Conn) { _ = b.CloseWrite() }},
		{name: "b ends, half close", halfClose: true, end: func(_, b *net.TCPConn, _ net.Conn) { _ = b.CloseWrite() }},
		{name: "a fails, full close", aReset: true, end: resetConn},
		{name: "a fails, half close", halfClose: true, aReset: true, end: resetConn},
		{name: "a closed by a shutdown, half close", halfClose: true, end: func(_, _ *net.TCPConn, a net.Conn) { _ = a.Close() }},
	} {
		for _, pipelined := range []bool{false, true} {
			name := tc.name
			if pipelined {
				name += ", pipelined"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				aPeer, aEnd := tcpPair(t)
				bEnd, bPeer := tcpPair(t)
				type counts struct{ ab, ba int64 }
				done := make(chan counts, 1)
				go func() {
					ab, ba := relayconn.Splice(aEnd, bEnd, relayconn.SpliceOptions{Pipelined: pipelined, HalfClose: tc.halfClose})
					done <- counts{ab, ba}
				}()
				go func() { _, _ = aPeer.Write(up) }()
				if got := readN(t, bPeer, len(up)); !bytes.Equal(got, up) {
					t.Fatal("the upload arrived changed")
				}
				if _, err := bPeer.Write(down); err != nil {
					t.Fatal(err)
				}
				if got := readN(t, aPeer, len(down)); !bytes.Equal(got, down) {
					t.Fatalf("got %q down, want %q", got, down)
				}

				tc.end(aPeer, bPeer, aEnd)

				wantBA := int64(len(down))
				if tc.replyFlows {
					select {
					case <-done:
						t.Fatal("Splice returned at a's end; want it to wait for b's")
					default:
					}
					if _, err := bPeer.Write(reply); err != nil {
						t.Fatalf("b's peer writes after a's end: %v", err)
					}
					if got := readN(t, aPeer, len(reply)); !bytes.Equal(got, reply) {
						t.Fatalf("got %q after a's end, want %q", got, reply)
					}
					wantBA += int64(len(reply))
					_ = bPeer.CloseWrite()
				}
				if !closedByPeer(t, bPeer) {
					t.Error("b is still open, want it closed")
				}
				if !tc.aReset && !closedByPeer(t, aPeer) {
					t.Error("a is still open, want it closed")
				}
				select {
				case got := <-done:
					if got.ab != int64(len(up)) || got.ba != wantBA {
						t.Errorf("Splice counted %d up, %d down; want %d, %d", got.ab, got.ba, len(up), wantBA)
					}
				case <-time.After(10 * time.Second):
					t.Fatal("Splice did not return after both sides closed")
				}
			})
		}
	}
}

// resetConn closes a's peer with a reset, so that reading a fails (not a
// clean end).
func resetConn(a, _ *net.TCPConn, _ net.Conn) {
	_ = a.SetLinger(0)
	_ = a.Close()
}
