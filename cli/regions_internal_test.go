package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"airgapcoder/codersdk"
	"airgapcoder/internal/testtier"
)

// fakeRegion is a region's /healthz on its own server, answering after
// delay (or with status, when set), counting its probes.
type fakeRegion struct {
	srv    *httptest.Server
	delay  atomic.Int64 // a time.Duration
	status int
	probes atomic.Int32
	// withToken counts probes that carried a session token.
	withToken atomic.Int32
}

func (r *fakeRegion) setDelay(d time.Duration) { r.delay.Store(int64(d)) }

func newFakeRegion(t *testing.T, delay time.Duration, status int, mux *http.ServeMux) *fakeRegion {
	t.Helper()
	r := &fakeRegion{status: status}
	r.setDelay(delay)
	if mux == nil {
		mux = http.NewServeMux()
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, req *http.Request) {
		r.probes.Add(1)
		if req.Header.Get(codersdk.SessionTokenHeader) != "" {
			r.withToken.Add(1)
		}
		time.Sleep(time.Duration(r.delay.Load())) // the fake region's latency, which the probe under test measures
		if r.status != 0 {
			http.Error(w, "not ready", r.status)
			return
		}
		_, _ = w.Write([]byte("OK"))
	})
	r.srv = httptest.NewServer(mux)
	t.Cleanup(r.srv.Close)
	return r
}

// fakeDeployment is a primary that lists regions: its own and every
// proxy's, with its health.
type fakeDeployment struct {
	primary       *fakeRegion
	client        *codersdk.Client
	regionsListed atomic.Int32

	mu      sync.Mutex
	regions []codersdk.Region // besides the primary
}

func (d *fakeDeployment) update(f func()) {
	d.mu.Lock()
	defer d.mu.Unlock()
	f()
}

func newFakeDeployment(t *testing.T, primaryDelay time.Duration) *fakeDeployment {
	t.Helper()
	d := &fakeDeployment{}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v2/regions", func(w http.ResponseWriter, _ *http.Request) {
		d.regionsListed.Add(1)
		d.mu.Lock()
		defer d.mu.Unlock()
		regions := append([]codersdk.Region{{Name: regionPrimary, Healthy: true, PathAppURL: d.primary.srv.URL}}, d.regions...)
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(codersdk.RegionsResponse{Regions: regions})
	})
	d.primary = newFakeRegion(t, primaryDelay, 0, mux)
	u, _ := url.Parse(d.primary.srv.URL)
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	d.client = codersdk.New(u)
	d.client.HTTPClient = &http.Client{Transport: tr}
	d.client.SessionToken = "token"
	return d
}

// addProxy adds a healthy proxy whose /healthz answers after delay (or
// with status).
func (d *fakeDeployment) addProxy(t *testing.T, name string, delay time.Duration, status int) *fakeRegion {
	t.Helper()
	r := newFakeRegion(t, delay, status, nil)
	d.update(func() {
		d.regions = append(d.regions, codersdk.Region{Name: name, Healthy: true, PathAppURL: r.srv.URL})
	})
	return r
}

// testClock is a settable clock for the cache's age.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *testClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *testClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func (d *fakeDeployment) chooser(t *testing.T, dir string, clock *testClock, warn io.Writer) *regionChooser {
	t.Helper()
	if clock == nil {
		clock = &testClock{now: time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)}
	}
	if warn == nil {
		warn = io.Discard
	}
	cachePath := ""
	if dir != "" {
		cachePath = filepath.Join(dir, regionCacheFile)
	}
	return &regionChooser{
		client: d.client, cachePath: cachePath, now: clock.Now,
		log: slog.New(slog.NewTextHandler(io.Discard, nil)), warn: warn,
	}
}

// routeName is the region a route connects through.
func routeName(r *agentRoute) string {
	if r.proxy == nil {
		return regionPrimary
	}
	return r.proxyName
}

