package relayconn_test

import (
	"encoding/binary"
	"io"
	"net"
	"sync"
	"testing"

	"github.com/hashicorp/yamux"

	"airgapcoder/relayconn"
)

// writeRecorder records the size and first bytes of every write.
type writeRecorder struct {
	net.Conn
	mu     sync.Mutex
	writes [][]byte
}

func (w *writeRecorder) Write(p []byte) (int, error) {
	w.mu.Lock()
	w.writes = append(w.writes, append([]byte(nil), p...))
	w.mu.Unlock()
	return w.Conn.Write(p)
}

// Every yamux data frame leaves in one write: its header and its whole
// body together, never a header alone.
func TestCoalescedYamuxConn(t *testing.T) {
	a, b := net.Pipe()
	rec := &writeRecorder{Conn: a}
	client, err := yamux.Client(relayconn.CoalescedYamuxConn(rec), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	server, err := yamux.Server(b, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()
	done := make(chan []byte)
	go func() {
		s, err := server.Accept()
		if err != nil {
			done <- nil
			return
		}
		got, _ := io.ReadAll(s)
		done <- got
	}()
	s, err := client.Open()
	if err != nil {
		t.Fatal(err)
	}
	sent := 0
	for _, n := range []int{1, 1000, 100_000, 300_000} {
		if _, err := s.Write(make([]byte, n)); err != nil {
			t.Fatal(err)
		}
		sent += n
	}
	_ = s.Close()
	if got := <-done; len(got) != sent {
		t.Fatalf("received %d bytes, sent %d", len(got), sent)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	frames := 0
	for _, w := range rec.writes {
		if len(w) < 12 {
			t.Fatalf("a write of %d bytes: shorter than a yamux header", len(w))
		}
		typ, length := w[1], binary.BigEndian.Uint32(w[8:12])
		if typ == 0 && length > 0 {
			frames++
			if len(w) != 12+int(length) {
				t.Errorf("data frame of %d bytes left in a write of %d: want header and body together (%d)", length, len(w), 12+length)
			}
		}
	}
	if frames < 4 {
		t.Errorf("%d data frames recorded, want at least one per write", frames)
	}
}
