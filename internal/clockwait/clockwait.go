// Package clockwait is how the components that take an injectable clock
// (github.com/coder/quartz: coderd and its database pubsub, the control
// plane, the agent, provisionerd and the workspace proxy) wait on it. Tests hand those components a quartz.Mock and step
// it; a wait's tags name its timer, so a test traps exactly the wait it
// means. The package owns no clock and links nothing of the project's.
package clockwait

import (
	"context"
	"time"

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
