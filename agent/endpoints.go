package agent

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"github.com/coder/quartz"

	"airgapcoder/codersdk"
)

// Endpoints (docs/wsproxy.md, "Agents in a region"). An agent in a region
// reaches coderd through its region's workspace proxy: its agent URL
// (Options.Client, CODER_AGENT_URL). It may also be given a fallback URL
// (Options.FallbackURL, CODER_AGENT_FALLBACK_URL): the primary's. When
// fallbackAfter attempts in a row to reach the agent URL fail because it
// does not answer (a dial, TLS or timeout error, or a 5xx), the agent
// connects through the fallback URL instead, at once, and sends its API
// calls (manifest, startup, lifecycle, logs, metadata, app health, ports)
// there too. While it is on the fallback it probes the agent URL's
// /healthz every FallbackProbeInterval (±20%); the first 200 ends the
// fallback connection and the agent reconnects through the agent URL, at
// once. Refusals that another URL would repeat (a 401 for the token, other
// 4xx) never switch. Without a fallback URL nothing here changes what the
// agent does.

// fallbackAfter is how many attempts in a row to reach the agent URL must
// fail before the agent uses its fallback URL.
const fallbackAfter = 2

// preferredDialTimeout bounds a connection attempt to the agent URL when
// there is a fallback, so that one that does not answer at all is given
// up in seconds (without a fallback, an attempt has connectDialTimeout).
const preferredDialTimeout = 10 * time.Second

// connectDialTimeout bounds an attempt to open the relay connection.
const connectDialTimeout = 30 * time.Second

// endpoints chooses the coderd URL the agent talks to: the preferred one
// (the agent URL) or the fallback. It holds no timers: the connect loop and
// the manifest fetch report each attempt's outcome (failed, reached), the
// prober reports the preferred URL's health (preferredHealthy), and the
// agent's calls ask for the client to use now (client, current).
type endpoints struct {
	preferred *codersdk.Client
	fallback  *codersdk.Client // nil: none
	log       *slog.Logger
	clock     quartz.Clock // times probePreferred

	mu         sync.Mutex
	onFallback bool
	failures   int           // consecutive failures to reach preferred
	changed    chan struct{} // closed at the next switch
}

// newEndpoints returns a chooser that starts on preferred. fallback may be
// nil.
func newEndpoints(preferred, fallback *codersdk.Client, log *slog.Logger, clock quartz.Clock) *endpoints {
	return &endpoints{preferred: preferred, fallback: fallback, log: log, clock: clock, changed: make(chan struct{})}
}

// current returns the client to reach coderd with now, and a channel
// closed when the choice changes.
func (e *endpoints) current() (*codersdk.Client, <-chan struct{}) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.onFallback {
		return e.fallback, e.changed
	}
	return e.preferred, e.changed
}

// client returns the client to reach coderd with now.
func (e *endpoints) client() *codersdk.Client {
	c, _ := e.current()
	return c
}

// usingFallback reports whether the agent is on its fallback URL.
func (e *endpoints) usingFallback() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.onFallback
}

// reached records that c answered: the failures to reach it are forgotten.
func (e *endpoints) reached(c *codersdk.Client) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if c == e.preferred {
		e.failures = 0
	}
}

// failed records that an attempt to reach c failed with err. The
// fallbackAfter-th failure in a row to reach the preferred URL that says
// it does not answer switches to the fallback, if there is one; failed
// reports whether it switched.
func (e *endpoints) failed(c *codersdk.Client, err error) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.fallback == nil || e.onFallback || c != e.preferred || !unreachable(err) {
		return false
	}
	e.failures++
	if e.failures < fallbackAfter {
		return false
	}
	e.log.Info("the agent URL does not answer; using the fallback URL",
		"url", e.preferred.URL.Redacted(), "fallback_url", e.fallback.URL.Redacted(), "attempts", e.failures, "err", err)
	e.switchLocked(true)
	return true
}

// preferredHealthy records that the preferred URL's /healthz answered 200
// and switches back to it; it reports whether it switched.
func (e *endpoints) preferredHealthy() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.onFallback {
		return false
	}
	e.log.Info("the agent URL answers /healthz again; leaving the fallback URL for it",
		"url", e.preferred.URL.Redacted(), "fallback_url", e.fallback.URL.Redacted())
	e.switchLocked(false)
	return true
}

func (e *endpoints) switchLocked(toFallback bool) {
	e.onFallback = toFallback
	e.failures = 0
	close(e.changed)
	e.changed = make(chan struct{})
}

// unreachable reports whether err says the URL did not answer as coderd
// (or a proxy in front of it that can reach coderd) would: any error but a
// response below 500 and the caller's own cancellation.
func unreachable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	var e *codersdk.Error
	if errors.As(err, &e) {
		return e.StatusCode >= http.StatusInternalServerError
	}
	return true
}

// probePreferred, while the agent is on its fallback URL, asks the
// preferred URL's /healthz every interval (±20%) and switches back at the
// first 200. It returns when ctx ends.
func (e *endpoints) probePreferred(ctx context.Context, interval time.Duration) {
	if e.fallback == nil {
		return
	}
	t := e.clock.NewTimer(jitter(interval), "agent", "probe")
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if e.usingFallback() {
			probeCtx, cancel := context.WithTimeout(ctx, interval)
			err := e.preferred.Healthz(probeCtx)
			cancel()
			if err == nil {
				e.preferredHealthy()
			} else if ctx.Err() == nil {
				e.log.Debug("the agent URL is still unhealthy; staying on the fallback URL", "url", e.preferred.URL.Redacted(), "err", err)
			}
		}
		t.Reset(jitter(interval), "agent", "probe")
	}
}

// jitter returns d ±20%.
func jitter(d time.Duration) time.Duration {
	return time.Duration(float64(d) * (0.8 + 0.4*rand.Float64()))
}
