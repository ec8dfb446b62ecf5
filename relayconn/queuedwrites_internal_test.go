package relayconn

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
	"time"

	"airgapcoder/internal/testwait"
)

// gatedConn is a net.Conn whose writes wait until the test lets them go,
// recording what each one carried; reads are not used.
type gatedConn struct {
	net.Conn // nil: only Write, Close and SetWriteDeadline are called

	entered chan struct{} // a write arrived at the gate
	gate    chan struct{} // one receive lets one write through
	fail    error         // what every write returns, when set
	mu      sync.Mutex
	writes  [][]byte
	close   sync.Once
	closed  chan struct{}
}

func newGatedConn() *gatedConn {
	return &gatedConn{entered: make(chan struct{}, 16), gate: make(chan struct{}), closed: make(chan struct{})}
}

func (c *gatedConn) Write(p []byte) (int, error) {
	c.entered <- struct{}{}
	select {
	case <-c.gate:
	case <-c.closed:
		return 0, net.ErrClosed
	}
	if c.fail != nil {
		return 0, c.fail
	}
	c.mu.Lock()
	c.writes = append(c.writes, bytes.Clone(p))
	c.mu.Unlock()
	return len(p), nil
}

func (c *gatedConn) Close() error {
	c.close.Do(func() { close(c.closed) })
	return nil
}

// next waits for the next write to arrive at the gate.
func (c *gatedConn) next(t *testing.T) {
	t.Helper()
	select {
	case <-c.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("nothing was sent")
	}
}

func (c *gatedConn) SetWriteDeadline(time.Time) error { return nil }

func (c *gatedConn) recorded() [][]byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.writes
}

// queuedLoopback returns a QueuedWrites connection over loopback TCP and
// what its peer reads, to the end.
func queuedLoopback(t *testing.T) (net.Conn, <-chan []byte) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	got := readAllOfOne(ln)
	raw, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	return QueuedWrites(raw), got
}

// TestQueuedWritesOrder: everything written arrives, in order, whatever the
// sizes of the writes (an SSH transport's 4-byte prefixes and 32 KiB
// packets, and writes larger than the queue), and Close ends the stream
// after the last byte.
func TestQueuedWritesOrder(t *testing.T) {
	t.Parallel()
	conn, got := queuedLoopback(t)
	rng := rand.New(rand.NewPCG(3, 4))
	var want bytes.Buffer
	for want.Len() < 16<<20 {
		p := make([]byte, []int{4, 16, 4096, 32 << 10, 600 << 10}[rng.IntN(5)])
		for i := range p {
			p[i] = byte(rng.Uint32())
		}
		if n, err := conn.Write(p); n != len(p) || err != nil {
			t.Fatalf("write of %d bytes: %d, %v", len(p), n, err)
		}
		want.Write(p)
	}
	if err := conn.Close(); err != nil {
		t.Fatal(err)
	}
	b := <-got
	if !bytes.Equal(b, want.Bytes()) {
		t.Fatalf("the peer read %d bytes, want the %d written, in order", len(b), want.Len())
	}
	if _, err := conn.Write([]byte("late")); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("a write after Close: %v, want net.ErrClosed", err)
	}
}

// TestQueuedWritesGather: writes made while a send is on its way return at
// once and leave together, in one write of the connection below.
func TestQueuedWritesGather(t *testing.T) {
	t.Parallel()
	under := newGatedConn()
	conn := QueuedWrites(under)
	defer conn.Close()
	write := func(s string) {
		t.Helper()
		done := make(chan error, 1)
		go func() { _, err := conn.Write([]byte(s)); done <- err }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("write %q waited for the send before it", s)
		}
	}
	write("first")
	under.next(t) // the send loop took "first" and waits at the gate
	for _, s := range []string{"a", "bb", "ccc"} {
		write(s)
	}
	under.gate <- struct{}{} // "first" goes
	under.next(t)
	under.gate <- struct{}{} // then everything queued meanwhile
	conn.Close()
	<-under.closed // the send loop ended
	got := under.recorded()
	if len(got) != 2 || string(got[0]) != "first" || string(got[1]) != "abbccc" {
		t.Fatalf("the connection below was written %q, want [first abbccc]", got)
	}
}

// TestQueuedWritesLimit: a writer waits once 256 KiB wait to be sent, and
// Close releases it.
func TestQueuedWritesLimit(t *testing.T) {
	t.Parallel()
	under := newGatedConn()
	conn := QueuedWrites(under)
	done := make(chan error, 1)
	go func() {
		_, err := conn.Write(make([]byte, 1<<20)) // the gate never opens
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("a 1 MiB write returned (%v) with nothing sent", err)
	case <-time.After(50 * time.Millisecond):
	}
	conn.Close()
	defer under.Close() // the send stuck at the gate
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("the waiting write returned %v, want net.ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not release the waiting write")
	}
}

// TestQueuedWritesSendFails: once a send fails, writes return its error.
func TestQueuedWritesSendFails(t *testing.T) {
	t.Parallel()
	under := newGatedConn()
	under.fail = errors.New("connection reset")
	conn := QueuedWrites(under)
	defer conn.Close()
	if _, err := conn.Write([]byte("lost")); err != nil {
		t.Fatalf("the first write: %v (it only queues)", err)
	}
	under.next(t)
	under.gate <- struct{}{}
	testwait.For(t, 10*time.Second, "a write failing after the failed send", func() (bool, string) {
		_, err := conn.Write([]byte("x"))
		if err != nil && !errors.Is(err, under.fail) {
			t.Fatalf("write after the failed send: %v, want %v", err, under.fail)
		}
		return err != nil, "writes keep succeeding"
	})
}

// TestQueuedWritesWholeWrites: with several writers, each write's bytes
// stay together in the stream, also when a write is larger than the queue
// and waits for room in the middle.
func TestQueuedWritesWholeWrites(t *testing.T) {
	t.Parallel()
	conn, got := queuedLoopback(t)
	const writers, writes, size = 4, 10, 300 << 10
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			block := bytes.Repeat([]byte{byte('a' + w)}, size)
			for range writes {
				if _, err := conn.Write(block); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	conn.Close()
	b := <-got
	if len(b) != writers*writes*size {
		t.Fatalf("read %d bytes, want %d", len(b), writers*writes*size)
	}
	for off := 0; off < len(b); off += size {
		if block := b[off : off+size]; !bytes.Equal(block, bytes.Repeat(block[:1], size)) {
			t.Fatalf("the write at offset %d is mixed with another one", off)
		}
	}
}
