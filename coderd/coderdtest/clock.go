package coderdtest

import (
	"context"
	"testing"
	"time"

	"github.com/coder/quartz"
)

// NewClock returns a mock clock for Options.Clock, set to the wall clock's
// time (so that times coderd reads agree, to within the test's own run
// time, with those the database writes on its own clock), logging nothing.
func NewClock(t testing.TB) *quartz.Mock {
	t.Helper()
	m := quartz.NewMock(t).WithLogger(quartz.NoOpLogger)
	m.Set(time.Now().UTC().Truncate(time.Microsecond))
	return m
}

// AdvanceClock moves clock forward by d, one ticker or timer event at a
// time (quartz's Advance stops at the next one), and waits at each for
// what fired to finish: a TickerFunc's function to return, a channel
// ticker's tick to be taken. A channel ticker's work after its tick (the
// audit retention's delete, say) is not waited for; poll for its effect
// with testwait.
func AdvanceClock(ctx context.Context, t testing.TB, clock *quartz.Mock, d time.Duration) {
	t.Helper()
	for d > 0 {
		step := d
		if next, ok := clock.Peek(); ok && next < step {
			step = next
		}
		clock.Advance(step).MustWait(ctx)
		d -= step
	}
}
