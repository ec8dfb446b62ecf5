package controlplane

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"
)

// TestBuiltinProvisionerRestarts: a built-in provisioner that stops by
// itself is run again after a backoff, until the server stops.
func TestBuiltinProvisionerRestarts(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var runs atomic.Int32
	done := make(chan struct{})
	go func() {
		defer close(done)
		runSupervised(ctx, slog.New(slog.DiscardHandler), "built-in-1", func(ctx context.Context) error {
			if runs.Add(1) < 3 {
				return errors.New("create work dir: permission denied")
			}
			<-ctx.Done()
			return nil
		})
	}()
	deadline := time.Now().Add(10 * time.Second)
	for runs.Load() < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("ran %d times in 10 s; want a third run after two failures", runs.Load())
		}
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("still running 5 s after the server stopped")
	}
	if n := runs.Load(); n != 3 {
		t.Errorf("ran %d times, want 3", n)
	}
}
