package relayconn

import (
	"encoding/binary"
	"io"
	"sync"
)

// StreamWindow is the yamux stream window both ends of a relay session
// use: large enough that a bulk transfer does not wait for window updates
// on loopback-fast links (docs/relay.md, Transport).
const StreamWindow = 8 << 20

// yamuxHeaderSize is the size of a yamux frame header: version, type,
// flags, stream id and length.
const yamuxHeaderSize = 12

// CoalescedYamuxConn wraps the connection a yamux session runs on so that
// each data frame's header and body, which yamux writes with two calls,
// leave in one write: one syscall (and one TLS record, or one WebSocket
// message) per frame instead of two. It knows yamux's frame header, not
// the library.
func CoalescedYamuxConn(conn io.ReadWriteCloser) io.ReadWriteCloser {
	return &coalescingConn{ReadWriteCloser: conn}
}

type coalescingConn struct {
	io.ReadWriteCloser
	mu      sync.Mutex
	pending []byte // a data frame's header, waiting for its body
	buf     []byte
}

func (c *coalescingConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pending == nil {
		// A data frame (type 0) with a body to come: hold its header.
		if len(p) == yamuxHeaderSize && p[1] == 0 && binary.BigEndian.Uint32(p[8:12]) > 0 {
			c.pending = append(c.buf[:0], p...)
			return len(p), nil
		}
		return c.ReadWriteCloser.Write(p)
	}
	frame := append(c.pending, p...)
	c.pending = nil
	n, err := c.ReadWriteCloser.Write(frame)
	c.buf = frame[:0]
	if n -= yamuxHeaderSize; n < 0 {
		n = 0
	}
	return n, err
}