// TestRegionAutoPicksFastest: auto measures every healthy region and picks
// the one whose /healthz answers fastest; a region that fails its probe
// or is not healthy is not picked.
func TestRegionAutoPicksFastest(t *testing.T) {
	t.Parallel()
	const slow = 250 * time.Millisecond
	for _, tc := range []struct {
		name         string
		primaryDelay time.Duration
		proxies      []struct {
			name   string
			delay  time.Duration
			status int
		}
		unhealthy string // a listed proxy that is not healthy
		want      string
	}{
		{name: "a proxy is fastest", primaryDelay: slow, proxies: []struct {
			name   string
			delay  time.Duration
			status int
		}{{"eu", 0, 0}, {"us", slow, 0}}, want: "eu"},
		{name: "the primary is fastest", primaryDelay: 0, proxies: []struct {
			name   string
			delay  time.Duration
			status int
		}{{"eu", slow, 0}, {"us", slow, 0}}, want: regionPrimary},
		{name: "the fastest proxy is not ready", primaryDelay: slow, proxies: []struct {
			name   string
			delay  time.Duration
			status int
		}{{"eu", 0, http.StatusServiceUnavailable}, {"us", 0, 0}}, want: "us"},
		{name: "only unhealthy proxies", primaryDelay: slow, unhealthy: "eu", want: regionPrimary},
		{name: "no proxies", primaryDelay: 0, want: regionPrimary},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := newFakeDeployment(t, tc.primaryDelay)
			for _, p := range tc.proxies {
				d.addProxy(t, p.name, p.delay, p.status)
			}
			var unhealthy *fakeRegion
			if tc.unhealthy != "" {
				unhealthy = newFakeRegion(t, 0, 0, nil)
				d.update(func() {
					d.regions = append(d.regions, codersdk.Region{Name: tc.unhealthy, Healthy: false, PathAppURL: unhealthy.srv.URL})
				})
			}
			r, err := d.chooser(t, "", nil, nil).route(context.Background(), regionAuto)
			if err != nil {
				t.Fatalf("route: %v", err)
			}
			if got := routeName(r); got != tc.want {
				t.Errorf("got region %s, want %s", got, tc.want)
			}
			if r.proxy != nil && r.proxy.SessionToken != d.client.SessionToken {
				t.Errorf("proxy client: got token %q, want the primary's %q", r.proxy.SessionToken, d.client.SessionToken)
			}
			if unhealthy != nil && unhealthy.probes.Load() != 0 {
				t.Errorf("the unhealthy region got %d probes, want 0", unhealthy.probes.Load())
			}
			if n := d.primary.withToken.Load(); n != 0 {
				t.Errorf("%d probes of the primary carried the session token, want none", n)
			}
			if len(tc.proxies) == 0 && d.primary.probes.Load() != 0 {
				t.Errorf("with no proxies the primary got %d probes, want none (nothing to compare)", d.primary.probes.Load())
			}
		})
	}
}

