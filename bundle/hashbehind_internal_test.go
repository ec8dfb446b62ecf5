package bundle

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"testing"
)

// TestHashBehind: the hash of what was written, in order, whatever the
// sizes of the writes (smaller and larger than a chunk).
func TestHashBehind(t *testing.T) {
	data := make([]byte, 3*hashChunk+12345)
	_, _ = rand.Read(data)
	want := sha256.Sum256(data)
	hb := newHashBehind()
	for rest, i := data, 0; len(rest) > 0; i++ {
		n := min(len(rest), []int{1, 1000, hashChunk + 7, 64 << 10}[i%4])
		if k, err := hb.Write(rest[:n]); k != n || err != nil {
			t.Fatalf("Write: %d, %v", k, err)
		}
		rest = rest[n:]
	}
	if got, err := hb.Sum(); err != nil || got != hex.EncodeToString(want[:]) {
		t.Fatalf("sum %x, %v; want %x", got, err, want)
	}
	empty := newHashBehind()
	if got, err := empty.Sum(); err != nil || got != hex.EncodeToString(sha256.New().Sum(nil)) {
		t.Fatalf("sum of nothing %x, %v", got, err)
	}
}

// TestHashBehindLend: lent bytes are hashed in their place among copied
// ones, and a function passed to then runs after the bytes lent before it
// were hashed, so that they may change only then.
func TestHashBehindLend(t *testing.T) {
	data := make([]byte, 5*hashChunk+99)
	_, _ = rand.Read(data)
	want := sha256.Sum256(data)
	lent := append([]byte(nil), data[1000:3*hashChunk]...)
	hb := newHashBehind()
	hb.Write(data[:1000])
	hb.lend(lent)
	released := make(chan struct{})
	hb.then(func() {
		clear(lent) // what a caller may do once then ran
		close(released)
	})
	hb.Write(data[3*hashChunk:])
	<-released
	if got, err := hb.Sum(); err != nil || got != hex.EncodeToString(want[:]) {
		t.Fatalf("sum %x, %v; want %x", got, err, want)
	}
}
