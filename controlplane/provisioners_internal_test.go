package controlplane

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"airgapcoder/internal/testtier"
	"airgapcoder/internal/testwait"
)

// TestBuiltinProvisionerRestarts: a built-in provisioner that stops by
// itself is run again after a backoff, until the server stops.
func TestBuiltinProvisionerRestarts(t *testing.T) {
	testtier.Heavy(t, "waits out two restart backoffs in real time")
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
	testwait.For(t, 10*time.Second, "a third run after two failures", func() (bool, string) {
		n := runs.Load()
		return n >= 3, fmt.Sprintf("ran %d times", n)
	})
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