// TestRegionCache: auto remembers its choice per deployment for
// regionCacheTTL (no listing, no probes meanwhile), measures again after
// it, ignores a corrupt cache, and a fallback forgets the choice.
func TestRegionCache(t *testing.T) {
	testtier.Heavy(t, "takes 3 s of region probes at 200 ms latency")
	t.Parallel()
	d := newFakeDeployment(t, 200*time.Millisecond)
	eu := d.addProxy(t, "eu", 0, 0)
	dir := t.TempDir()
	clock := &testClock{now: time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)}
	rc := d.chooser(t, dir, clock, nil)
	ctx := context.Background()

	choose := func(want string, wantListed int32) {
		t.Helper()
		r, err := rc.route(ctx, "")
		if err != nil {
			t.Fatalf("route: %v", err)
		}
		if got := routeName(r); got != want {
			t.Errorf("got region %s, want %s", got, want)
		}
		if got := d.regionsListed.Load(); got != wantListed {
			t.Errorf("regions listed %d times, want %d", got, wantListed)
		}
	}
	choose("eu", 1)
	probes := eu.probes.Load()
	clock.Advance(regionCacheTTL - time.Second)
	choose("eu", 1) // remembered
	if eu.probes.Load() != probes {
		t.Errorf("a remembered choice probed again: %d probes, want %d", eu.probes.Load(), probes)
	}
	var c regionCache
	b, err := os.ReadFile(filepath.Join(dir, regionCacheFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatalf("cache file: %v\n%s", err, b)
	}
	if e := c.Deployments[d.client.URL.String()]; e.Region != "eu" || e.URL != eu.srv.URL {
		t.Errorf("cache entry: got %+v, want eu at %s", e, eu.srv.URL)
	}

	// Stale: measured again. The primary is now the fastest.
	clock.Advance(2 * time.Second)
	eu.setDelay(400 * time.Millisecond)
	d.primary.setDelay(0)
	choose(regionPrimary, 2)
	choose(regionPrimary, 2) // remembered, the primary too

	// Another deployment's entry is its own.
	other := newFakeDeployment(t, 0)
	if r, err := other.chooser(t, dir, clock, nil).route(ctx, ""); err != nil || routeName(r) != regionPrimary {
		t.Fatalf("other deployment: got %v, %v", r, err)
	}
	if other.regionsListed.Load() != 1 {
		t.Errorf("other deployment: regions listed %d times, want 1 (its own choice)", other.regionsListed.Load())
	}
	choose(regionPrimary, 2)

	// A corrupt cache is ignored and replaced.
	if err := os.WriteFile(filepath.Join(dir, regionCacheFile), []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	eu.setDelay(0)
	d.primary.setDelay(200 * time.Millisecond)
	choose("eu", 3)
	choose("eu", 3)

	// forget drops the entry only when it names the failed region.
	rc.forget("us")
	choose("eu", 3)
	rc.forget("eu")
	choose("eu", 4)
}

// TestRegionNamed: --proxy NAME uses that proxy (case-insensitively);
// "primary" asks nothing; an unknown name is a usage error listing the
// regions; a proxy that exists but is not healthy gets a warning and the
// primary.
func TestRegionNamed(t *testing.T) {
	t.Parallel()
	d := newFakeDeployment(t, 0)
	eu := d.addProxy(t, "eu", 0, 0)
	d.update(func() {
		d.regions = append(d.regions, codersdk.Region{Name: "ap", Healthy: false, PathAppURL: "https://ap.example.internal"})
	})
	ctx := context.Background()

	var warn bytes.Buffer
	r, err := d.chooser(t, "", nil, &warn).route(ctx, "EU")
	if err != nil || routeName(r) != "eu" || r.proxy.URL.String() != eu.srv.URL {
		t.Fatalf("--proxy EU: got %+v, %v; want eu at %s", r, err, eu.srv.URL)
	}
	if warn.Len() != 0 || eu.probes.Load() != 0 {
		t.Errorf("--proxy eu: warned %q and probed %d times, want neither", warn.String(), eu.probes.Load())
	}

	listed := d.regionsListed.Load()
	if r, err := d.chooser(t, "", nil, nil).route(ctx, "Primary"); err != nil || r.proxy != nil {
		t.Errorf("--proxy primary: got %+v, %v; want the primary", r, err)
	}
	if d.regionsListed.Load() != listed {
		t.Errorf("--proxy primary listed the regions")
	}

	_, err = d.chooser(t, "", nil, nil).route(ctx, "nope")
	var ue *usageError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "primary, eu, ap") || !strings.Contains(err.Error(), "--proxy nope") {
		t.Errorf("--proxy nope: got %v, want a usage error naming --proxy nope and listing primary, eu, ap", err)
	}

	warn.Reset()
	r, err = d.chooser(t, "", nil, &warn).route(ctx, "ap")
	if err != nil || r.proxy != nil {
		t.Fatalf("--proxy ap (unreachable): got %+v, %v; want the primary", r, err)
	}
	if got := warn.String(); !strings.Contains(got, `workspace proxy "ap" is not healthy (coder wsproxy ls shows why); connecting through the primary`) {
		t.Errorf("--proxy ap: warned %q, want its status and the primary", got)
	}
}

