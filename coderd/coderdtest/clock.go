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

// ClockContext bounds a test's real-time waits for what the steps of a
// mock clock set off (quartz's MustWait, a trap's Wait): the code under
// test takes moments for each, so 30 s means it is stuck. It ends at the
// test's cleanup.
func ClockContext(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
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
