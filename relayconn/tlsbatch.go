package relayconn

import (
	"errors"
	"net"
	"sync"
	"syscall"
)

// A TLS connection writes every record, 16 KiB of data at most, with a
// syscall of its own: a 256 KiB relay write over HTTPS cost 16 writes to
// the socket, and as many wake-ups of the process reading the other end.
// Relay connections over TLS, dialed or accepted, gather the records of
// each Write and send them in one syscall (recordBatcher.batch). Nothing
// waits for more bytes than one Write gives, so latency is unchanged: the
// bytes of a Write are on their way when it returns, as before.
//
// The batcher sits under the TLS connection, as the TCP connection the TLS
// layer writes to: DialUpgrade puts it there, and a server
// puts it there with BatchingListener. Until a relay connection asks, it
// passes every write through, so the HTTP served over the same
// connections before an upgrade is untouched.

// batchBufSize holds a copy buffer's worth of records with their overhead
// (TLS 1.3 adds 22 bytes to each 16 KiB record).
const batchBufSize = copyBufSize + 4<<10

var batchBufs = sync.Pool{New: func() any { b := make([]byte, 0, batchBufSize); return &b }}

// BatchingListener returns ln whose connections let relay connections
// served over TLS on them batch their records (see AcceptUpgrade).
// Wrap the TCP listener, under the TLS one.
func BatchingListener(ln net.Listener) net.Listener { return batchingListener{ln} }

type batchingListener struct{ net.Listener }

func (l batchingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &recordBatcher{Conn: c}, nil
}

// recordBatcher is the connection under a TLS connection. Within batch it
// gathers what the TLS layer writes, records, and sends it at the end in
// one write; outside, it writes through.
type recordBatcher struct {
	net.Conn
	mu      sync.Mutex
	batches int     // batch calls in progress
	buf     *[]byte // gathered records, while batches > 0
}

func (c *recordBatcher) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.batches == 0 {
		return c.Conn.Write(p)
	}
	if len(*c.buf)+len(p) > cap(*c.buf) {
		if err := c.flushLocked(); err != nil {
			return 0, err
		}
		if len(p) > cap(*c.buf) {
			return c.Conn.Write(p)
		}
	}
	*c.buf = append(*c.buf, p...)
	return len(p), nil
}

// batch calls write, which writes to the TLS connection over c, and sends
// the records it made in one write. A record another goroutine writes
// meanwhile (an alert) keeps its place among them.
func (c *recordBatcher) batch(write func() (int, error)) (int, error) {
	c.mu.Lock()
	if c.batches == 0 {
		c.buf = batchBufs.Get().(*[]byte)
	}
	c.batches++
	c.mu.Unlock()

	n, err := write()

	c.mu.Lock()
	defer c.mu.Unlock()
	ferr := c.flushLocked()
	if c.batches--; c.batches == 0 {
		*c.buf = (*c.buf)[:0]
		batchBufs.Put(c.buf)
		c.buf = nil
	}
	if err == nil && ferr != nil {
		// The TLS layer took the bytes, the socket did not.
		return 0, ferr
	}
	return n, err
}

func (c *recordBatcher) flushLocked() error {
	b := *c.buf
	if len(b) == 0 {
		return nil
	}
	*c.buf = b[:0]
	_, err := c.Conn.Write(b)
	return err
}

// SyscallConn gives the socket's, so that reads can look at its queue
// (fillReads).
func (c *recordBatcher) SyscallConn() (syscall.RawConn, error) {
	if sc, ok := c.Conn.(syscall.Conn); ok {
		return sc.SyscallConn()
	}
	return nil, errors.New("not a socket")
}

// batchedWrite writes p with write, in one batch of b's when b is set.
func batchedWrite(b *recordBatcher, write func([]byte) (int, error), p []byte) (int, error) {
	if b == nil {
		return write(p)
	}
	return b.batch(func() (int, error) { return write(p) })
}
