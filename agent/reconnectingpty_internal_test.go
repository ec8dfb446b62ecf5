package agent

import (
	"bytes"
	"testing"
)

// TestRing: the ring keeps exactly the last ptyRingSize bytes, whatever
// the sizes of the writes.
func TestRing(t *testing.T) {
	for _, tc := range []struct {
		name   string
		writes []int
	}{
		{"Empty", nil},
		{"Small", []int{1, 10, 100}},
		{"ExactlyFull", []int{ptyRingSize}},
		{"OneWriteOverflows", []int{10, 3*ptyRingSize + 7}},
		{"ManyWritesOverflow", []int{4096, 4096, 40000, 30000, 60000, 1, 65535, 2, 20000}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r ring
			var all []byte
			for i, n := range tc.writes {
				p := bytes.Repeat([]byte{byte('a' + i)}, n)
				p[0] = '<'
				r.write(p)
				all = append(all, p...)
				if len(r.buf) > 2*ptyRingSize {
					t.Fatalf("after write %d: got a buffer of %d bytes, want at most %d", i, len(r.buf), 2*ptyRingSize)
				}
			}
			want := all[max(0, len(all)-ptyRingSize):]
			if got := r.bytes(); !bytes.Equal(got, want) {
				t.Errorf("got %d bytes kept, want the last %d written", len(got), len(want))
			}
		})
	}
}