// TestClassifyProxyDialError: what a failed dial through a proxy means.
// Real failures (a closed port, an untrusted certificate, a proxy without
// the relay) come from codersdk's own dial.
func TestClassifyProxyDialError(t *testing.T) {
	t.Parallel()
	api := func(status int, msg string) error {
		return &codersdk.Error{StatusCode: status, Response: codersdk.Response{Message: msg}}
	}
	for _, tc := range []struct {
		name string
		err  error
		want proxyDialVerdict
	}{
		{"401", api(http.StatusUnauthorized, "bad token"), proxyRefused},
		{"403", api(http.StatusForbidden, "not yours"), proxyRefused},
		{"404 no such agent", api(http.StatusNotFound, "Agent not found"), proxyRefused},
		{"409 old build", api(http.StatusConflict, "old build"), proxyRefused},
		{"400", api(http.StatusBadRequest, "bad kind"), proxyRefused},
		{"404 from a proxy without the relay", api(http.StatusNotFound, "Route /api/v2/workspaceagents/x/connect is not served by a workspace proxy"), proxyFailed},
		{"502", api(http.StatusBadGateway, "bad gateway"), proxyAskPrimary},
		{"503", api(http.StatusServiceUnavailable, "relay down"), proxyAskPrimary},
		{"504", api(http.StatusGatewayTimeout, "timeout"), proxyAskPrimary},
		{"wrapped 503", fmt.Errorf("connect: %w", api(http.StatusServiceUnavailable, "x")), proxyAskPrimary},
		{"timeout", fmt.Errorf("dial: %w", context.DeadlineExceeded), proxyFailed},
		{"canceled by the user", fmt.Errorf("dial: %w", context.Canceled), proxyRefused},
		{"reset", &net.OpError{Op: "read", Err: errors.New("connection reset by peer")}, proxyFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := classifyProxyDialError(tc.err); got != tc.want {
				t.Errorf("classify(%v): got %s, want %s", tc.err, got, tc.want)
			}
		})
	}

	// Real dials.
	jsonAnswer := func(status int, msg string) *httptest.Server {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			_ = json.NewEncoder(w).Encode(codersdk.Response{Message: msg})
		}))
		t.Cleanup(srv.Close)
		return srv
	}
	closed := httptest.NewServer(http.NotFoundHandler())
	closedURL := closed.URL
	closed.Close()
	untrusted := httptest.NewTLSServer(http.NotFoundHandler())
	t.Cleanup(untrusted.Close)
	for _, tc := range []struct {
		name string
		url  string
		want proxyDialVerdict
	}{
		{"connection refused", closedURL, proxyFailed},
		{"untrusted certificate", untrusted.URL, proxyFailed},
		{"proxy without the relay", jsonAnswer(http.StatusNotFound, "Route /api/v2/workspaceagents/a/connect is not served by a workspace proxy").URL, proxyFailed},
		{"forbidden", jsonAnswer(http.StatusForbidden, "not your workspace").URL, proxyRefused},
		{"relay down", jsonAnswer(http.StatusServiceUnavailable, "the relay to the primary is down").URL, proxyAskPrimary},
	} {
		t.Run("dial "+tc.name, func(t *testing.T) {
			t.Parallel()
			u, _ := url.Parse(tc.url)
			tr := &http.Transport{}
			defer tr.CloseIdleConnections()
			c := codersdk.New(u)
			c.HTTPClient = &http.Client{Transport: tr}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			conn, err := c.DialWorkspaceAgent(ctx, "a", codersdk.DialOptions{Kind: codersdk.RelayKindSSH})
			if err == nil {
				conn.Close()
				t.Fatal("dial: got a connection, want an error")
			}
			if got := classifyProxyDialError(err); got != tc.want {
				t.Errorf("classify(%v): got %s, want %s", err, got, tc.want)
			}
		})
	}
}

