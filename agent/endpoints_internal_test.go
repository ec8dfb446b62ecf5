package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/quartz"

	"airgapcoder/codersdk"
)

func testEndpoints(t *testing.T, withFallback bool) *endpoints {
	t.Helper()
	pu, _ := url.Parse("https://proxy.example.test")
	fu, _ := url.Parse("https://primary.example.test")
	var fallback *codersdk.Client
	if withFallback {
		fallback = codersdk.New(fu)
	}
	return newEndpoints(codersdk.New(pu), fallback, slog.New(slog.NewTextHandler(io.Discard, nil)), quartz.NewReal())
}

var (
	errRefused = &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}
	err503     = &codersdk.Error{StatusCode: http.StatusServiceUnavailable, Response: codersdk.Response{Message: "no relay session"}}
	err401     = &codersdk.Error{StatusCode: http.StatusUnauthorized, Response: codersdk.Response{Message: "bad token"}}
	err404     = &codersdk.Error{StatusCode: http.StatusNotFound, Response: codersdk.Response{Message: "not here"}}
)

func TestUnreachable(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{errRefused, true},
		{fmt.Errorf("connect to x: %w", errRefused), true},
		{context.DeadlineExceeded, true},
		{errors.New("tls: failed to verify certificate"), true},
		{err503, true},
		{&codersdk.Error{StatusCode: http.StatusBadGateway}, true},
		{err401, false},
		{err404, false},
		{context.Canceled, false},
	} {
		if got := unreachable(tt.err); got != tt.want {
			t.Errorf("unreachable(%v): got %v, want %v", tt.err, got, tt.want)
		}
	}
}

// TestEndpointsSwitch walks the chooser through its states: failures that
// count, the switch after fallbackAfter of them, the way back.
func TestEndpointsSwitch(t *testing.T) {
	t.Run("no fallback: always the agent URL", func(t *testing.T) {
		e := testEndpoints(t, false)
		for range 10 {
			if e.failed(e.preferred, errRefused) {
				t.Fatal("switched without a fallback")
			}
		}
		if e.client() != e.preferred || e.usingFallback() || e.preferredHealthy() {
			t.Errorf("got %s (fallback %v), want the agent URL", e.client().URL, e.usingFallback())
		}
	})
	t.Run("to the fallback after 2 failures in a row, and back", func(t *testing.T) {
		e := testEndpoints(t, true)
		c, changed := e.current()
		if c != e.preferred {
			t.Fatalf("starts on %s, want the agent URL", c.URL)
		}
		if e.failed(e.preferred, errRefused) {
			t.Fatal("switched after 1 failure")
		}
		e.reached(e.preferred) // a success forgets it
		if e.failed(e.preferred, err503) {
			t.Fatal("switched after a failure, a success and a failure")
		}
		if isClosed(changed) {
			t.Fatal("changed closed without a switch")
		}
		if !e.failed(e.preferred, errRefused) {
			t.Fatal("no switch after 2 failures in a row")
		}
		if !isClosed(changed) {
			t.Error("changed not closed at the switch")
		}
		c, changed = e.current()
		if c != e.fallback || !e.usingFallback() {
			t.Fatalf("after the switch: got %s, want the fallback URL", c.URL)
		}
		if e.failed(e.fallback, errRefused) || e.failed(e.preferred, errRefused) {
			t.Error("a failure while on the fallback switched")
		}
		if !e.preferredHealthy() {
			t.Fatal("a healthy agent URL did not switch back")
		}
		if !isClosed(changed) || e.client() != e.preferred {
			t.Errorf("after the way back: got %s (changed closed %v), want the agent URL", e.client().URL, isClosed(changed))
		}
		if e.preferredHealthy() {
			t.Error("switched back twice")
		}
		if e.failed(e.preferred, errRefused) {
			t.Error("the failures before the way back still counted")
		}
	})
	t.Run("refusals another URL would repeat never switch", func(t *testing.T) {
		e := testEndpoints(t, true)
		for range 5 {
			e.failed(e.preferred, err401)
			e.failed(e.preferred, err404)
			e.failed(e.preferred, context.Canceled)
		}
		if e.usingFallback() {
			t.Error("switched on 4xx or cancellation")
		}
	})
}

// TestProbePreferred: on the fallback, a probe of the agent URL's /healthz
// that answers 200 switches back; a 503 does not; on the agent URL nothing
// is probed.
func TestProbePreferred(t *testing.T) {
	var healthy atomic.Bool
	var probes atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" {
			http.NotFound(w, r)
			return
		}
		probes.Add(1)
		if !healthy.Load() {
			http.Error(w, "no relay session", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("OK"))
	}))
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	clock := quartz.NewMock(t)
	started := clock.Trap().NewTimer("agent", "probe")
	defer started.Close()
	rearmed := clock.Trap().TimerReset("agent", "probe")
	defer rearmed.Close()
	e := testEndpoints(t, true)
	e.clock = clock
	e.preferred.URL, _ = url.Parse(srv.URL)
	probeCtx, stopProbing := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { e.probePreferred(probeCtx, 5*time.Second) })
	t.Cleanup(func() { stopProbing(); wg.Wait() })
	started.MustWait(ctx).MustRelease(ctx)
	// interval moves the clock to the probe timer's next firing and
	// waits until the prober has armed it again: the interval's probe,
	// if any, is done.
	interval := func() {
		t.Helper()
		_, w := clock.AdvanceNext()
		w.MustWait(ctx)
		rearmed.MustWait(ctx).MustRelease(ctx)
	}

	for range 10 {
		interval()
	}
	if n := probes.Load(); n != 0 {
		t.Fatalf("%d probes over 10 intervals on the agent URL, want none", n)
	}
	e.failed(e.preferred, errRefused)
	e.failed(e.preferred, errRefused)
	for range 3 {
		interval()
	}
	if n := probes.Load(); n != 3 {
		t.Fatalf("%d probes over 3 intervals on the fallback, want 3", n)
	}
	if !e.usingFallback() {
		t.Fatal("a 503 from /healthz switched back")
	}
	healthy.Store(true)
	interval()
	if e.usingFallback() {
		t.Fatal("still on the fallback after /healthz answered 200")
	}
}
