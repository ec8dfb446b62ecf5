package wsproxy_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/quartz"
	"github.com/hashicorp/yamux"
	"go.uber.org/goleak"

	"airgapcoder/coderd/coderdtest"
	"airgapcoder/codersdk"
	"airgapcoder/internal/syncbuf"
	"airgapcoder/internal/testpki"
	"airgapcoder/internal/testwait"
	"airgapcoder/relayconn"
	"airgapcoder/wsproxy"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(coderdtest.Main(m), coderdtest.LeakOptions()...) }

const token = "4f7c1d2e-0000-4000-8000-000000000001:secretsecretsecretsecretsecret12"

// fakePrimary answers a proxy's registrations and deregistration as coderd
// does, and records them.
type fakePrimary struct {
	srv *httptest.Server

	mu            sync.Mutex
	sessions      []*yamux.Session // relay sessions the proxy dialed
	failFirst     int              // answer this many registrations 503
	refuse        string           // when set, refuse registrations 401 with this message
	relayDown     bool             // when set, answer relay sessions 503
	relayDials    int              // relay session requests, answered or not
	heartbeat     time.Duration    // the heartbeat interval it names; 0 means 50 ms
	registrations []codersdk.RegisterWorkspaceProxyRequest
	deregistered  []string
	authorized    []codersdk.ProxyAuthorizeConnectRequest // authorize-connect calls
	reports       []codersdk.ProxyConnectionReport
	dials         []codersdk.ProxyRelayRequest // OpDial streams the proxy opened
}

func newFakePrimary(t *testing.T) *fakePrimary {
	t.Helper()
	f := &fakePrimary{}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakePrimary) serve(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get(codersdk.ExternalProxyAuthTokenHeader) != token {
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	if r.URL.Path == "/api/v2/workspaceproxies/me/relay" {
		f.serveRelay(w, r)
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	switch r.URL.Path {
	case "/api/v2/workspaceproxies/me/register":
		var req codersdk.RegisterWorkspaceProxyRequest
		_ = json.NewDecoder(r.Body).Decode(&req)
		switch {
		case f.refuse != "":
			w.WriteHeader(http.StatusUnauthorized)
			_ = json.NewEncoder(w).Encode(codersdk.Response{Message: f.refuse})
			return
		case f.failFirst > 0:
			f.failFirst--
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		f.registrations = append(f.registrations, req)
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(codersdk.RegisterWorkspaceProxyResponse{ProxyID: "id", ProxyName: "eu", HeartbeatIntervalMillis: f.heartbeatInterval().Milliseconds()})
	case "/api/v2/workspaceproxies/me/authorize-connect":
		var req codersdk.ProxyAuthorizeConnectRequest
		_ = json.NewDecoder(r.Body).Decode(&req)
		f.authorized = append(f.authorized, req)
		_ = json.NewEncoder(w).Encode(codersdk.ProxyAuthorizeConnectResponse{
			UserID: "user-id", Username: "alice", AgentID: req.AgentID, ValidForMillis: 60_000,
		})
	case "/api/v2/workspaceproxies/me/connections":
		var req codersdk.ProxyConnectionReport
		_ = json.NewDecoder(r.Body).Decode(&req)
		f.reports = append(f.reports, req)
		w.WriteHeader(http.StatusNoContent)
	case "/api/v2/workspaceproxies/me/deregister":
		var req codersdk.DeregisterWorkspaceProxyRequest
		_ = json.NewDecoder(r.Body).Decode(&req)
		f.deregistered = append(f.deregistered, req.ReplicaID)
		w.WriteHeader(http.StatusNoContent)
	default:
		w.WriteHeader(http.StatusNotFound)
	}
}

// serveRelay holds a proxy's relay session open (refused as the
// registrations are); an OpDial stream the proxy opens is answered 0 and
// echoed.
func (f *fakePrimary) serveRelay(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.relayDials++
	refuse, down := f.refuse, f.relayDown
	f.mu.Unlock()
	if down {
		http.Error(w, "relay sessions are down", http.StatusServiceUnavailable)
		return
	}
	if refuse != "" {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		_ = json.NewEncoder(w).Encode(codersdk.Response{Message: refuse})
		return
	}
	conn, err := relayconn.AcceptUpgrade(w)
	if err != nil {
		return
	}
	mux, err := yamux.Server(conn, nil)
	if err != nil {
		_ = conn.Close()
		return
	}
	f.mu.Lock()
	f.sessions = append(f.sessions, mux)
	f.mu.Unlock()
	stop := context.AfterFunc(r.Context(), func() { _ = mux.Close() })
	defer stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		stream, err := mux.AcceptStream()
		if err != nil {
			return
		}
		wg.Go(func() {
			defer stream.Close()
			var req codersdk.ProxyRelayRequest
			if relayconn.ReadFrame(stream, &req) != nil || req.Op != codersdk.ProxyRelayOpDial {
				return
			}
			f.mu.Lock()
			f.dials = append(f.dials, req)
			f.mu.Unlock()
			if relayconn.WriteFrame(stream, codersdk.ProxyRelayReply{}) == nil {
				_, _ = io.Copy(stream, stream)
			}
		})
	}
}

// relaySessions returns the relay sessions the proxy has opened, in the
// order it opened them.
func (f *fakePrimary) relaySessions() []*yamux.Session {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*yamux.Session(nil), f.sessions...)
}

// waitRelaySessions waits until the proxy has opened n relay sessions.
func (f *fakePrimary) waitRelaySessions(t *testing.T, n int, what string) {
	t.Helper()
	testwait.For(t, 10*time.Second, what, testwait.Bool(func() bool { return len(f.relaySessions()) >= n }))
}

// heartbeatInterval is the interval the primary names; f.mu is held.
func (f *fakePrimary) heartbeatInterval() time.Duration {
	if f.heartbeat > 0 {
		return f.heartbeat
	}
	return 50 * time.Millisecond
}

// count reads a counter of f's under its lock.
func (f *fakePrimary) count(n *int) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return *n
}