// TestAgentRouteFallBack: a route through a proxy falls back to the
// primary when the proxy fails (saying so once and forgetting the
// remembered choice), reports a refusal the primary would give too, and
// asks the primary about a 5xx: its success means the proxy failed, its
// own failure is the answer and the proxy stays in use.
func TestAgentRouteFallBack(t *testing.T) {
	t.Parallel()
	primaryURL, _ := url.Parse("https://primary.example")
	proxyURL, _ := url.Parse("https://eu.example")
	errRefused := &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connect: connection refused")}
	api := func(status int) error {
		return &codersdk.Error{StatusCode: status, Response: codersdk.Response{Message: http.StatusText(status)}}
	}
	for _, tc := range []struct {
		name                   string
		proxyErr, primaryErr   error
		wantErr                error // nil: connected
		wantCalls              string
		wantFellBack, wantWarn bool
	}{
		{name: "proxy works", wantCalls: "eu", wantErr: nil},
		{name: "proxy refuses connections", proxyErr: errRefused, wantCalls: "eu,primary", wantFellBack: true, wantWarn: true},
		{name: "proxy forbids", proxyErr: api(http.StatusForbidden), wantCalls: "eu", wantErr: api(http.StatusForbidden)},
		{name: "proxy's relay is down", proxyErr: api(http.StatusServiceUnavailable), wantCalls: "eu,primary", wantFellBack: true, wantWarn: true},
		{name: "agent away on both", proxyErr: api(http.StatusServiceUnavailable), primaryErr: api(http.StatusServiceUnavailable),
			wantCalls: "eu,primary", wantErr: api(http.StatusServiceUnavailable)},
		{name: "primary down too", proxyErr: errRefused, primaryErr: errRefused, wantCalls: "eu,primary", wantErr: errRefused, wantFellBack: true, wantWarn: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			primary := codersdk.New(primaryURL)
			var warn bytes.Buffer
			forgot := 0
			r := &agentRoute{primary: primary, proxy: primary.WithURL(proxyURL), proxyName: "eu", warn: &warn, onFallBack: func() { forgot++ }}
			var calls []string
			dial := func(_ context.Context, c *codersdk.Client) (net.Conn, error) {
				if c.URL == proxyURL {
					calls = append(calls, "eu")
					if tc.proxyErr != nil {
						return nil, tc.proxyErr
					}
				} else {
					calls = append(calls, "primary")
					if tc.primaryErr != nil {
						return nil, tc.primaryErr
					}
				}
				a, b := net.Pipe()
				b.Close()
				return a, nil
			}
			conn, err := r.dial(context.Background(), dial)
			if conn != nil {
				conn.Close()
			}
			switch {
			case tc.wantErr == nil && err != nil:
				t.Errorf("dial: got %v, want a connection", err)
			case tc.wantErr != nil && (err == nil || err.Error() != tc.wantErr.Error()):
				t.Errorf("dial: got %v, want %v", err, tc.wantErr)
			}
			if got := strings.Join(calls, ","); got != tc.wantCalls {
				t.Errorf("dialed %s, want %s", got, tc.wantCalls)
			}
			if got := r.activeProxy() == nil; got != tc.wantFellBack {
				t.Errorf("fell back: got %v, want %v", got, tc.wantFellBack)
			}
			line := warn.String()
			if tc.wantWarn != (line != "") || (tc.wantWarn && (!strings.HasPrefix(line, `coder: workspace proxy "eu" is unreachable (`) ||
				!strings.HasSuffix(line, "); connecting through the primary\n") || strings.Count(line, "\n") != 1)) {
				t.Errorf("stderr: got %q, want a warning: %v", line, tc.wantWarn)
			}
			if want := map[bool]int{true: 1}[tc.wantFellBack]; forgot != want {
				t.Errorf("forgot the remembered choice %d times, want %d", forgot, want)
			}
			if !tc.wantFellBack {
				return
			}
			// From now on the primary serves, without another warning.
			calls = nil
			if conn, _ := r.dial(context.Background(), dial); conn != nil {
				conn.Close()
			}
			if got := strings.Join(calls, ","); got != "primary" || strings.Count(warn.String(), "\n") != 1 || r.via() != "coderd's relay" {
				t.Errorf("after the fallback: dialed %s, stderr %q, via %q; want the primary, one warning", got, warn.String(), r.via())
			}
		})
	}
}

