package controlplane

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/quartz"
)

// TestBuiltinProvisionerRestarts: a built-in provisioner that stops by
// itself is run again after a backoff on the control plane's clock (1 s,
// then 2 s, back to 1 s after a run of more than a minute), until the
// server stops.
func TestBuiltinProvisionerRestarts(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	clock := quartz.NewMock(t)
	trap := clock.Trap().NewTimer("controlplane", "provisionerRestart")
	defer trap.Close()
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var runs atomic.Int32
	fourth := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		runSupervised(runCtx, slog.New(slog.DiscardHandler), clock, "built-in-1", func(ctx context.Context) error {
			switch runs.Add(1) {
			case 1, 2:
				return errors.New("create work dir: permission denied")
			case 3:
				clock.Advance(2 * time.Minute) // a run that lasted two minutes
				return errors.New("egress proxy: connection refused")
			}
			close(fourth)
			<-ctx.Done()
			return nil
		})
	}()

	// restart waits for the backoff's timer, checks its length and that
	// no restart came 1 ms before it ends, and lets it end.
	restart := func(want time.Duration, runsBefore int32) {
		t.Helper()
		call, err := trap.Wait(ctx)
		if err != nil {
			t.Fatalf("no restart backoff after run %d: %v", runsBefore, err)
		}
		call.MustRelease(ctx)
		if call.Duration != want {
			t.Fatalf("backoff after run %d: got %s, want %s", runsBefore, call.Duration, want)
		}
		clock.Advance(want - time.Millisecond).MustWait(ctx)
		if n := runs.Load(); n != runsBefore {
			t.Fatalf("ran %d times 1 ms before the backoff ended, want %d", n, runsBefore)
		}
		clock.Advance(time.Millisecond).MustWait(ctx)
	}
	restart(time.Second, 1)
	restart(2*time.Second, 2)
	restart(time.Second, 3) // the third run lasted over a minute: the backoff starts again
	select {
	case <-fourth:
	case <-ctx.Done():
		t.Fatal("no fourth run after the third backoff ended")
	}
	stop()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("still running 5 s after the server stopped")
	}
	if n := runs.Load(); n != 4 {
		t.Errorf("ran %d times, want 4", n)
	}
}
