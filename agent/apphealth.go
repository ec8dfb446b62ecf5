package agent

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/coder/quartz"

	"airgapcoder/codersdk"
	"airgapcoder/internal/clockwait"
)

// App health, as Coder's agent checks it: every app of the manifest whose
// healthcheck is enabled (a URL, an interval and a threshold above zero)
// gets a goroutine that GETs the URL from inside the workspace every
// interval seconds, the first time one interval after the start. A check
// passes when an answer with a status below 500 arrives within the
// interval (redirects are not followed: a redirect is an answer). One
// passing check makes the app healthy; threshold failing checks in a row
// make it unhealthy; fewer leave it as it was (initializing at first).
//
// Only changes are reported: a change wakes the reporter, which waits
// briefly for others to join it and posts every app whose health differs
// from what coderd was last told, in one request, retried with the
// agent's backoff while coderd is away (each attempt sends the latest
// values). The checks and the reporter run on the agent's context and end
// with it, and are scheduled on the agent's clock: each app's checks on a
// ticker tagged "agent", "appHealthInterval" and its slug, the reporter's
// wait on a timer tagged "agent" and "appHealthBatch". A check's own
// timeout bounds a real HTTP server, so it is on real time.

// appHealthPoster sends health changes to coderd (*codersdk.Client).
type appHealthPoster interface {
	PostWorkspaceAppHealth(ctx context.Context, req codersdk.PostWorkspaceAppHealthsRequest) error
}

// appHealthConfig configures an appHealthChecker.
type appHealthConfig struct {
	log    *slog.Logger
	poster appHealthPoster
	apps   []codersdk.WorkspaceApp
	// retry calls fn until it succeeds, ctx ends or fn's error is
	// permanent (Agent.retry).
	retry func(ctx context.Context, what string, fn func(context.Context) error) error
	// clock schedules the checks and the reporter's wait (the real clock
	// when nil).
	clock quartz.Clock
	// batch is how long the reporter waits after a change before it posts
	// (time.Second when zero), so that changes close together go in one
	// request.
	batch time.Duration
}

// appHealthChecker checks the apps' health and reports its changes.
type appHealthChecker struct {
	cfg    appHealthConfig
	client *http.Client
	// changed has a value when health differs from what was reported.
	changed chan struct{}

	mu       sync.Mutex
	health   map[string]string // app ID -> health now
	reported map[string]string // app ID -> health coderd has
}

func newAppHealthChecker(cfg appHealthConfig) *appHealthChecker {
	if cfg.clock == nil {
		cfg.clock = quartz.NewReal()
	}
	if cfg.batch <= 0 {
		cfg.batch = time.Second
	}
	c := &appHealthChecker{
		cfg: cfg,
		client: &http.Client{
			// The URL is inside the workspace: no proxy reaches it. A fresh
			// connection per check tests what a new visitor gets.
			Transport: &http.Transport{
				Proxy: nil, DisableKeepAlives: true,
				DialContext: (&net.Dialer{Timeout: 30 * time.Second}).DialContext, TLSHandshakeTimeout: 10 * time.Second,
			},
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		changed:  make(chan struct{}, 1),
		health:   map[string]string{},
		reported: map[string]string{},
	}
	for _, app := range cfg.apps {
		if !app.Healthcheck.Enabled() {
			continue
		}
		// Start from what coderd has (an agent that restarts keeps an
		// unhealthy app unhealthy until a check passes).
		now := app.Health
		switch now {
		case codersdk.WorkspaceAppHealthInitializing, codersdk.WorkspaceAppHealthHealthy, codersdk.WorkspaceAppHealthUnhealthy:
		default:
			now = codersdk.WorkspaceAppHealthInitializing
		}
		c.health[app.ID], c.reported[app.ID] = now, app.Health
	}
	if len(c.pending()) > 0 {
		c.changed <- struct{}{}
	}
	return c
}

// run checks and reports until ctx ends; it returns at once when no app has
// a healthcheck.
func (c *appHealthChecker) run(ctx context.Context) {
	if len(c.health) == 0 {
		return
	}
	var wg sync.WaitGroup
	for _, app := range c.cfg.apps {
		if app.Healthcheck.Enabled() {
			wg.Go(func() { c.watch(ctx, app) })
		}
	}
	c.report(ctx)
	wg.Wait()
	c.client.CloseIdleConnections()
}

// watch checks one app every interval until ctx ends, and returns once
// its last check has.
func (c *appHealthChecker) watch(ctx context.Context, app codersdk.WorkspaceApp) {
	hc := app.Healthcheck
	interval := time.Duration(hc.Interval) * time.Second
	failures := 0
	w := c.cfg.clock.TickerFunc(ctx, interval, func() error {
		err := c.check(ctx, hc.URL, interval)
		if ctx.Err() != nil {
			return nil
		}
		if err == nil {
			failures = 0
			c.set(app, codersdk.WorkspaceAppHealthHealthy, nil)
			return nil
		}
		failures = min(failures+1, int(hc.Threshold))
		if failures >= int(hc.Threshold) {
			c.set(app, codersdk.WorkspaceAppHealthUnhealthy, err)
		} else {
			c.cfg.log.Debug("app healthcheck failed", "app", app.Slug, "failures", failures, "threshold", hc.Threshold, "err", err)
		}
		return nil
	}, "agent", "appHealthInterval", app.Slug)
	_ = w.Wait() // ctx's error: the function never fails
}

// check GETs url once, within timeout.
func (c *appHealthChecker) check(ctx context.Context, url string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	res, err := c.client.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, 64<<10))
	_ = res.Body.Close()
	if res.StatusCode >= http.StatusInternalServerError {
		return fmt.Errorf("status %d", res.StatusCode)
	}
	return nil
}

// set records an app's health and wakes the reporter when it changed.
func (c *appHealthChecker) set(app codersdk.WorkspaceApp, health string, cause error) {
	c.mu.Lock()
	was := c.health[app.ID]
	c.health[app.ID] = health
	c.mu.Unlock()
	if was == health {
		return
	}
	if cause != nil {
		c.cfg.log.Info("app health changed", "app", app.Slug, "from", was, "to", health, "url", app.Healthcheck.URL, "err", cause)
	} else {
		c.cfg.log.Info("app health changed", "app", app.Slug, "from", was, "to", health)
	}
	select {
	case c.changed <- struct{}{}:
	default:
	}
}

// pending returns the apps whose health coderd has not been told.
func (c *appHealthChecker) pending() map[string]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]string{}
	for id, h := range c.health {
		if c.reported[id] != h {
			out[id] = h
		}
	}
	return out
}

// report posts the changes until ctx ends.
func (c *appHealthChecker) report(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.changed:
		}
		if !clockwait.Sleep(ctx, c.cfg.clock, c.cfg.batch, nil, "agent", "appHealthBatch") {
			return
		}
		// What changed until now goes in this report: a wake-up left by
		// those changes would only find nothing to send.
		select {
		case <-c.changed:
		default:
		}
		var sent map[string]string
		err := c.cfg.retry(ctx, "report app health", func(ctx context.Context) error {
			sent = c.pending()
			if len(sent) == 0 {
				return nil
			}
			return c.cfg.poster.PostWorkspaceAppHealth(ctx, codersdk.PostWorkspaceAppHealthsRequest{Healths: sent})
		})
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			// Refused for good (a 4xx): sending it again cannot help.
			c.cfg.log.Error("coderd refuses app health", "healths", sent, "err", err)
		}
		c.mu.Lock()
		maps.Copy(c.reported, sent)
		c.mu.Unlock()
	}
}
