// Package clockwait is how the components that take an injectable clock
// (github.com/coder/quartz: coderd and its database pubsub, the control
// plane, the agent, provisionerd and the workspace proxy) wait on it:
// Sleep is one wait, Retry is backoff.Retry on the clock. Tests hand those
// components a quartz.Mock and step it; a wait's tags name its timer, so a
// test traps exactly the wait it means. The package owns no clock and
// links nothing of the project's.
package clockwait

import (
	"context"
	"errors"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/coder/quartz"
)

// Sleep waits d on clock, with a timer tagged tags. It returns early when
// cut is closed (nil: never cut). It reports false when ctx ended first,
// true otherwise.
func Sleep(ctx context.Context, clock quartz.Clock, d time.Duration, cut <-chan struct{}, tags ...string) bool {
	t := clock.NewTimer(d, tags...)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	case <-cut:
		return true
	}
}

// Retry is backoff.Retry with its waits on clock (cenkalti/backoff's own
// Retry waits on a timer a test cannot step). It calls op until op
// succeeds, op's error is a backoff.Permanent one (returned unwrapped), b
// answers backoff.Stop (op's last error is returned) or ctx ends (ctx's
// cause). Before each wait it calls notify, when not nil, with op's error
// and the wait; each wait is a timer tagged tags.
func Retry[T any](ctx context.Context, clock quartz.Clock, b backoff.BackOff, op func() (T, error), notify func(error, time.Duration), tags ...string) (T, error) {
	for {
		v, err := op()
		if err == nil {
			return v, nil
		}
		if permanent, ok := errors.AsType[*backoff.PermanentError](err); ok {
			return v, permanent.Err
		}
		if ctx.Err() != nil {
			return v, context.Cause(ctx)
		}
		next := b.NextBackOff()
		if next == backoff.Stop {
			return v, err
		}
		if notify != nil {
			notify(err, next)
		}
		if !Sleep(ctx, clock, next, nil, tags...) {
			return v, context.Cause(ctx)
		}
	}
}

// Within stops b (backoff.Stop) once a wait would end more than limit
// after start on clock: backoff's MaxElapsedTime, on the clock.
func Within(b backoff.BackOff, clock quartz.Clock, start time.Time, limit time.Duration) backoff.BackOff {
	return &within{BackOff: b, clock: clock, start: start, limit: limit}
}

type within struct {
	backoff.BackOff
	clock quartz.Clock
	start time.Time
	limit time.Duration
}

func (w *within) NextBackOff() time.Duration {
	next := w.BackOff.NextBackOff()
	if next == backoff.Stop || w.clock.Since(w.start)+next > w.limit {
		return backoff.Stop
	}
	return next
}
