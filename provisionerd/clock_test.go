package provisionerd_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coder/quartz"

	"airgapcoder/coderd/coderdtest"
	"airgapcoder/internal/testwait"
	"airgapcoder/provisionerd"
)

// These tests run the daemon on a mock clock (Options.Clock) against the
// fake coderd and step time instead of waiting for it. Traps on the
// daemon's timers (tagged "provisionerd" and the wait's name) say when the
// daemon has armed a wait, so that a step of the clock is never taken
// before the daemon is waiting for it.

// TestHeartbeat: a running job that sends no lines still tells coderd it
// is alive, exactly once every heartbeat interval on the clock, counted
// from the last update it sent (a flush of lines counts as one), never
// earlier; the interval is the daemon's own, or a third of coderd's
// heartbeat timeout when that is shorter.
func TestHeartbeat(t *testing.T) {
	for _, tc := range []struct {
		name           string
		interval       time.Duration // Options.HeartbeatInterval
		coderdTimeout  time.Duration // what registration answers
		wantHeartbeats time.Duration
	}{
		{name: "the daemon's interval", interval: 2 * time.Second, wantHeartbeats: 2 * time.Second},
		{name: "a third of coderd's timeout", interval: 5 * time.Second, coderdTimeout: 3 * time.Second, wantHeartbeats: time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := coderdtest.ClockContext(t)
			clock := coderdtest.NewClock(t)
			armed := clock.Trap().NewTimer("provisionerd", "heartbeat")
			defer armed.Close()
			rearmed := clock.Trap().TimerReset("provisionerd", "heartbeat")
			defer rearmed.Close()

			f := newFakeCoderd(t)
			f.now = func() time.Time { return clock.Now() }
			f.heartbeatTimeout = tc.coderdTimeout
			f.holdFiles = true // the job stays in "Setting up", saying nothing more
			f.startDaemonOn(t, clock, func(o *provisionerd.Options) { o.HeartbeatInterval = tc.interval })
			job, _ := f.submit(t, importJob, map[string]string{"main.tf": coderTF})

			call := armed.MustWait(ctx)
			call.MustRelease(ctx)
			if call.Duration != tc.wantHeartbeats {
				t.Fatalf("heartbeat timer armed for %s, want %s", call.Duration, tc.wantHeartbeats)
			}
			start := clock.Now()
			testwait.ForCtx(ctx, t, "the template download", testwait.Bool(func() bool { return f.count(&f.downloads) > 0 }))

			// nextUpdate moves the clock on by d and waits for the update
			// that re-arms the heartbeat at its end.
			nextUpdate := func(d time.Duration) {
				t.Helper()
				coderdtest.AdvanceClock(ctx, t, clock, d)
				call := rearmed.MustWait(ctx)
				call.MustRelease(ctx)
				if call.Duration != tc.wantHeartbeats {
					t.Fatalf("heartbeat timer re-armed for %s, want %s", call.Duration, tc.wantHeartbeats)
				}
			}
			// The stage's line goes out at the first flush, and the
			// heartbeats follow it an interval apart.
			nextUpdate(250 * time.Millisecond)
			nextUpdate(tc.wantHeartbeats)
			nextUpdate(tc.wantHeartbeats)
			want := []jobUpdate{
				{At: start.Add(250 * time.Millisecond), Job: job, Lines: []string{"Setting up"}},
				{At: start.Add(250*time.Millisecond + tc.wantHeartbeats), Job: job},
				{At: start.Add(250*time.Millisecond + 2*tc.wantHeartbeats), Job: job},
			}
			if got := f.jobUpdates(); !slices.EqualFunc(got, want, equalUpdate) {
				t.Fatalf("coderd received\n%s\nwant\n%s", formatUpdates(got, start), formatUpdates(want, start))
			}
		})
	}
}

func equalUpdate(a, b jobUpdate) bool {
	return a.At.Equal(b.At) && a.Job == b.Job && slices.Equal(a.Lines, b.Lines)
}

// formatUpdates lists updates with their times after start.
func formatUpdates(us []jobUpdate, start time.Time) string {
	var b strings.Builder
	for _, u := range us {
		b.WriteString("  +" + u.At.Sub(start).String() + " " + u.Job + " " + strings.Join(u.Lines, "|") + "\n")
	}
	return b.String()
}

