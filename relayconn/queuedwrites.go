package relayconn

import (
	"net"
	"sync"
	"time"
)

// queuedWritesLimit bounds what a QueuedWrites connection holds that its
// peer has not been sent yet: one relay copy buffer.
const queuedWritesLimit = copyBufSize

// queuedWritesDrain bounds how long a closed QueuedWrites connection goes
// on sending what was queued before it closed.
const queuedWritesDrain = 5 * time.Second

// QueuedWrites returns conn with writes that return once their bytes are
// queued: a goroutine of the connection's own sends what gathered since its
// last send in one write. It is for a writer that sends many flushed
// messages in a row, such as an SSH transport (two writes per packet: 4 KiB,
// then the rest) over a yamux stream (whose every write waits for its
// session's send loop): the writer goes on to its next message while the
// last one travels, and what gathered meanwhile leaves together, one frame
// and one syscall for several. Bytes leave in the order written,
// and each write's bytes together even with several writers, as on a socket.
//
// At most 256 KiB wait; a write beyond that waits for room. A failed send
// fails the writes after it (the connection is broken anyway). Close
// returns at once, as a TCP socket's does: what is queued is still sent,
// for at most 5 s, and then conn is closed. Write does not honor deadlines
// (SetWriteDeadline applies to the sends).
func QueuedWrites(conn net.Conn) net.Conn {
	q := &queuedConn{Conn: conn}
	q.cond = sync.NewCond(&q.mu)
	go q.sendLoop()
	return q
}

type queuedConn struct {
	net.Conn

	// writing makes each Write whole in the stream, as a socket's is, even
	// when it waits for room while other writers wait too.
	writing sync.Mutex

	mu      sync.Mutex
	cond    *sync.Cond // broadcast when bytes are queued or taken, a send fails, or Close
	queued  *[]byte    // nil when nothing waits; else a buffer of copyBufs
	err     error      // why a send failed
	closing bool
}

func (q *queuedConn) Write(p []byte) (int, error) {
	q.writing.Lock()
	defer q.writing.Unlock()
	q.mu.Lock()
	defer q.mu.Unlock()
	n := 0
	for len(p) > 0 {
		for q.err == nil && !q.closing && q.queued != nil && len(*q.queued) == queuedWritesLimit {
			q.cond.Wait()
		}
		switch {
		case q.err != nil:
			return n, q.err
		case q.closing:
			return n, net.ErrClosed
		}
		if q.queued == nil {
			q.queued = copyBufs.Get().(*[]byte)
			*q.queued = (*q.queued)[:0]
		}
		k := min(len(p), queuedWritesLimit-len(*q.queued))
		*q.queued = append(*q.queued, p[:k]...)
		p, n = p[k:], n+k
		q.cond.Broadcast()
	}
	return n, nil
}

// sendLoop sends what is queued, all of it in one write, until a send
// fails or the connection is closed and nothing is left; then it closes
// conn.
func (q *queuedConn) sendLoop() {
	defer q.Conn.Close()
	q.mu.Lock()
	defer q.mu.Unlock()
	for {
		for q.queued == nil && !q.closing {
			q.cond.Wait()
		}
		if q.queued == nil {
			return // closed, and everything was sent
		}
		out := q.queued
		q.queued = nil
		q.cond.Broadcast() // room for writers
		q.mu.Unlock()
		_, err := q.Conn.Write(*out)
		*out = (*out)[:cap(*out)]
		copyBufs.Put(out)
		q.mu.Lock()
		if err != nil {
			q.err = err
			q.cond.Broadcast()
			return
		}
	}
}

// Close stops writes and returns; the send loop sends what is queued (for
// at most queuedWritesDrain) and closes the connection.
func (q *queuedConn) Close() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closing {
		return net.ErrClosed
	}
	q.closing = true
	q.cond.Broadcast()
	_ = q.Conn.SetWriteDeadline(time.Now().Add(queuedWritesDrain))
	return nil
}
