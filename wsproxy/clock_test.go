package wsproxy_test

import (
	"net/http"
	"testing"
	"time"

	"airgapcoder/coderd/coderdtest"
	"airgapcoder/internal/syncbuf"
	"airgapcoder/internal/testwait"
)

// TestRelaySessionReconnectBackoff: when the relay session drops and the
// primary does not take it back, the proxy dials it again only once the
// backoff delay has passed on its clock (not a millisecond before), the
// delay doubling (with jitter) from RegisterRetry; once a dial succeeds
// the delay starts again from RegisterRetry.
func TestRelaySessionReconnectBackoff(t *testing.T) {
	t.Parallel()
	ctx := coderdtest.ClockContext(t)
	clock := coderdtest.NewClock(t)
	backoff := clock.Trap().NewTimer("wsproxy", "relayBackoff")
	defer backoff.Close()
	primary := newFakePrimary(t)
	primary.heartbeat = time.Hour // no heartbeat while the test steps the backoff
	logs := &syncbuf.Buffer{}
	s, client, _, _ := startProxy(t, primary, logs, clock) // RegisterRetry: 10 ms
	<-s.Ready()
	primary.waitRelaySessions(t, 1, "the relay session")
	healthz := "https://" + s.Addr().String() + "/healthz"

	// drop closes the relay session at the primary's end, which answers
	// the dials that follow 503 while down is set.
	drop := func(down bool) {
		t.Helper()
		primary.mu.Lock()
		primary.relayDown = down
		sessions := primary.sessions
		primary.mu.Unlock()
		_ = sessions[len(sessions)-1].Close()
	}
	// waitBackoff waits for the proxy to arm its backoff after dial number
	// dials failed, checks the delay is initial doubled i times (±50%
	// jitter), and returns it.
	waitBackoff := func(i, dials int, initial time.Duration) time.Duration {
		t.Helper()
		call := backoff.MustWait(ctx)
		call.MustRelease(ctx)
		want := initial << i
		if call.Duration < want/2 || call.Duration > want*3/2 {
			t.Fatalf("backoff %d: got %s, want %s ±50%%", i+1, call.Duration, want)
		}
		if got := primary.count(&primary.relayDials); got != dials {
			t.Fatalf("relay session dials before backoff %d: got %d, want %d", i+1, got, dials)
		}
		return call.Duration
	}

	drop(true)
	dials := 2 // the first session, and the dial just after it dropped
	for i := range 3 {
		delay := waitBackoff(i, dials, 10*time.Millisecond)
		if resp, _ := get(t, client, healthz); resp.StatusCode != http.StatusServiceUnavailable {
			t.Errorf("/healthz while the relay session is down: got %d, want 503", resp.StatusCode)
		}
		clock.Advance(delay - time.Millisecond).MustWait(ctx)
		if got := primary.count(&primary.relayDials); got != dials {
			t.Fatalf("relay session dials a millisecond before backoff %d passed: got %d, want %d", i+1, got, dials)
		}
		if i == 2 {
			primary.mu.Lock()
			primary.relayDown = false // the next dial succeeds
			primary.mu.Unlock()
		}
		clock.Advance(time.Millisecond).MustWait(ctx)
		dials++
		testwait.ForCtx(ctx, t, "the dial after the delay", testwait.Bool(func() bool { return primary.count(&primary.relayDials) == dials }))
	}
	primary.waitRelaySessions(t, 2, "the relay session up again")
	testwait.ForCtx(ctx, t, "/healthz OK again", testwait.Bool(func() bool { resp, _ := get(t, client, healthz); return resp.StatusCode == http.StatusOK }))

	// The session that came back resets the backoff.
	drop(true)
	dials++ // the dial just after it dropped
	waitBackoff(0, dials, 10*time.Millisecond)
}