// stepHeartbeat moves clock, the proxy's, on by the heartbeat interval and
// waits for the registration that the heartbeat sends.
func (f *fakePrimary) stepHeartbeat(ctx context.Context, t *testing.T, clock *quartz.Mock) {
	t.Helper()
	f.mu.Lock()
	before, interval := len(f.registrations), f.heartbeatInterval()
	f.mu.Unlock()
	coderdtest.AdvanceClock(ctx, t, clock, interval)
	testwait.ForCtx(ctx, t, "the heartbeat", testwait.Bool(func() bool { regs, _ := f.state(); return len(regs) > before }))
}

func (f *fakePrimary) state() ([]codersdk.RegisterWorkspaceProxyRequest, []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]codersdk.RegisterWorkspaceProxyRequest(nil), f.registrations...), append([]string(nil), f.deregistered...)
}

// startProxy runs a proxy against primary on a free loopback port over
// HTTPS, its waits on clock (nil: the real clock), and returns it, its
// client and Run's result.
func startProxy(t *testing.T, primary *fakePrimary, logs io.Writer, clock quartz.Clock) (*wsproxy.Server, *http.Client, chan error, context.CancelFunc) {
	t.Helper()
	cert := testpki.SelfSigned(t, time.Now().Add(-time.Hour), time.Now().Add(365*24*time.Hour), "127.0.0.1")
	pu, _ := url.Parse(primary.srv.URL)
	au, _ := url.Parse("https://127.0.0.1")
	s, err := wsproxy.New(wsproxy.Options{
		PrimaryAccessURL: pu, ProxySessionToken: token, AccessURL: au, HTTPAddress: "127.0.0.1:0",
		TLSCertificate: cert, Version: "v1.2.3", Logger: slog.New(slog.NewTextHandler(logs, nil)), RegisterRetry: 10 * time.Millisecond,
		Clock: clock,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			t.Error("Run did not return within 15s of its context ending")
		}
	})
	leaf, _ := x509.ParseCertificate(cert.Certificate[0])
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	client := &http.Client{
		Transport:     &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	t.Cleanup(client.CloseIdleConnections)
	return s, client, done, cancel
}