// TestReconnectBackoff: when coderd answers 500 (its database restarting)
// the daemon tries again only once the backoff delay has passed on the
// clock, the delay doubling from 1s, whether it was registering or asking
// for a job.
func TestReconnectBackoff(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fail  func(f *fakeCoderd) // makes three attempts fail
		tries func(f *fakeCoderd) *int
		wait  string // the backoff timer's tag
		// thenAcquires is how many acquisitions show that the fourth
		// attempt succeeded.
		thenAcquires int
	}{
		{name: "register", fail: func(f *fakeCoderd) { f.registerErrors = 3 },
			tries: func(f *fakeCoderd) *int { return &f.registers }, wait: "registerBackoff", thenAcquires: 1},
		{name: "acquire", fail: func(f *fakeCoderd) { f.acquireErrors = 3 },
			tries: func(f *fakeCoderd) *int { return &f.acquires }, wait: "acquireBackoff", thenAcquires: 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := coderdtest.ClockContext(t)
			clock := coderdtest.NewClock(t)
			backoff := clock.Trap().NewTimer("provisionerd", tc.wait)
			defer backoff.Close()
			f := newFakeCoderd(t)
			tc.fail(f)
			tries := tc.tries(f)
			f.startDaemonOn(t, clock, func(o *provisionerd.Options) { o.AcquireWait = 50 * time.Millisecond })

			for i, delay := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second} {
				call := backoff.MustWait(ctx)
				call.MustRelease(ctx)
				if call.Duration != delay {
					t.Fatalf("wait after failure %d: got %s, want %s", i+1, call.Duration, delay)
				}
				if got := f.count(tries); got != i+1 {
					t.Fatalf("%d attempts before the wait after failure %d, want %d", got, i+1, i+1)
				}
				clock.Advance(delay - time.Millisecond).MustWait(ctx)
				if got := f.count(tries); got != i+1 {
					t.Fatalf("%d attempts a millisecond before the delay passed, want %d", got, i+1)
				}
				clock.Advance(time.Millisecond).MustWait(ctx)
				testwait.ForCtx(ctx, t, "the attempt after the delay", testwait.Bool(func() bool { return f.count(tries) == i+2 }))
			}
			// The fourth attempt succeeded: the daemon asks for jobs
			// (the long poll ends empty after AcquireWait, and it asks
			// again without a wait).
			testwait.ForCtx(ctx, t, "the daemon asking for a job", testwait.Bool(func() bool { return f.count(&f.acquires) >= tc.thenAcquires }))
		})
	}
}

// retryWaits forwards every call trap catches, released, until the test
// ends.
func retryWaits(ctx context.Context, t *testing.T, trap *quartz.Trap) <-chan *quartz.Call {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	calls := make(chan *quartz.Call)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			call, err := trap.Wait(ctx)
			if err != nil {
				return
			}
			if err := call.Release(ctx); err != nil {
				return
			}
			select {
			case calls <- call:
			case <-ctx.Done():
				return
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return calls
}

// TestDownloadRetriesOnClock: while coderd answers 500 the template's
// download is tried again after backoff on the clock and the job goes on
// when the files come; a 404 fails the job without another try; and a
// download that keeps failing fails the job, with coderd's message, before
// 45s have passed on the clock (less than coderd's heartbeat timeout).
func TestDownloadRetriesOnClock(t *testing.T) {
	for _, tc := range []struct {
		name        string
		fileErrors  int
		files       map[string]string // nil: coderd has no such file
		wantRetries int               // -1: as many as fit in 45s
		wantError   []string
		notError    string
	}{
		// The daemon has no provider mirror: the import's preflight,
		// reading the downloaded main.tf, refuses it.
		{name: "500 twice, then the files", fileErrors: 2, files: map[string]string{"main.tf": coderTF}, wantRetries: 2,
			wantError: []string{"provider registry.terraform.io/coder/coder (required_providers.coder)"}, notError: "download template"},
		{name: "500 twice, then 404", fileErrors: 2, wantRetries: 2, wantError: []string{"download template", "404"}},
		{name: "500 for good", fileErrors: 1 << 20, files: map[string]string{"main.tf": coderTF}, wantRetries: -1,
			wantError: []string{"download template", "unexpected postmaster exit"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := coderdtest.ClockContext(t)
			clock := coderdtest.NewClock(t)
			trap := clock.Trap().NewTimer("provisionerd", "retryBackoff")
			defer trap.Close()
			waits := retryWaits(ctx, t, trap)
			f := newFakeCoderd(t)
			f.fileErrors = tc.fileErrors
			f.startDaemonOn(t, clock, func(o *provisionerd.Options) { o.HeartbeatInterval = 10 * time.Second })
			start := clock.Now()
			_, ended := f.submit(t, importJob, tc.files)

			var res jobResult
			retries := 0
		loop:
			for {
				select {
				case call := <-waits:
					retries++
					coderdtest.AdvanceClock(ctx, t, clock, call.Duration)
				case res = <-ended:
					break loop
				case <-ctx.Done():
					t.Fatalf("the job did not end; %d retries, %s on the clock", retries, clock.Since(start))
				}
			}
			took := clock.Since(start)
			if tc.wantRetries >= 0 && retries != tc.wantRetries {
				t.Errorf("the download was retried %d times, want %d", retries, tc.wantRetries)
			}
			if tc.wantRetries < 0 && (retries < 5 || took > 45*time.Second) {
				t.Errorf("the download was retried %d times over %s on the clock, want at least 5 within 45s", retries, took)
			}
			msg := mustFail(t, res) // no terraform to run
			for _, w := range tc.wantError {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not say %q", msg, w)
				}
			}
			if tc.notError != "" && strings.Contains(msg, tc.notError) {
				t.Errorf("error %q: want the job to get past the download", msg)
			}
		})
	}
}

// TestLogLineTimes: the lines of a job carry the daemon's clock's time.
func TestLogLineTimes(t *testing.T) {
	clock := coderdtest.NewClock(t)
	f := newFakeCoderd(t)
	f.startDaemonOn(t, clock, nil)
	start := clock.Now()
	_, ended := f.submit(t, importJob, map[string]string{"main.tf": coderTF})
	var res jobResult
	select {
	case res = <-ended:
	case <-coderdtest.ClockContext(t).Done():
		t.Fatal("the job did not end")
	}
	if len(res.Logs) == 0 {
		t.Fatal("the job sent no lines")
	}
	for _, l := range res.Logs {
		if !l.CreatedAt.Equal(start) {
			t.Errorf("line %q at %s, want the clock's %s", l.Output, l.CreatedAt, start)
		}
	}
}
