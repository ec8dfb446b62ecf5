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

// TestAppHealthChecker runs the checker against a real HTTP server that
// goes down and comes back, with a healthcheck second of 20ms.
func TestAppHealthChecker(t *testing.T) {
	t.Parallel()
	srv := newFlakyServer(t)
	const threshold = 3
	hc := func(path string) *codersdk.AppHealthcheck {
		return &codersdk.AppHealthcheck{URL: srv.url(path), Interval: 1, Threshold: threshold}
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
	// The agent's own retry helper, with short backoffs.
	u, _ := url.Parse("http://127.0.0.1:1")
	client := codersdk.New(u)
	client.SessionToken = "token"
	a, err := New(Options{Client: client, Logger: discardLogger(), ReconnectMin: 10 * time.Millisecond, ReconnectMax: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	p := &fakeHealthPoster{posts: newRecorder[map[string]string](1)}
	c := newAppHealthChecker(appHealthConfig{log: discardLogger(), poster: p, apps: apps, retry: a.retry,
		second: 20 * time.Millisecond, batch: 5 * time.Millisecond})
	stop := testrun.Background(t, "app health checker", func(ctx context.Context) error {
		c.run(ctx)
		return nil
	})

	healthy, unhealthy := codersdk.WorkspaceAppHealthHealthy, codersdk.WorkspaceAppHealthUnhealthy
	// Below 500 passes (404 and a redirect included); 500 fails. The
	// first post failed and was retried.
	p.waitFor(t, 10*time.Second, "web, missing and moved healthy, broken unhealthy", func(h map[string]string) bool {
		return h["web"] == healthy && h["missing"] == healthy && h["moved"] == healthy && h["broken"] == unhealthy
	})

	// The server goes down: unhealthy once threshold checks failed.
	srv.stop()
	p.waitFor(t, 10*time.Second, "web unhealthy after the server stopped", func(h map[string]string) bool { return h["web"] == unhealthy })

	// Back up: one passing check makes it healthy again.
	srv.start()
	p.waitFor(t, 10*time.Second, "web healthy after the server came back", func(h map[string]string) bool { return h["web"] == healthy })

	// Answering 503: unhealthy only after threshold failed checks.
	before := srv.hits.Load()
	srv.failing.Store(true)
	p.waitFor(t, 10*time.Second, "web unhealthy while it answers 503", func(h map[string]string) bool { return h["web"] == unhealthy })
	if n := srv.hits.Load() - before; n < threshold {
		t.Errorf("web became unhealthy after %d failed checks, want at least %d", n, threshold)
	}

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