func get(t *testing.T, c *http.Client, u string) (*http.Response, string) {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// TestProxyLifecycle runs a proxy on a mock clock against the fake
// primary: it registers (again after the backoff on its clock while the
// primary is not up), serves its routes, keeps its relay session up (dialed
// again after the backoff when it drops), heartbeats at the primary's
// interval on its clock, and deregisters when stopped.
func TestProxyLifecycle(t *testing.T) {
	t.Parallel()
	ctx := coderdtest.ClockContext(t)
	clock := coderdtest.NewClock(t)
	registerBackoff := clock.Trap().NewTimer("wsproxy", "registerBackoff")
	defer registerBackoff.Close()
	relayBackoff := clock.Trap().NewTimer("wsproxy", "relayBackoff")
	defer relayBackoff.Close()
	primary := newFakePrimary(t)
	primary.failFirst = 2 // the primary is not up yet: the proxy retries
	logs := &syncbuf.Buffer{}
	s, client, done, cancel := startProxy(t, primary, logs, clock)
	for i := range 2 {
		call := registerBackoff.MustWait(ctx)
		call.MustRelease(ctx)
		if tries := primary.count(&primary.failFirst); tries != 1-i {
			t.Fatalf("registrations before backoff %d: %d left to fail, want %d", i+1, tries, 1-i)
		}
		coderdtest.AdvanceClock(ctx, t, clock, call.Duration)
	}
	select {
	case <-s.Ready():
	case err := <-done:
		t.Fatalf("Run returned before ready: %v\n%s", err, logs)
	case <-ctx.Done():
		t.Fatalf("not ready within 15s\n%s", logs)
	}
	if !strings.Contains(logs.String(), "retrying") {
		t.Errorf("logs: want the failed registrations logged as retried\n%s", logs)
	}
	base := "https://" + s.Addr().String()
	primary.waitRelaySessions(t, 1, "the relay session")

	for _, tc := range []struct {
		path, want string
		status     int
	}{
		{"/healthz", "OK", http.StatusOK},
		{"/healthz-report", `"errors":[]`, http.StatusOK},
		{"/api/v2/buildinfo", `"workspace_proxy":true`, http.StatusOK},
		{"/api/v2/users/me", "not served by a workspace proxy", http.StatusNotFound},
	} {
		resp, body := get(t, client, base+tc.path)
		if resp.StatusCode != tc.status || !strings.Contains(body, tc.want) {
			t.Errorf("GET %s: got %d %q, want %d containing %q", tc.path, resp.StatusCode, body, tc.status, tc.want)
		}
	}
	// The dashboard is the primary's, whatever the path holds.
	pu, _ := url.Parse(primary.srv.URL)
	for path, want := range map[string]string{
		"/workspaces?filter=me": primary.srv.URL + "/workspaces?filter=me",
		"//evil.example/login":  primary.srv.URL + "/evil.example/login",
	} {
		// Follow the proxy's own redirects (path cleaning) to the one that
		// leaves it.
		u, _ := url.Parse(base + path)
		for range 3 {
			resp, _ := get(t, client, u.String())
			if resp.StatusCode != http.StatusTemporaryRedirect && resp.StatusCode != http.StatusMovedPermanently {
				t.Fatalf("GET %s: got %d, want a redirect", u, resp.StatusCode)
			}
			u, _ = u.Parse(resp.Header.Get("Location"))
			if u.Host != s.Addr().String() {
				break
			}
		}
		if u.Host != pu.Host || u.String() != want {
			t.Errorf("GET %s: redirected to %s, want %s", path, u, want)
		}
	}

	// A relay session that drops is dialed again; meanwhile /healthz
	// sends clients to the primary and the health report has an error.
	primary.mu.Lock()
	primary.relayDown = true
	primary.mu.Unlock()
	_ = primary.relaySessions()[0].Close()
	testwait.For(t, 10*time.Second, "/healthz 503 while the relay session is down", testwait.Bool(func() bool {
		resp, _ := get(t, client, base+"/healthz")
		return resp.StatusCode == http.StatusServiceUnavailable
	}))
	if _, body := get(t, client, base+"/healthz-report"); !strings.Contains(body, "relay session to the primary is down") {
		t.Errorf("/healthz-report while the relay session is down: got %s, want an error about it", body)
	}
	call := relayBackoff.MustWait(ctx)
	call.MustRelease(ctx)
	primary.mu.Lock()
	primary.relayDown = false
	primary.mu.Unlock()
	coderdtest.AdvanceClock(ctx, t, clock, call.Duration)
	primary.waitRelaySessions(t, 2, "the relay session dialed again")
	testwait.For(t, 10*time.Second, "/healthz OK again", testwait.Bool(func() bool { resp, _ := get(t, client, base+"/healthz"); return resp.StatusCode == http.StatusOK }))

	// It heartbeats at the interval the primary named, as one replica,
	// with its details and health report (clean, but for the relay
	// session's outage above).
	before, _ := primary.state()
	for range 3 {
		primary.stepHeartbeat(ctx, t, clock)
	}
	regs, _ := primary.state()
	if len(regs) != len(before)+3 {
		t.Errorf("registrations over three heartbeat intervals on the clock: got %d, want %d", len(regs)-len(before), 3)
	}
	for i, r := range regs {
		clean := len(r.HealthReport.Errors) == 0 ||
			(i < len(before) && len(r.HealthReport.Errors) == 1 && strings.Contains(r.HealthReport.Errors[0], "relay session"))
		if r.ReplicaID != regs[0].ReplicaID || r.AccessURL != "https://127.0.0.1" || r.Version != "v1.2.3" || !clean {
			t.Fatalf("registrations: got %+v, want one replica with its access URL, version and a clean report", regs)
		}
	}

	// Stopped: it deregisters that replica and Run returns nil.
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run after cancel: %v", err)
	}
	done <- nil // for the cleanup
	if _, dereg := primary.state(); len(dereg) != 1 || dereg[0] != regs[0].ReplicaID {
		t.Errorf("deregistrations: got %v, want [%s]", dereg, regs[0].ReplicaID)
	}
	if _, err := client.Get(base + "/healthz"); err == nil {
		t.Errorf("GET /healthz after Run returned: want the listener closed")
	}
}

