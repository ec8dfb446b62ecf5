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
	if got := hb.Sum(); got != hex.EncodeToString(want[:]) {
		t.Fatalf("sum %x, want %x", got, want)
	}
	empty := newHashBehind()
	if got, want := empty.Sum(), sha256.Sum256(nil); got != hex.EncodeToString(want[:]) {
		t.Fatalf("sum of nothing %x, want %x", got, want)
	}
}
