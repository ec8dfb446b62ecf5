package relayconn

import (
	"io"
	"net"
	"sync"
)

// copyBufs are relay copy buffers: large, so that a bulk transfer crosses
// each hop in few writes. A copy reads with one of idleBufs until a read
// fills it: an idle or interactive connection (a shell, an HTTP connection
// kept alive) holds 8 KiB while it waits, not 256.
var (
	copyBufs = sync.Pool{New: func() any { b := make([]byte, copyBufSize); return &b }}
	idleBufs = sync.Pool{New: func() any { b := make([]byte, idleBufSize); return &b }}
)

const (
	copyBufSize = 256 << 10
	idleBufSize = 8 << 10
)

// CopyBuffered copies src to dst, reading with a pooled 8 KiB buffer until a
// read fills it and with a 256 KiB one from then on. It does not use
// ReaderFrom or WriterTo: a TCP connection's, when the other side is not a
// socket it can splice to, copies 32 KiB at a time. It returns when src ends
// (nil error at EOF) or a write fails.
func CopyBuffered(dst io.Writer, src io.Reader) (int64, error) {
	written, bulk, err := copyIdle(dst, src)
	if !bulk {
		return written, err
	}
	buf := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(buf)
	n, _, err := copyWith(dst, src, *buf, false)
	return written + n, err
}

// copyIdle copies src to dst with a pooled 8 KiB buffer, each read written
// at once on the caller's goroutine, until the copy ends or a read fills
// the buffer: then bulk is set, and the caller goes on with larger ones.
func copyIdle(dst io.Writer, src io.Reader) (written int64, bulk bool, err error) {
	buf := idleBufs.Get().(*[]byte)
	defer idleBufs.Put(buf)
	return copyWith(dst, src, *buf, true)
}

// copyWith copies src to dst through buf until src ends (nil error at
// EOF) or a write fails, or, when untilFull is set, until a read fills buf
// (full is then set).
func copyWith(dst io.Writer, src io.Reader, buf []byte, untilFull bool) (written int64, full bool, err error) {
	for {
		n, rerr := src.Read(buf)
		w, err := writeFull(dst, buf[:n])
		written += int64(w)
		if err != nil {
			return written, false, err
		}
		if rerr != nil {
			return written, false, endOf(rerr)
		}
		if untilFull && n == len(buf) {
			return written, true, nil
		}
	}
}

// writeFull writes p to dst; a short write is an error.
func writeFull(dst io.Writer, p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	n, err := dst.Write(p)
	if err == nil && n < len(p) {
		err = io.ErrShortWrite
	}
	return n, err
}

// endOf is a copy's result for the read error that ended it: nil at EOF.
func endOf(err error) error {
	if err == io.EOF {
		return nil
	}
	return err
}

// CopyPipelined copies src to dst like CopyBuffered, but once a read fills
// the small buffer (a bulk transfer, not an interactive one), it reads the
// next chunk while the one before is being written: two 256 KiB buffers,
// and a goroutine that reads into one while the caller's writes the other.
// A hop whose reads and writes both cost (coderd reading a user's TLS
// connection and writing to an agent's) then uses two cores instead of one
// in turn. Until then it reads and writes on the caller's goroutine, as
// CopyBuffered does: the first bytes of a connection, and every keystroke,
// go out without waiting for another goroutine to be scheduled. It returns
// when src ends (nil error at EOF) or a write fails; the reading goroutine
// ends with src, which the caller closes after a failed write, as a relay
// closes both sides when either ends.
func CopyPipelined(dst io.Writer, src io.Reader) (int64, error) {
	written, bulk, err := copyIdle(dst, src)
	if !bulk {
		return written, err
	}
	type chunk struct {
		buf *[]byte
		n   int
		err error
	}
	free := make(chan *[]byte, 2)
	full := make(chan chunk, 1)
	done := make(chan struct{})
	defer close(done)
	free <- copyBufs.Get().(*[]byte)
	free <- copyBufs.Get().(*[]byte)
	go func() {
		defer close(full)
		for {
			var buf *[]byte
			select {
			case buf = <-free:
			case <-done:
				return
			}
			n, err := src.Read(*buf)
			select {
			case full <- chunk{buf, n, err}:
			case <-done:
				copyBufs.Put(buf)
				return
			}
			if err != nil {
				return
			}
		}
	}()
	for c := range full {
		n, err := writeFull(dst, (*c.buf)[:c.n])
		written += int64(n)
		if err != nil || c.err != nil {
			copyBufs.Put(c.buf)
			if err != nil {
				return written, err
			}
			return written, endOf(c.err)
		}
		free <- c.buf
	}
	return written, nil
}

// AfterWrite is Conn with Hook called after each write. Both ends of the
// relay that dial ahead (coder port-forward's prepared connections, the
// agent's spares) use it to dial the next once a connection's first bytes
// went back: dialing sooner competes with the connection for the CPU.
type AfterWrite struct {
	net.Conn
	Hook func()
}

func (w AfterWrite) Write(b []byte) (int, error) {
	n, err := w.Conn.Write(b)
	w.Hook()
	return n, err
}
