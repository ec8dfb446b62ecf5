package agent

import (
	"context"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"airgapcoder/coderd/coderdtest"
	"airgapcoder/codersdk"
	"airgapcoder/internal/testrun"
)

// fakeHealthPoster records app health posts; the first failures calls fail
// as a restarting coderd would.
type fakeHealthPoster struct {
	posts *recorder[map[string]string]
}

func (p *fakeHealthPoster) PostWorkspaceAppHealth(_ context.Context, req codersdk.PostWorkspaceAppHealthsRequest) error {
	return p.posts.post(maps.Clone(req.Healths))
}

// latest folds posts into each app's last reported health.
func latest(posts []map[string]string) map[string]string {
	out := map[string]string{}
	for _, post := range posts {
		maps.Copy(out, post)
	}
	return out
}

// waitFor waits until cond holds for the latest healths.
func (p *fakeHealthPoster) waitFor(t *testing.T, timeout time.Duration, what string, cond func(map[string]string) bool) {
	t.Helper()
	p.posts.waitFor(t, timeout, what, func(posts []map[string]string) bool { return cond(latest(posts)) })
}

// flakyServer is a real HTTP server on a fixed loopback address that can be
// stopped (connections refused) and started again, or made to answer 503.
type flakyServer struct {
	t       *testing.T
	addr    string
	failing atomic.Bool
	hits    atomic.Int64 // requests to /healthz
	srv     *http.Server
	done    chan struct{}
}

func newFlakyServer(t *testing.T) *flakyServer {
	t.Helper()
	s := &flakyServer{t: t, addr: "127.0.0.1:0"}
	s.start()
	t.Cleanup(s.stop)
	return s
}

func (s *flakyServer) start() {
	s.t.Helper()
	ln, err := net.Listen("tcp", s.addr)
	if err != nil {
		s.t.Fatal(err)
	}
	s.addr = ln.Addr().String()
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		s.hits.Add(1)
		if s.failing.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		_, _ = fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/missing", http.NotFound)
	mux.HandleFunc("/moved", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/elsewhere", http.StatusFound) })
	mux.HandleFunc("/broken", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusInternalServerError) })
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	s.done = make(chan struct{})
	go func() {
		defer close(s.done)
		_ = s.srv.Serve(ln)
	}()
}

func (s *flakyServer) stop() {
	if s.srv == nil {
		return
	}
	_ = s.srv.Close()
	<-s.done
	s.srv = nil
}

func (s *flakyServer) url(path string) string { return "http://" + s.addr + path }

// healthOf is the health the checker holds for app now.
func (c *appHealthChecker) healthOf(app string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.health[app]
}

