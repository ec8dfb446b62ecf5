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

	"airgapcoder/codersdk"
	"airgapcoder/internal/testwait"
)

func testEndpoints(t *testing.T, withFallback bool) *endpoints {
	t.Helper()
	pu, _ := url.Parse("https://proxy.example.test")
	fu, _ := url.Parse("https://primary.example.test")
	var fallback *codersdk.Client
	if withFallback {
		fallback = codersdk.New(fu)
	}
	return newEndpoints(codersdk.New(pu), fallback, slog.New(slog.NewTextHandler(io.Discard, nil)))
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
	e := testEndpoints(t, true)
	e.preferred.URL, _ = url.Parse(srv.URL)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { e.probePreferred(ctx, 10*time.Millisecond) })
	t.Cleanup(func() { cancel(); wg.Wait() })

	time.Sleep(100 * time.Millisecond) // proves a negative: ~10 (wall-clock) probe intervals, none may probe on the agent URL
	if n := probes.Load(); n != 0 {
		t.Fatalf("%d probes while on the agent URL, want none", n)
	}
	e.failed(e.preferred, errRefused)
	e.failed(e.preferred, errRefused)
	testwait.For(t, 5*time.Second, "3 probes on the fallback", testwait.Bool(func() bool { return probes.Load() >= 3 }))
	if !e.usingFallback() {
		t.Fatal("a 503 from /healthz switched back")
	}
	healthy.Store(true)
	testwait.For(t, 5*time.Second, "back on the agent URL after /healthz answered 200", testwait.Bool(func() bool { return !e.usingFallback() }))
}
