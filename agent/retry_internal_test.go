package agent

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"airgapcoder/coderd/coderdtest"
	"airgapcoder/codersdk"
)

// The agent's retries wait its backoff on Options.Clock: these tests step
// a mock clock through them. A trap on the wait (tagged "agent", "backoff"
// and what is retried) says when the agent waits, so the clock is never
// stepped before.

// checkBackoff fails the test unless got is want ±20% (the agent's jitter).
func checkBackoff(t *testing.T, what string, got, want time.Duration) {
	t.Helper()
	if got < want*8/10 || got > want*12/10 {
		t.Errorf("%s: waits %s, want %s ±20%%", what, got, want)
	}
}

// TestRetryOnClock: a report is retried after the agent's backoff on the
// clock (ReconnectMin, then doubling), until it succeeds, coderd refuses
// it for good (a 4xx other than 401, 408 and 429: that error), or ctx ends
// (its cause) during a wait.
func TestRetryOnClock(t *testing.T) {
	unavailable := &codersdk.Error{StatusCode: http.StatusServiceUnavailable, Response: codersdk.Response{Message: "coderd is starting"}}
	unauthorized := &codersdk.Error{StatusCode: http.StatusUnauthorized, Response: codersdk.Response{Message: "bad token"}}
	badRequest := &codersdk.Error{StatusCode: http.StatusBadRequest, Response: codersdk.Response{Message: "bad request"}}
	for _, tc := range []struct {
		name    string
		results []error // what each attempt returns, in turn
		// cancel ends ctx during the wait that follows the last attempt.
		cancel bool
		want   error
		waits  []time.Duration
	}{
		{name: "until it succeeds", results: []error{unavailable, unauthorized, nil}, want: nil, waits: []time.Duration{time.Second, 2 * time.Second}},
		{name: "until a permanent error", results: []error{unavailable, badRequest}, want: badRequest, waits: []time.Duration{time.Second}},
		{name: "until ctx ends", results: []error{unavailable}, cancel: true, want: context.Canceled, waits: []time.Duration{time.Second}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := coderdtest.ClockContext(t)
			clock := coderdtest.NewClock(t)
			waits := clock.Trap().NewTimer("agent", "backoff", "report widget")
			defer waits.Close()
			client := codersdk.New(&url.URL{Scheme: "http", Host: "coderd.invalid"})
			client.SessionToken = fakeAgentToken
			a, err := New(Options{Client: client, Logger: discardLogger(), Clock: clock, ReconnectMin: time.Second, ReconnectMax: 10 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			var attempts atomic.Int32
			retryCtx, cancel := context.WithCancel(ctx)
			defer cancel()
			done := make(chan error, 1)
			go func() {
				done <- a.retry(retryCtx, "report widget", func(context.Context) error {
					return tc.results[attempts.Add(1)-1]
				})
			}()
			for i, want := range tc.waits {
				call := waits.MustWait(ctx)
				call.MustRelease(ctx)
				checkBackoff(t, fmt.Sprintf("retry %d", i+1), call.Duration, want)
				if got := attempts.Load(); got != int32(i+1) {
					t.Fatalf("waiting before retry %d after %d attempts, want %d", i+1, got, i+1)
				}
				if tc.cancel && i == len(tc.waits)-1 {
					cancel()
					break
				}
				clock.Advance(call.Duration).MustWait(ctx)
			}
			select {
			case err = <-done:
			case <-ctx.Done():
				t.Fatalf("retry still running after %d attempts", attempts.Load())
			}
			if !errors.Is(err, tc.want) {
				t.Errorf("retry returned %v, want %v", err, tc.want)
			}
			if got := attempts.Load(); got != int32(len(tc.results)) {
				t.Errorf("%d attempts, want %d", got, len(tc.results))
			}
		})
	}
}

// TestFetchManifestRetriesOnClock: an agent whose coderd answers 503 for
// the manifest asks again after its backoff on the clock, not before, and
// then starts.
func TestFetchManifestRetriesOnClock(t *testing.T) {
	ctx := coderdtest.ClockContext(t)
	clock := coderdtest.NewClock(t)
	flushes := clock.Trap().NewTicker("agent", "logFlush")
	defer flushes.Close()
	waits := clock.Trap().NewTimer("agent", "backoff", "manifest")
	defer waits.Close()
	f, c := newFakeCoderd(t, codersdk.AgentManifest{AgentID: "a1"})
	f.manifestFailures = 1
	runAgent(t, c, Options{Clock: clock}) // ReconnectMin 50ms
	// The log flush ticks on the clock too: armed first, the clock steps
	// through its ticks to the retry.
	flushes.MustWait(ctx).MustRelease(ctx)
	call := waits.MustWait(ctx)
	call.MustRelease(ctx)
	checkBackoff(t, "the manifest's retry", call.Duration, 50*time.Millisecond)
	f.mu.Lock()
	requests, lifecycle := f.manifestRequests, slices.Clone(f.lifecycle)
	f.mu.Unlock()
	if requests != 1 || len(lifecycle) != 0 {
		t.Fatalf("waiting to retry the manifest: %d requests and lifecycle %v, want one request and nothing started", requests, lifecycle)
	}
	coderdtest.AdvanceClock(ctx, t, clock, call.Duration)
	f.waitFor(t, 10*time.Second, "ready on the manifest of the second request", func() bool {
		return f.manifestRequests == 2 && slices.Equal(f.lifecycle, []string{codersdk.AgentLifecycleStarting, codersdk.AgentLifecycleReady})
	})
}