// TestAppHealthChecker runs the checker against a real HTTP server that
// goes down and comes back, stepping the checks, the reporter's wait and
// its retry on a mock clock: each check happens exactly when its interval
// passes on the clock, and an app turns unhealthy at its threshold-th
// failed check, not one before.
func TestAppHealthChecker(t *testing.T) {
	t.Parallel()
	ctx := coderdtest.ClockContext(t)
	clock := coderdtest.NewClock(t)
	tickers := clock.Trap().TickerFunc("agent", "appHealthInterval")
	defer tickers.Close()
	batches := clock.Trap().NewTimer("agent", "appHealthBatch")
	defer batches.Close()
	backoffs := clock.Trap().NewTimer("agent", "backoff", "report app health")
	defer backoffs.Close()

	srv := newFlakyServer(t)
	const (
		threshold = 3
		interval  = 5 * time.Second
		batch     = 500 * time.Millisecond
	)
	hc := func(path string) *codersdk.AppHealthcheck {
		return &codersdk.AppHealthcheck{URL: srv.url(path), Interval: int32(interval / time.Second), Threshold: threshold}
	}
	init := codersdk.WorkspaceAppHealthInitializing
	apps := []codersdk.WorkspaceApp{
		{ID: "web", Slug: "web", Healthcheck: hc("/healthz"), Health: init},
		{ID: "missing", Slug: "missing", Healthcheck: hc("/missing"), Health: init},
		{ID: "moved", Slug: "moved", Healthcheck: hc("/moved"), Health: init},
		{ID: "broken", Slug: "broken", Healthcheck: hc("/broken"), Health: init},
		{ID: "plain", Slug: "plain", Health: codersdk.WorkspaceAppHealthDisabled},
		{ID: "zero", Slug: "zero", Healthcheck: &codersdk.AppHealthcheck{URL: srv.url("/healthz")}, Health: codersdk.WorkspaceAppHealthDisabled},
	}
	// The agent's own retry helper, on the same clock.
	u, _ := url.Parse("http://127.0.0.1:1")
	client := codersdk.New(u)
	client.SessionToken = "token"
	a, err := New(Options{Client: client, Logger: discardLogger(), Clock: clock, ReconnectMin: 100 * time.Millisecond, ReconnectMax: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	p := &fakeHealthPoster{posts: newRecorder[map[string]string](1)}
	c := newAppHealthChecker(appHealthConfig{log: discardLogger(), poster: p, apps: apps, retry: a.retry, clock: clock, batch: batch})
	stop := testrun.Background(t, "app health checker", func(ctx context.Context) error {
		c.run(ctx)
		return nil
	})
	// One ticker per app with a usable healthcheck, at its interval.
	for range 4 {
		call := tickers.MustWait(ctx)
		if call.Duration != interval {
			t.Errorf("a healthcheck ticks every %s, want %s", call.Duration, interval)
		}
		call.MustRelease(ctx)
	}
	next := clock.Now().Add(interval)
	// check moves the clock to the next checks and returns once they are
	// done (quartz waits for a TickerFunc's function).
	check := func() {
		t.Helper()
		coderdtest.AdvanceClock(ctx, t, clock, next.Sub(clock.Now()))
		next = next.Add(interval)
	}
	// report steps the reporter's wait, which a change started, and waits
	// for the post.
	report := func(what string, cond func(map[string]string) bool) {
		t.Helper()
		call := batches.MustWait(ctx)
		call.MustRelease(ctx)
		if call.Duration != batch {
			t.Errorf("the reporter waits %s, want %s", call.Duration, batch)
		}
		clock.Advance(batch).MustWait(ctx)
		p.waitFor(t, 10*time.Second, what, cond)
	}
	wantHealth := func(when string, want map[string]string) {
		t.Helper()
		for id, h := range want {
			if got := c.healthOf(id); got != h {
				t.Errorf("%s: %s is %s, want %s", when, id, got, h)
			}
		}
	}
	healthy, unhealthy := codersdk.WorkspaceAppHealthHealthy, codersdk.WorkspaceAppHealthUnhealthy

	// Nothing is checked before the first interval passed.
	clock.Advance(interval - time.Millisecond).MustWait(ctx)
	if n := srv.hits.Load(); n != 0 {
		t.Errorf("%d checks before the first interval passed", n)
	}
	// Below 500 passes (404 and a redirect included): one passing check
	// makes an app healthy. The first post fails and is retried after
	// the agent's backoff.
	check()
	wantHealth("after the first check", map[string]string{"web": healthy, "missing": healthy, "moved": healthy, "broken": init})
	call := batches.MustWait(ctx)
	call.MustRelease(ctx)
	clock.Advance(batch).MustWait(ctx)
	retry := backoffs.MustWait(ctx)
	retry.MustRelease(ctx)
	if len(p.posts.all()) != 0 {
		t.Fatalf("posts recorded before the retry: %v", p.posts.all())
	}
	clock.Advance(retry.Duration).MustWait(ctx)
	p.waitFor(t, 10*time.Second, "web, missing and moved healthy (retried)", func(h map[string]string) bool {
		return h["web"] == healthy && h["missing"] == healthy && h["moved"] == healthy
	})
	// 500 fails: broken turns unhealthy at its threshold-th check.
	check()
	wantHealth("after the second check", map[string]string{"broken": init})
	check()
	wantHealth("after the third check", map[string]string{"broken": unhealthy})
	report("broken unhealthy", func(h map[string]string) bool { return h["broken"] == unhealthy })

	// The server goes down: unhealthy at the threshold-th failed check.
	srv.stop()
	for range threshold - 1 {
		check()
	}
	wantHealth("after two failed checks", map[string]string{"web": healthy, "missing": healthy, "moved": healthy})
	check()
	wantHealth("after three failed checks", map[string]string{"web": unhealthy, "missing": unhealthy, "moved": unhealthy})
	report("web, missing and moved unhealthy after the server stopped", func(h map[string]string) bool {
		return h["web"] == unhealthy && h["missing"] == unhealthy && h["moved"] == unhealthy
	})

	// Back up: one passing check makes them healthy again.
	srv.start()
	check()
	report("web healthy after the server came back", func(h map[string]string) bool { return h["web"] == healthy })

	// Answering 503: unhealthy exactly at the threshold-th failed check.
	before := srv.hits.Load()
	srv.failing.Store(true)
	for range threshold - 1 {
		check()
	}
	wantHealth("answering 503 to two checks", map[string]string{"web": healthy})
	check()
	wantHealth("answering 503 to three checks", map[string]string{"web": unhealthy})
	if n := srv.hits.Load() - before; n != threshold {
		t.Errorf("web became unhealthy after %d checks, want %d", n, threshold)
	}
	report("web unhealthy while it answers 503", func(h map[string]string) bool { return h["web"] == unhealthy })

	stop()
	// Only changes were sent, and never for apps without a healthcheck.
	last := map[string]string{}
	for _, app := range apps {
		last[app.ID] = app.Health
	}
	for i, post := range p.posts.all() {
		for id, h := range post {
			if id == "plain" || id == "zero" {
				t.Errorf("post %d: health of %s, which has no (usable) healthcheck", i, id)
			}
			if last[id] == h {
				t.Errorf("post %d: %s %s again, which coderd already had", i, id, h)
			}
			last[id] = h
		}
	}
}

// TestAppHealthCheckerKeepsStoredHealth: an agent that restarts starts
// from the health coderd has, and reports nothing until a check changes it.
func TestAppHealthCheckerKeepsStoredHealth(t *testing.T) {
	t.Parallel()
	apps := []codersdk.WorkspaceApp{{ID: "web", Slug: "web", Health: codersdk.WorkspaceAppHealthUnhealthy,
		Healthcheck: &codersdk.AppHealthcheck{URL: "http://127.0.0.1:1/", Interval: 3600, Threshold: 1}}}
	c := newAppHealthChecker(appHealthConfig{log: discardLogger(), apps: apps})
	if got := c.pending(); len(got) != 0 {
		t.Errorf("pending at start: got %v, want nothing", got)
	}
	if got := c.health["web"]; got != codersdk.WorkspaceAppHealthUnhealthy {
		t.Errorf("health at start: got %s, want unhealthy", got)
	}
	// An app coderd has as disabled (an older coderd) is reported as
	// initializing first.
	apps[0].Health = codersdk.WorkspaceAppHealthDisabled
	c = newAppHealthChecker(appHealthConfig{log: discardLogger(), apps: apps})
	if got := c.pending(); got["web"] != codersdk.WorkspaceAppHealthInitializing {
		t.Errorf("pending at start: got %v, want web initializing", got)
	}
}
