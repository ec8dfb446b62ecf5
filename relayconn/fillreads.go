package relayconn

import (
	"io"
	"net"
	"syscall"
)

// A TLS connection's Read returns at most one record, 16 KiB, however
// large the buffer: a relay copying from it wrote 16 KiB at a time to the
// next hop, and every write costs a yamux frame, a hand-off to yamux's
// send loop and a syscall (uploads through the appliance's HTTPS relay ran
// at half the speed of downloads). Relay connections over TLS, dialed or
// accepted (upgradedConn), make such a read go on while the socket already
// holds more (fillReads), so a burst crosses the next hop in as few writes
// as the buffer allows, and a read still never waits for bytes that have
// not arrived.

// minFill is the least buffer space worth another read: a full record.
const minFill = 16<<10 + 256

// fillReads reads r, whose bytes arrive on the socket of conn, filling
// each read with what that socket already holds; r itself when conn is no
// socket.
func fillReads(r io.Reader, conn net.Conn) io.Reader {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return r
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return r
	}
	return &fillingReader{r: r, raw: raw}
}

type fillingReader struct {
	r   io.Reader
	raw syscall.RawConn
	err error // met after bytes were read: the next read returns it
}

func (f *fillingReader) Read(p []byte) (int, error) {
	if f.err != nil {
		return 0, f.err
	}
	n, err := f.r.Read(p)
	for err == nil && len(p)-n >= minFill && socketHolds(f.raw) {
		var m int
		m, err = f.r.Read(p[n:])
		n += m
	}
	if n > 0 && err != nil {
		f.err, err = err, nil
	}
	return n, err
}
