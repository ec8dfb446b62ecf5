package bundle

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"runtime/debug"
	"sync"
)

// hashBehind is a sha256 that hashes on a goroutine of its own what its
// Write was given, a chunk behind: the writer pays for a copy, not for the
// hash, so writing a bundle hashes its members and its stream on the
// machine's other cores while it reads and writes. Bytes that stay put
// until the hash is done, such as a memory-mapped file, are lent instead
// (lend) and not even copied.
type hashBehind struct {
	h     hash.Hash
	items chan hashItem
	done  chan struct{}
	stop  func() // closes items and waits for the goroutine, once
	fault error  // set by the goroutine: a lent page could not be read
}

// hashItem is one piece of work for the hashing goroutine: a pooled copy,
// lent bytes, or a function to call once everything before it is hashed.
type hashItem struct {
	copied *[]byte
	lent   []byte
	then   func()
}

// hashChunk is the size of the chunks handed to the hashing goroutine.
const hashChunk = 256 << 10

var hashChunks = sync.Pool{New: func() any { b := make([]byte, hashChunk); return &b }}

func newHashBehind() *hashBehind {
	hb := &hashBehind{h: sha256.New(), items: make(chan hashItem, 8), done: make(chan struct{})}
	hb.stop = sync.OnceFunc(func() {
		close(hb.items)
		<-hb.done
	})
	go hb.run()
	return hb
}

func (hb *hashBehind) run() {
	defer close(hb.done)
	// Lent bytes may be a file's pages: a file cut short under its map
	// makes reading them fault, which must fail the hash, not the process.
	debug.SetPanicOnFault(true)
	for it := range hb.items {
		if it.lent != nil && hb.fault == nil {
			hb.hashLent(it.lent)
		}
		if it.copied != nil {
			hb.h.Write(*it.copied)
			*it.copied = (*it.copied)[:cap(*it.copied)]
			hashChunks.Put(it.copied)
		}
		if it.then != nil {
			it.then()
		}
	}
}

func (hb *hashBehind) hashLent(p []byte) {
	defer func() { hb.fault = faultError(recover()) }()
	hb.h.Write(p)
}

// faultError turns what recover returned in a goroutine that reads mapped
// memory with debug.SetPanicOnFault set into an error when it is a fault;
// other panics go on.
func faultError(r any) error {
	if r == nil {
		return nil
	}
	if _, ok := r.(interface{ Addr() uintptr }); !ok {
		panic(r)
	}
	return fmt.Errorf("read a mapped file (cut short while it was written?): %v", r)
}

func (hb *hashBehind) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		b := hashChunks.Get().(*[]byte)
		k := copy(*b, p)
		*b = (*b)[:k]
		hb.items <- hashItem{copied: b}
		p = p[k:]
	}
	return n, nil
}

// lend hashes p without copying it: p must not change before a function
// passed to then after it runs.
func (hb *hashBehind) lend(p []byte) { hb.items <- hashItem{lent: p} }

// then calls fn on the hashing goroutine once everything written or lent
// before is hashed (or, after a fault, skipped).
func (hb *hashBehind) then(fn func()) { hb.items <- hashItem{then: fn} }

// Sum waits for the hash of everything written and returns it as hex.
// Write must not be called after.
func (hb *hashBehind) Sum() (string, error) {
	hb.stop()
	if hb.fault != nil {
		return "", hb.fault
	}
	return hex.EncodeToString(hb.h.Sum(nil)), nil
}

// close stops the hashing goroutine; after Sum, or twice, it does nothing.
func (hb *hashBehind) close() { hb.stop() }