func TestProxyStopsWhenRefused(t *testing.T) {
	t.Parallel()
	ctx := coderdtest.ClockContext(t)
	clock := coderdtest.NewClock(t)
	primary := newFakePrimary(t)
	logs := &syncbuf.Buffer{}
	s, _, done, _ := startProxy(t, primary, logs, clock)
	<-s.Ready()
	primary.waitRelaySessions(t, 1, "the relay session")
	primary.mu.Lock()
	primary.refuse = "Workspace proxy eu was deleted"
	interval := primary.heartbeatInterval()
	primary.mu.Unlock()
	coderdtest.AdvanceClock(ctx, t, clock, interval) // the next heartbeat
	var err error
	select {
	case err = <-done:
		done <- err
	case <-ctx.Done():
		t.Fatal("Run did not stop within 15s of the primary refusing its heartbeat")
	}
	if err == nil || !strings.Contains(err.Error(), "Workspace proxy eu was deleted") {
		t.Errorf("Run: got %v, want the primary's refusal", err)
	}
	if !strings.Contains(logs.String(), "refused this workspace proxy's heartbeat") {
		t.Errorf("logs: want the refusal logged\n%s", logs)
	}
	if _, dereg := primary.state(); len(dereg) != 0 {
		t.Errorf("deregistrations: got %v, want none (its token is refused)", dereg)
	}
}