// TestPreparedRefusedByProxy: a proxy that answers prepared connections
// with 400 gets plain connects from then on; the primary's 400 is a
// refusal like any other.
func TestPreparedRefusedByProxy(t *testing.T) {
	t.Parallel()
	u, _ := url.Parse("https://primary.example")
	pu, _ := url.Parse("https://eu.example")
	primary := codersdk.New(u)
	r := &agentRoute{primary: primary, proxy: primary.WithURL(pu), proxyName: "eu", warn: io.Discard}
	bad := &codersdk.Error{StatusCode: http.StatusBadRequest, Response: codersdk.Response{Message: "prepare is not supported"}}
	if r.preparedRefused(primary, bad) || !r.canPrepare(primary) {
		t.Errorf("the primary's 400 turned prepared connections off")
	}
	if r.preparedRefused(r.proxy, &codersdk.Error{StatusCode: http.StatusForbidden}) || !r.canPrepare(r.proxy) {
		t.Errorf("the proxy's 403 turned prepared connections off")
	}
	if !r.preparedRefused(r.proxy, bad) || r.canPrepare(r.proxy) || !r.canPrepare(primary) {
		t.Errorf("the proxy's 400: want prepared connections off for the proxy only")
	}
}

// TestSSHConfigProxy: config-ssh's ProxyCommand carries --proxy when one
// was given.
func TestSSHConfigProxy(t *testing.T) {
	t.Parallel()
	if got := sshConfigBlockVia("/usr/bin/coder", "/home/a/.config/coderv2", "eu", []string{"dev"}, nil); !strings.Contains(got,
		"\tProxyCommand /usr/bin/coder --global-config /home/a/.config/coderv2 ssh --proxy eu --stdio %h\n") {
		t.Errorf("with --proxy eu:\n%s", got)
	}
	if got := sshConfigBlock("/usr/bin/coder", "/home/a/.config/coderv2", []string{"dev"}, nil); !strings.Contains(got,
		"\tProxyCommand /usr/bin/coder --global-config /home/a/.config/coderv2 ssh --stdio %h\n") {
		t.Errorf("without --proxy:\n%s", got)
	}
}

// TestProvisionerdAgentURL: --agent-url (CODER_PROVISIONER_DAEMON_AGENT_URL)
// must be an http(s) URL; a bad one is a usage error naming the flag.
func TestProvisionerdAgentURL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		raw  string
		want bool
	}{
		{"", true},
		{"https://eu-proxy.example.internal", true},
		{"http://10.0.0.5:3001", true},
		{"ftp://eu", false},
		{"eu-proxy", false},
		{"https://", false},
	} {
		err := checkAgentURL(tc.raw)
		var ue *usageError
		if tc.want != (err == nil) || (err != nil && (!errors.As(err, &ue) || !strings.Contains(err.Error(), "--agent-url"))) {
			t.Errorf("checkAgentURL(%q): got %v, want ok=%v (a usage error naming --agent-url)", tc.raw, err, tc.want)
		}
	}
	// The environment variable reaches the flag.
	var stdout, stderr bytes.Buffer
	inv := &invocation{stdin: strings.NewReader(""), stdout: &stdout, stderr: &stderr,
		environ: []string{"CODER_PROVISIONER_DAEMON_AGENT_URL=ftp://from-env", "CODER_URL=http://127.0.0.1:1", "CODER_PROVISIONER_DAEMON_PSK=x"}}
	root := inv.root()
	root.SetArgs([]string{"provisionerd", "start", "--global-config", t.TempDir(), "--cache-dir", t.TempDir()})
	err := root.Execute()
	var ue *usageError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "--agent-url ftp://from-env") {
		t.Errorf("CODER_PROVISIONER_DAEMON_AGENT_URL=ftp://from-env: got %v, want a usage error naming it", err)
	}
}
