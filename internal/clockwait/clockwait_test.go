package clockwait_test

import (
	"context"
	"testing"
	"time"

	"github.com/coder/quartz"

	"airgapcoder/internal/clockwait"
)

// start runs Sleep(d) in the background on a mock clock and returns its
// result channel once the timer is armed.
func start(t *testing.T, ctx context.Context, clock *quartz.Mock, d time.Duration, cut <-chan struct{}) <-chan bool {
	t.Helper()
	trap := clock.Trap().NewTimer("test", "sleep")
	defer trap.Close()
	done := make(chan bool, 1)
	go func() { done <- clockwait.Sleep(ctx, clock, d, cut, "test", "sleep") }()
	call, err := trap.Wait(ctx)
	if err != nil {
		t.Fatalf("the sleep armed no timer: %v", err)
	}
	if call.Duration != d {
		t.Errorf("timer of %s, want %s", call.Duration, d)
	}
	call.MustRelease(ctx)
	return done
}

func TestSleep(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	t.Run("EndsWhenTheClockHasMovedOn", func(t *testing.T) {
		clock := quartz.NewMock(t)
		done := start(t, ctx, clock, time.Second, nil)
		clock.Advance(time.Second - time.Millisecond).MustWait(ctx)
		select {
		case <-done:
			t.Fatal("Sleep returned before the clock moved on by its duration")
		default:
		}
		clock.Advance(time.Millisecond).MustWait(ctx)
		if ok := <-done; !ok {
			t.Error("Sleep reported its context ended; want true")
		}
	})

	t.Run("ContextEnds", func(t *testing.T) {
		clock := quartz.NewMock(t)
		sleepCtx, stop := context.WithCancel(ctx)
		done := start(t, sleepCtx, clock, time.Hour, nil)
		stop()
		if ok := <-done; ok {
			t.Error("Sleep reported true after its context ended")
		}
	})

	t.Run("Cut", func(t *testing.T) {
		clock := quartz.NewMock(t)
		cut := make(chan struct{})
		done := start(t, ctx, clock, time.Hour, cut)
		close(cut)
		if ok := <-done; !ok {
			t.Error("Sleep cut short reported false; want true")
		}
	})
}
