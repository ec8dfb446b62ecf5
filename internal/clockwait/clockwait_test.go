package clockwait_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v5"
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

func TestRetry(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	errDown := errors.New("down")
	constant := func() backoff.BackOff { return backoff.NewConstantBackOff(time.Second) }

	t.Run("UntilSuccessWaitingOnTheClock", func(t *testing.T) {
		clock := quartz.NewMock(t)
		trap := clock.Trap().NewTimer("test", "retry")
		defer trap.Close()
		calls := 0
		var heard []time.Duration
		done := make(chan error, 1)
		go func() {
			v, err := clockwait.Retry(ctx, clock, constant(), func() (int, error) {
				calls++
				if calls < 3 {
					return 0, errDown
				}
				return calls, nil
			}, func(err error, next time.Duration) {
				if err != errDown {
					t.Errorf("notified of %v, want the attempt's error", err)
				}
				heard = append(heard, next)
			}, "test", "retry")
			if v != 3 {
				t.Errorf("value %d, want the third attempt's", v)
			}
			done <- err
		}()
		for range 2 {
			trap.MustWait(ctx).MustRelease(ctx)
			clock.Advance(time.Second).MustWait(ctx)
		}
		if err := <-done; err != nil {
			t.Fatalf("Retry: %v", err)
		}
		if calls != 3 || len(heard) != 2 || heard[0] != time.Second {
			t.Errorf("%d calls, notified of waits %v: want 3 calls and two 1s waits", calls, heard)
		}
	})

	t.Run("PermanentUnwrapped", func(t *testing.T) {
		calls := 0
		_, err := clockwait.Retry(ctx, quartz.NewMock(t), constant(), func() (int, error) {
			calls++
			return 0, backoff.Permanent(errDown)
		}, nil)
		if err != errDown || calls != 1 {
			t.Errorf("got %v after %d calls, want the permanent error itself after one", err, calls)
		}
	})

	t.Run("StopReturnsTheLastError", func(t *testing.T) {
		clock := quartz.NewMock(t)
		b := clockwait.Within(constant(), clock, clock.Now(), 500*time.Millisecond)
		_, err := clockwait.Retry(ctx, clock, b, func() (int, error) { return 0, errDown }, nil)
		if err != errDown {
			t.Errorf("got %v, want the last attempt's error once the limit is passed", err)
		}
	})

	t.Run("ContextEnds", func(t *testing.T) {
		ended, stop := context.WithCancelCause(ctx)
		cause := errors.New("shutting down")
		stop(cause)
		_, err := clockwait.Retry(ended, quartz.NewMock(t), constant(), func() (int, error) { return 0, errDown }, nil)
		if err != cause {
			t.Errorf("got %v, want the context's cause", err)
		}
	})
}
