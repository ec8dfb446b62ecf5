package testwait_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"airgapcoder/internal/testwait"
)

func TestForReturnsOnceTheConditionHolds(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	took := testwait.For(t, 5*time.Second, "third call", func() (bool, string) {
		n := calls.Add(1)
		return n == 3, fmt.Sprintf("call %d", n)
	})
	if got := calls.Load(); got != 3 {
		t.Errorf("cond called %d times, want 3", got)
	}
	// Two misses, 25 ms apart while little time has passed.
	if took < 50*time.Millisecond || took > time.Second {
		t.Errorf("took %s, want between 50ms and 1s", took)
	}
}

func TestForOvershootsByAtMostAQuarter(t *testing.T) {
	t.Parallel()
	ready := time.Now().Add(600 * time.Millisecond)
	took := testwait.For(t, 5*time.Second, "600ms passed", func() (bool, string) {
		return !time.Now().Before(ready), ""
	})
	// Polls at most 150 ms apart by then; leave room for a busy machine.
	if took > 900*time.Millisecond {
		t.Errorf("took %s for a condition true after 600ms, want at most 900ms", took)
	}
}

func TestForHoldingAtOnceDoesNotWait(t *testing.T) {
	t.Parallel()
	if took := testwait.For(t, time.Second, "at once", func() (bool, string) { return true, "" }); took > 20*time.Millisecond {
		t.Errorf("took %s, want no wait", took)
	}
}

// recorder is a testing.TB that records Fatalf instead of stopping.
type recorder struct {
	testing.TB
	failed string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	r.failed = fmt.Sprintf(format, args...)
}

func TestForFailsWithWhatAndLastReason(t *testing.T) {
	t.Parallel()
	r := &recorder{TB: t}
	var calls atomic.Int32
	testwait.For(r, 100*time.Millisecond, "the door opens", func() (bool, string) {
		return false, fmt.Sprintf("closed after %d tries", calls.Add(1))
	})
	want := fmt.Sprintf("the door opens: not within 100ms: closed after %d tries", calls.Load())
	if r.failed != want {
		t.Errorf("failure %q, want %q", r.failed, want)
	}
}

func TestForCtxFailsWhenTheContextEnds(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r := &recorder{TB: t}
	testwait.ForCtx(ctx, r, "never", func() (bool, string) { return false, "not yet" })
	if !strings.HasPrefix(r.failed, "never: context canceled after ") || !strings.HasSuffix(r.failed, ": not yet") {
		t.Errorf("failure %q, want never: context canceled after …: not yet", r.failed)
	}
}

func TestBool(t *testing.T) {
	t.Parallel()
	testwait.For(t, time.Second, "true", testwait.Bool(func() bool { return true }))
	if ok, why := testwait.Bool(func() bool { return false })(); ok || why != "" {
		t.Errorf("Bool(false) = %v, %q; want false, \"\"", ok, why)
	}
}

func TestUntil(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	if !testwait.Until(5*time.Second, func() bool { return calls.Add(1) == 2 }) {
		t.Error("Until = false for a condition that held on the second call")
	}
	if testwait.Until(50*time.Millisecond, func() bool { return false }) {
		t.Error("Until = true for a condition that never held")
	}
}
