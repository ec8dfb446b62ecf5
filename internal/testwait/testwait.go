// Package testwait is the one way tests in this module wait for something
// to happen: poll a condition until it holds, or fail the test with what
// was awaited and why it last did not hold. It is for tests only and
// must not be imported by product code.
//
// A test that needs time itself to pass (a token to expire, a schedule to
// come due) advances a clock instead (coderdtest.Options.Now and the
// components' clock options); a test that needs something to happen waits
// for it here, never with a bare time.Sleep.
package testwait

import (
	"context"
	"testing"
	"time"
)

// The polling interval is a quarter of the time waited so far, kept
// between minInterval and maxInterval: quick for conditions that hold
// almost at once, cheap for ones that take seconds, and the duration For
// returns overshoots the moment cond came true by at most a quarter (or
// minInterval), close enough for tests that report or bound it.
const (
	minInterval = 25 * time.Millisecond
	maxInterval = 250 * time.Millisecond
)

// For calls cond until it reports true and returns how long that took. If
// cond has not held within timeout, For fails the test with what and the
// reason cond gave last. cond's reason may be empty.
//
// Like t.Fatal, For must be called from the goroutine running the test.
func For(t testing.TB, timeout time.Duration, what string, cond func() (bool, string)) time.Duration {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	took, why, ok := poll(ctx, cond)
	if !ok {
		t.Fatalf("%s: not within %s: %s", what, timeout, why)
	}
	return took
}

// ForCtx is For bounded by ctx instead of a timeout: it fails the test when
// ctx ends (deadline or cancellation) before cond holds.
func ForCtx(ctx context.Context, t testing.TB, what string, cond func() (bool, string)) time.Duration {
	t.Helper()
	took, why, ok := poll(ctx, cond)
	if !ok {
		t.Fatalf("%s: %v after %s: %s", what, context.Cause(ctx), took.Round(time.Millisecond), why)
	}
	return took
}

// Until is For without a test to fail: it reports whether cond held
// within timeout. It is for best-effort waits in cleanups (a process to
// exit before it is killed), where a miss is handled, not a failure.
func Until(timeout time.Duration, cond func() bool) bool {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	_, _, ok := poll(ctx, Bool(cond))
	return ok
}

// Bool adapts a condition without a reason to For's signature.
func Bool(cond func() bool) func() (bool, string) {
	return func() (bool, string) { return cond(), "" }
}

// poll calls cond until it holds or ctx ends. It reports how long it
// polled, cond's last reason and whether cond held. cond is always called
// at least once.
func poll(ctx context.Context, cond func() (bool, string)) (time.Duration, string, bool) {
	began := time.Now()
	var timer *time.Timer
	for {
		ok, why := cond()
		if ok {
			return time.Since(began), why, true
		}
		interval := min(max(time.Since(began)/4, minInterval), maxInterval)
		if timer == nil {
			timer = time.NewTimer(interval)
			defer timer.Stop()
		} else {
			timer.Reset(interval)
		}
		select {
		case <-ctx.Done():
			return time.Since(began), why, false
		case <-timer.C:
		}
	}
}
