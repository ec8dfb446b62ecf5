package syncbuf_test

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"

	"airgapcoder/internal/syncbuf"
)

var _ io.Writer = (*syncbuf.Buffer)(nil)

// TestConcurrentWriters: lines written from many goroutines while another
// reads all arrive, none torn (run with -race to check the locking).
func TestConcurrentWriters(t *testing.T) {
	t.Parallel()
	const writers, lines = 8, 200
	var b syncbuf.Buffer
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range lines {
				fmt.Fprintf(&b, "writer %d line %d\n", w, i)
			}
		})
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for b.Len() < writers*lines*len("writer 0 line 0\n") {
			_ = b.String()
		}
	}()
	wg.Wait()
	<-done

	got := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if len(got) != writers*lines {
		t.Fatalf("got %d lines, want %d", len(got), writers*lines)
	}
	seen := make(map[string]bool, len(got))
	for _, line := range got {
		var w, i int
		if _, err := fmt.Sscanf(line, "writer %d line %d", &w, &i); err != nil {
			t.Fatalf("torn line %q: %v", line, err)
		}
		seen[line] = true
	}
	if len(seen) != writers*lines {
		t.Errorf("got %d distinct lines, want %d", len(seen), writers*lines)
	}
}

func TestZeroValue(t *testing.T) {
	t.Parallel()
	var b syncbuf.Buffer
	if got := b.String(); got != "" {
		t.Errorf("String of a zero Buffer: got %q, want empty", got)
	}
	if n, err := b.Write([]byte("hi")); n != 2 || err != nil {
		t.Errorf("Write: got %d, %v; want 2, nil", n, err)
	}
	if got, n := b.String(), b.Len(); got != "hi" || n != 2 {
		t.Errorf("got %q (Len %d), want %q (Len 2)", got, n, "hi")
	}
}
