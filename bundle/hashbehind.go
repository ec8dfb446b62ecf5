package bundle

import (
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"sync"
)

// hashBehind is a sha256 that hashes on a goroutine of its own what its
// Write was given, a chunk behind: the writer pays for a copy, not for the
// hash, so writing a bundle hashes its members and its stream on the
// machine's other cores while it reads and writes.
type hashBehind struct {
	h      hash.Hash
	chunks chan *[]byte
	done   chan struct{}
	stop   func() // closes chunks and waits for the goroutine, once
}

// hashChunk is the size of the chunks handed to the hashing goroutine.
const hashChunk = 256 << 10

var hashChunks = sync.Pool{New: func() any { b := make([]byte, hashChunk); return &b }}

func newHashBehind() *hashBehind {
	hb := &hashBehind{h: sha256.New(), chunks: make(chan *[]byte, 8), done: make(chan struct{})}
	hb.stop = sync.OnceFunc(func() {
		close(hb.chunks)
		<-hb.done
	})
	go func() {
		defer close(hb.done)
		for b := range hb.chunks {
			hb.h.Write(*b)
			*b = (*b)[:cap(*b)]
			hashChunks.Put(b)
		}
	}()
	return hb
}

func (hb *hashBehind) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		b := hashChunks.Get().(*[]byte)
		k := copy(*b, p)
		*b = (*b)[:k]
		hb.chunks <- b
		p = p[k:]
	}
	return n, nil
}

// Sum waits for the hash of everything written and returns it as hex.
// Write must not be called after.
func (hb *hashBehind) Sum() string {
	hb.stop()
	return hex.EncodeToString(hb.h.Sum(nil))
}

// close stops the hashing goroutine; after Sum, or twice, it does nothing.
func (hb *hashBehind) close() { hb.stop() }
