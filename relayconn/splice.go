package relayconn

import (
	"io"
	"sync"
)

// SpliceOptions say how Splice copies and when it closes. The zero value
// copies both ways with CopyBuffered and closes both sides as soon as
// either copy ends, as every hop of the relay does.
type SpliceOptions struct {
	// Pipelined copies a to b with CopyPipelined instead of CopyBuffered:
	// for a hop whose reads of a and writes to b both cost (coderd reading
	// a user's TLS connection and writing to an agent's).
	Pipelined bool
	// HalfClose lets a's end of stream (a read of io.EOF: its peer stopped
	// sending) end only the a→b copy: b's bytes still flow to a until b
	// ends, for a client whose local connection half-closes and waits for
	// the reply. b is not told (a relay connection cannot pass a
	// half-close on). A failed read of a or write to b still closes both.
	HalfClose bool
}

// Splice copies a to b and b to a until SpliceOptions' close rules end
// the connection, closes a and b (each once, whichever rule fires) and
// returns the bytes copied each way once both copies are over:
//
//   - b→a ends (b's end of stream, a failed read of b or write to a):
//     both close.
//   - a→b fails (a failed read of a or write to b): both close.
//   - a→b ends at a's end of stream: both close, unless HalfClose is set;
//     then b→a goes on and its end closes both.
//
// a→b runs on the caller's goroutine: a connection's first bytes, already
// waiting in a, leave without waiting for a new goroutine to be scheduled
// (hundreds of µs on a busy machine). b→a runs on a goroutine of its own
// that Splice waits for, so nothing it starts outlives it. Closing a or b
// from outside (a shutdown) ends both copies.
func Splice(a, b io.ReadWriteCloser, opts SpliceOptions) (ab, ba int64) {
	var once sync.Once
	closeBoth := func() {
		once.Do(func() {
			_ = a.Close()
			_ = b.Close()
		})
	}
	down := make(chan int64, 1)
	go func() {
		n, _ := CopyBuffered(a, b)
		closeBoth()
		down <- n
	}()
	up := CopyBuffered
	if opts.Pipelined {
		up = CopyPipelined
	}
	ab, err := up(b, a)
	if err != nil || !opts.HalfClose {
		closeBoth()
	}
	return ab, <-down
}