func TestProxyRefusedAtStart(t *testing.T) {
	t.Parallel()
	primary := newFakePrimary(t)
	primary.refuse = "Invalid workspace proxy token"
	_, _, done, _ := startProxy(t, primary, io.Discard, nil)
	select {
	case err := <-done:
		done <- err
		if err == nil || !strings.Contains(err.Error(), "Invalid workspace proxy token") {
			t.Errorf("Run: got %v, want the refusal, without retrying", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not stop within 10s of a refused registration")
	}
}

// TestHealthReport checks the proxy's own health report: the certificate
// judged at the time of the proxy's clock (a mock, years from the wall
// clock's), its names against the access URL and the wildcard.
func TestHealthReport(t *testing.T) {
	t.Parallel()
	now := time.Date(2031, 3, 1, 12, 0, 0, 0, time.UTC)
	year := 365 * 24 * time.Hour
	for _, tc := range []struct {
		name                  string
		cert                  *tls.Certificate
		access, wildcard      string
		wantError, wantWarn   string
		wantNoErrors, wantNoW bool
	}{
		{name: "good", cert: testpki.SelfSigned(t, now.Add(-time.Hour), now.Add(year), "eu.example", "*.apps.eu.example"),
			access: "https://eu.example", wildcard: "*.apps.eu.example", wantNoErrors: true, wantNoW: true},
		{name: "other host", cert: testpki.SelfSigned(t, now.Add(-time.Hour), now.Add(year), "us.example"),
			access: "https://eu.example", wantError: "does not cover the access URL's host eu.example"},
		{name: "expired", cert: testpki.SelfSigned(t, now.Add(-2*year), now.Add(-time.Hour), "eu.example"),
			access: "https://eu.example", wantError: "expired"},
		{name: "not yet valid", cert: testpki.SelfSigned(t, now.Add(time.Hour), now.Add(year), "eu.example"),
			access: "https://eu.example", wantError: "not valid before"},
		{name: "expiring", cert: testpki.SelfSigned(t, now.Add(-time.Hour), now.Add(24*time.Hour), "eu.example"),
			access: "https://eu.example", wantWarn: "expires at", wantNoErrors: true},
		{name: "wildcard not covered", cert: testpki.SelfSigned(t, now.Add(-time.Hour), now.Add(year), "eu.example"),
			access: "https://eu.example", wildcard: "*.apps.eu.example", wantWarn: "wildcard", wantNoErrors: true},
		{name: "plain http", access: "http://eu.example", wantWarn: "plain HTTP", wantNoErrors: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pu, _ := url.Parse("https://coder.example")
			au, _ := url.Parse(tc.access)
			clock := quartz.NewMock(t).WithLogger(quartz.NoOpLogger)
			clock.Set(now)
			s, err := wsproxy.New(wsproxy.Options{PrimaryAccessURL: pu, ProxySessionToken: token, AccessURL: au,
				WildcardAccessURL: tc.wildcard, TLSCertificate: tc.cert, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Clock: clock})
			if err != nil {
				t.Fatal(err)
			}
			report := healthReport(t, s)
			errs, warns := strings.Join(report.Errors, "; "), strings.Join(report.Warnings, "; ")
			switch {
			case tc.wantNoErrors && errs != "":
				t.Errorf("errors: got %q, want none", errs)
			case tc.wantNoW && warns != "":
				t.Errorf("warnings: got %q, want none", warns)
			case !strings.Contains(errs, tc.wantError):
				t.Errorf("errors: got %q, want one containing %q", errs, tc.wantError)
			case !strings.Contains(warns, tc.wantWarn):
				t.Errorf("warnings: got %q, want one containing %q", warns, tc.wantWarn)
			}
		})
	}
}

// healthReport is what s serves at /healthz-report.
func healthReport(t *testing.T, s *wsproxy.Server) codersdk.ProxyHealthReport {
	t.Helper()
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz-report", nil))
	var report codersdk.ProxyHealthReport
	if err := json.Unmarshal(rec.Body.Bytes(), &report); err != nil {
		t.Fatalf("decode /healthz-report %q: %v", rec.Body, err)
	}
	return report
}

// TestHealthReportCertificateExpiry: as the proxy's clock moves on, its
// certificate is reported clean, then expiring (a warning, 30 days before
// its end), then expired (an error).
func TestHealthReportCertificateExpiry(t *testing.T) {
	t.Parallel()
	issued := time.Date(2031, 3, 1, 12, 0, 0, 0, time.UTC)
	notAfter := issued.Add(90 * 24 * time.Hour)
	cert := testpki.SelfSigned(t, issued, notAfter, "eu.example")
	clock := quartz.NewMock(t).WithLogger(quartz.NoOpLogger)
	clock.Set(issued)
	pu, _ := url.Parse("https://coder.example")
	au, _ := url.Parse("https://eu.example")
	s, err := wsproxy.New(wsproxy.Options{PrimaryAccessURL: pu, ProxySessionToken: token, AccessURL: au,
		TLSCertificate: cert, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct {
		at                  time.Time
		wantError, wantWarn string // "": none
	}{
		{at: issued},
		{at: notAfter.Add(-30*24*time.Hour - time.Second)},
		{at: notAfter.Add(-30*24*time.Hour + time.Second), wantWarn: "expires at " + notAfter.Format(time.RFC3339)},
		{at: notAfter, wantWarn: "expires at " + notAfter.Format(time.RFC3339)}, // its last valid second
		{at: notAfter.Add(time.Second), wantError: "expired at " + notAfter.Format(time.RFC3339)},
	} {
		clock.Set(step.at).MustWait(context.Background())
		report := healthReport(t, s)
		errs, warns := strings.Join(report.Errors, "; "), strings.Join(report.Warnings, "; ")
		if (step.wantError == "") != (errs == "") || !strings.Contains(errs, step.wantError) ||
			(step.wantWarn == "") != (warns == "") || !strings.Contains(warns, step.wantWarn) {
			t.Errorf("at %s (%s before expiry): got errors %q, warnings %q; want errors %q, warnings %q",
				step.at.Format(time.RFC3339), notAfter.Sub(step.at), errs, warns, step.wantError, step.wantWarn)
		}
	}
}

func TestNewRefusesBadOptions(t *testing.T) {
	t.Parallel()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	primary, _ := url.Parse("https://coder.example")
	httpsAccess, _ := url.Parse("https://eu.example")
	for _, tc := range []struct {
		name string
		opts wsproxy.Options
		want string
	}{
		{"no primary", wsproxy.Options{ProxySessionToken: token, AccessURL: httpsAccess, Logger: log}, "primary access URL"},
		{"no token", wsproxy.Options{PrimaryAccessURL: primary, AccessURL: httpsAccess, Logger: log}, "token"},
		{"https without a certificate", wsproxy.Options{PrimaryAccessURL: primary, ProxySessionToken: token, AccessURL: httpsAccess, Logger: log}, "TLS certificate"},
	} {
		if _, err := wsproxy.New(tc.opts); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error about %s", tc.name, err, tc.want)
		}
	}
}
