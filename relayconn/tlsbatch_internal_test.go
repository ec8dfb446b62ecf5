package relayconn

import (
	"bytes"
	"crypto/tls"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// writeCounter counts the writes that reach a connection.
type writeCounter struct {
	net.Conn
	mu     sync.Mutex
	writes int
}

func (c *writeCounter) Write(p []byte) (int, error) {
	c.mu.Lock()
	c.writes++
	c.mu.Unlock()
	return c.Conn.Write(p)
}

func (c *writeCounter) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.writes
}

// TestRecordBatcher: a 1 MiB write on a TLS connection over a batcher
// reaches the socket in a few writes (one per batch buffer, not one per
// 16 KiB record), the other end reads the same bytes, and outside a batch
// (the handshake, a write on the TLS connection itself) every write goes
// through at once.
func TestRecordBatcher(t *testing.T) {
	ln := tlsListener(t)
	payload := make([]byte, 1<<20)
	for i := range payload {
		payload[i] = byte(i * 7)
	}
	got := readAllOfOne(ln)
	tcp, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	counter := &writeCounter{Conn: tcp}
	batcher := &recordBatcher{Conn: counter}
	tc := tls.Client(batcher, &tls.Config{InsecureSkipVerify: true}) // the test's own server
	_ = tc.SetDeadline(time.Now().Add(10 * time.Second))
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	if counter.count() == 0 {
		t.Fatal("the handshake wrote nothing to the socket")
	}

	before := counter.count()
	if n, err := batchedWrite(batcher, tc.Write, payload[:256<<10]); n != 256<<10 || err != nil {
		t.Fatalf("batched write: %d, %v", n, err)
	}
	if w := counter.count() - before; w != 1 {
		t.Errorf("a 256 KiB batched write (16 records) took %d writes to the socket, want 1", w)
	}
	before = counter.count()
	if n, err := batchedWrite(batcher, tc.Write, payload[256<<10:]); n != len(payload)-256<<10 || err != nil {
		t.Fatalf("batched write: %d, %v", n, err)
	}
	if w := counter.count() - before; w < 3 || w > 4 {
		t.Errorf("a 768 KiB batched write took %d writes to the socket, want 3 or 4 (one per full batch buffer)", w)
	}
	if batcher.buf != nil {
		t.Error("the batch buffer is still held after the write")
	}
	before = counter.count()
	if _, err := tc.Write([]byte("unbatched")); err != nil {
		t.Fatal(err)
	}
	if w := counter.count() - before; w != 1 {
		t.Errorf("a write outside a batch took %d writes, want 1, at once", w)
	}
	_ = tc.Close()
	if b := <-got; !bytes.Equal(b, append(append([]byte(nil), payload...), "unbatched"...)) {
		t.Fatalf("the server read %d bytes, not the %d written", len(b), len(payload)+len("unbatched"))
	}
}

// readAllOfOne accepts one connection on ln and sends everything it reads
// from it, to its end (nil when the accept fails).
func readAllOfOne(ln net.Listener) <-chan []byte {
	got := make(chan []byte, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- nil
			return
		}
		defer c.Close()
		b, _ := io.ReadAll(c)
		got <- b
	}()
	return got
}
