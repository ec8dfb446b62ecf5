// Package wsproxy is a workspace proxy: a server that serves one region of
// a deployment, near that region's workspaces and users, while the
// deployment's control plane (coderd, "the primary") stays where it is.
//
// A proxy knows the primary only through its API, as a client (codersdk):
// it registers with the token an owner created for it (`coder wsproxy
// create`), registers again every heartbeat interval the primary names,
// sending its own health report, and deregisters when it shuts down. It
// never opens a PostgreSQL connection and does not link coderd or pgx
// (deps_test.go checks): a proxy may run in a network that cannot reach the
// database at all, and a compromised proxy holds nothing but its own token.
//
// What it serves (routes.go):
//
//   - /healthz (200 once registered and while its relay session to the
//     primary is up, else 503, so that clients use the primary),
//     /healthz-report and /api/v2/buildinfo;
//   - the relay (relay.go): it keeps one relay session to the primary
//     (session.go), a yamux session over a raw upgrade authenticated with
//     its token, re-dialed with backoff when it drops; agents of the region
//     connect to the proxy (agents.go) and are registered with the primary
//     over it; users of the region connect to agents through the proxy
//     (connect.go), authorized by the primary (cached for the primary's
//     bound) and recorded there when they end; the primary reaches the
//     agents connected here for everyone else;
//   - the agent API calls and the agent binary download of agents connected
//     here, forwarded to the primary unchanged (forward.go);
//   - dev URLs (apps.go).
//
// Every other /api/v2 path is a 404 naming the primary, and the dashboard's
// paths are redirected to the primary. A proxy holds no state that outlives
// it: agents and users reconnect when it restarts. docs/wsproxy.md has the
// status rules, the protocol and the failure bounds.
package wsproxy

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/coder/quartz"
	"github.com/hashicorp/yamux"

	"airgapcoder/codersdk"
	"airgapcoder/internal/clockwait"
)

// Options configure a proxy. PrimaryAccessURL, ProxySessionToken,
// AccessURL and Logger are required.
type Options struct {
	// PrimaryAccessURL is the deployment's access URL (coderd's).
	PrimaryAccessURL *url.URL
	// ProxySessionToken is the proxy's token, "<id>:<secret>", as `coder
	// wsproxy create` printed it.
	ProxySessionToken string
	// AccessURL is where users reach this proxy; it is what the proxy
	// registers, and the certificate must cover its host.
	AccessURL *url.URL
	// WildcardAccessURL is the host pattern of the region's subdomain apps
	// (e.g. "*.eu.example.internal"); "" serves none.
	WildcardAccessURL string
	// HTTPAddress is the address to listen on; "" means 127.0.0.1:3001.
	HTTPAddress string
	// TLSCertificate, when set, makes the listener serve HTTPS with it (the
	// site's certificate, or the one the appliance CA issued). nil serves
	// plain HTTP, which New allows only for an http access URL.
	TLSCertificate *tls.Certificate
	// HTTPClient reaches the primary; its TLS configuration is what the
	// proxy trusts (the trust store). nil means http.DefaultClient.
	HTTPClient *http.Client
	// Version is reported to the primary and at /api/v2/buildinfo.
	Version string
	// Hostname is reported to the primary; "" means os.Hostname.
	Hostname string
	// Logger receives the proxy's logs.
	Logger *slog.Logger
	// Clock drives the proxy's waits and the times it reads: the backoff
	// between registrations at start ("registerBackoff"), between dials of
	// the relay session ("relayBackoff"), between registrations of an
	// agent again after the relay session dropped ("agentBackoff") and
	// between tries of a connection's record ("reportBackoff"); the
	// heartbeat ticker ("heartbeat"); the expiry of the certificate in the
	// health report, of the primary's cached answers and of app cookies;
	// and the times of connection records and logged durations. Timers and
	// tickers are tagged "wsproxy" and the name in parentheses; tests pass
	// a quartz.Mock to step time. Default: the real clock.
	//
	// What bounds I/O with a peer stays on the operating system's time: a
	// mock clock cannot move a socket's deadline, and a proxy must stop
	// within its bounds even when a test's clock stands still. Those are
	// the sockets' deadlines (an agent's or the primary's answer to a
	// stream, a prepared connection's idle wait), the HTTP server's
	// timeouts, yamux's keepalive, the timeout of each call to the primary
	// and ShutdownTimeout.
	Clock quartz.Clock
	// RegisterRetry is the first wait between failed registrations at start,
	// doubling (with jitter) up to 30 s; 0 means 500 ms. Registration is
	// retried until it succeeds, the primary refuses the token, or ctx ends.
	RegisterRetry time.Duration
	// ShutdownTimeout bounds the graceful HTTP shutdown and the
	// deregistration when Run's context ends, and then again the delivery
	// of the last connection records; 0 means 10 s.
	ShutdownTimeout time.Duration
	// KeepAliveInterval is the yamux ping interval of the relay session to
	// the primary and of the agents' connections; a dead connection is
	// noticed within about twice this. 0 means 15 s, coderd's default.
	KeepAliveInterval time.Duration
}

// DefaultHTTPAddress is where a proxy listens when Options.HTTPAddress is
// empty.
const DefaultHTTPAddress = "127.0.0.1:3001"

// attemptTimeout bounds each call to the primary.
const attemptTimeout = 10 * time.Second

// Server is a workspace proxy. Construct with New; Run serves it, once.
type Server struct {
	opts      Options
	log       *slog.Logger
	clock     quartz.Clock
	client    *codersdk.ProxyClient
	replicaID string
	handler   http.Handler
	ready     chan struct{}

	// fatal carries the relay session's refusal (session.go) to Run.
	fatal chan error
	// closing is closed when the proxy stops: relayed connections end.
	closing chan struct{}
	// handlers counts relay handlers and streams (their connections are
	// hijacked: the HTTP server's shutdown does not wait for them).
	handlers sync.WaitGroup
	// reports counts connection records on their way (connect.go);
	// reportCtx ends their retries after the shutdown bound.
	reports       sync.WaitGroup
	reportCtx     context.Context
	cancelReports context.CancelFunc

	agents agentRegistry // agents connected here (agents.go)

	authCache answerCache[authKey, codersdk.ProxyAuthorizeConnectResponse] // (connect.go)

	mu   sync.Mutex
	addr net.Addr
	reg  codersdk.RegisterWorkspaceProxyResponse
	mux  *yamux.Session // the relay session, nil while it is down
	// muxChanged is closed (and replaced) whenever mux changes.
	muxChanged chan struct{}
	stopping   bool
	active     map[string]int // user connections open, by agent id
}

// New checks the options and builds the proxy's handler. It starts
// nothing.
func New(opts Options) (*Server, error) {
	switch {
	case opts.Logger == nil:
		return nil, errors.New("wsproxy: Options.Logger is required")
	case opts.PrimaryAccessURL == nil || opts.PrimaryAccessURL.Host == "" ||
		(opts.PrimaryAccessURL.Scheme != "http" && opts.PrimaryAccessURL.Scheme != "https"):
		return nil, errors.New("wsproxy: the primary access URL must be an http or https URL, e.g. https://coder.example.internal")
	case opts.ProxySessionToken == "":
		return nil, errors.New("wsproxy: the proxy session token is required: coder wsproxy create prints it")
	case opts.AccessURL == nil || opts.AccessURL.Host == "" || (opts.AccessURL.Scheme != "http" && opts.AccessURL.Scheme != "https"):
		return nil, errors.New("wsproxy: the access URL must be an http or https URL, e.g. https://eu.coder.example.internal")
	case opts.AccessURL.Scheme == "https" && opts.TLSCertificate == nil:
		return nil, fmt.Errorf("wsproxy: the access URL %s is https: give the proxy a TLS certificate and key", opts.AccessURL)
	}
	if opts.HTTPAddress == "" {
		opts.HTTPAddress = DefaultHTTPAddress
	}
	if opts.HTTPClient == nil {
		opts.HTTPClient = http.DefaultClient
	}
	if opts.Hostname == "" {
		opts.Hostname, _ = os.Hostname()
	}
	if opts.Clock == nil {
		opts.Clock = quartz.NewReal()
	}
	if opts.RegisterRetry <= 0 {
		opts.RegisterRetry = 500 * time.Millisecond
	}
	if opts.ShutdownTimeout <= 0 {
		opts.ShutdownTimeout = 10 * time.Second
	}
	if opts.KeepAliveInterval <= 0 {
		opts.KeepAliveInterval = 15 * time.Second
	}
	primary := codersdk.New(opts.PrimaryAccessURL)
	primary.HTTPClient = opts.HTTPClient
	s := &Server{
		opts: opts, log: opts.Logger, clock: opts.Clock, ready: make(chan struct{}), replicaID: rand.Text(),
		client: &codersdk.ProxyClient{Client: primary, Token: opts.ProxySessionToken},
		fatal:  make(chan error, 1), closing: make(chan struct{}),
		muxChanged: make(chan struct{}),
	}
	s.reportCtx, s.cancelReports = context.WithCancel(context.Background())
	s.handler = s.routes()
	return s, nil
}

// Handler serves the proxy's routes (Run serves it on its listener).
func (s *Server) Handler() http.Handler { return s.handler }

// Ready is closed once the proxy listens and the primary has accepted its
// registration.
func (s *Server) Ready() <-chan struct{} { return s.ready }

// Addr is the listener's address once Run listens (nil before).
func (s *Server) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addr
}

// registration is the primary's answer to the last registration, and
// whether there was one.
func (s *Server) registration() (codersdk.RegisterWorkspaceProxyResponse, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reg, s.reg.ProxyID != ""
}

// Run listens, registers with the primary (retrying with backoff), serves,
// and heartbeats until ctx ends; then it deregisters, shuts the server
// down gracefully and returns nil. It returns an error when it cannot listen,
// when the primary refuses the proxy's token (deleted, wrong), or when the
// listener fails.
func (s *Server) Run(ctx context.Context) error {
	ln, err := net.Listen("tcp", s.opts.HTTPAddress)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", s.opts.HTTPAddress, err)
	}
	s.mu.Lock()
	s.addr = ln.Addr()
	s.mu.Unlock()
	if s.opts.TLSCertificate != nil {
		ln = tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{*s.opts.TLSCertificate}, MinVersion: tls.VersionTLS12})
	}
	// Requests' contexts end when the proxy has stopped: a relay handler
	// still waiting for the primary or an agent gives up then.
	baseCtx, cancelRequests := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelRequests()
	srv := &http.Server{
		Handler:           s.handler,
		BaseContext:       func(net.Listener) context.Context { return baseCtx },
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		// No overall read or write timeout: relay connections are
		// long-lived.
		ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
	var serveErr error
	served := make(chan struct{})
	go func() {
		defer close(served)
		serveErr = srv.Serve(ln)
	}()
	relayCtx, stopRelay := context.WithCancel(ctx)
	var relay sync.WaitGroup
	err = s.registerAndHeartbeat(ctx, served, func() {
		relay.Go(func() {
			if err := s.runRelaySession(relayCtx); err != nil {
				s.fatal <- err
			}
		})
	})
	// Leave the region list first, then end the relay and let in-flight
	// requests finish.
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.opts.ShutdownTimeout)
	defer cancel()
	defer s.cancelReports()
	var refused *refusedError
	if _, registered := s.registration(); registered && !errors.As(err, &refused) {
		if derr := s.client.DeregisterWorkspaceProxy(shutdownCtx, codersdk.DeregisterWorkspaceProxyRequest{ReplicaID: s.replicaID}); derr != nil {
			s.log.Warn("deregister from the primary (it will count this proxy unreachable after the heartbeat bound)", "err", derr)
		} else {
			s.log.Info("deregistered from the primary")
		}
	}
	stopRelay()
	relay.Wait()
	s.mu.Lock()
	s.stopping = true
	s.mu.Unlock()
	close(s.closing)
	if shutdownErr := srv.Shutdown(shutdownCtx); shutdownErr != nil {
		_ = srv.Close()
	}
	<-served
	cancelRequests()
	s.handlers.Wait() // closing and cancelRequests ended them
	// The last connections' records: within another ShutdownTimeout, on
	// real time as every I/O bound is (Options.Clock).
	reported := make(chan struct{})
	go func() { s.reports.Wait(); close(reported) }()
	select {
	case <-reported:
	case <-time.After(s.opts.ShutdownTimeout):
		s.cancelReports()
		<-reported
	}
	if errors.Is(err, errServeStopped) {
		err = fmt.Errorf("serve on %s: %w", s.Addr(), serveErr)
	}
	return err
}

// errServeStopped is the listener failing while the proxy runs.
var errServeStopped = errors.New("wsproxy: the HTTP server stopped")

// refusedError is the primary refusing the proxy (its token, mostly):
// retrying cannot help.
type refusedError struct{ err error }

func (e *refusedError) Error() string {
	return "the primary refused this workspace proxy: " + e.err.Error()
}
func (e *refusedError) Unwrap() error { return e.err }

// classify marks an answer of the primary that retrying cannot change (a
// 4xx other than 408 and 429) as a refusal.
func classify(err error) error {
	var apiErr *codersdk.Error
	if errors.As(err, &apiErr) && apiErr.StatusCode >= 400 && apiErr.StatusCode < 500 &&
		apiErr.StatusCode != http.StatusRequestTimeout && apiErr.StatusCode != http.StatusTooManyRequests {
		return &refusedError{err: err}
	}
	return err
}

// untrustedCertificate reports whether err is the primary's certificate
// failing verification: a configuration mistake that retrying at start
// cannot mend.
func untrustedCertificate(err error) bool {
	var unknown x509.UnknownAuthorityError
	var host x509.HostnameError
	var invalid x509.CertificateInvalidError
	return errors.As(err, &unknown) || errors.As(err, &host) || errors.As(err, &invalid)
}

// register sends one registration (or heartbeat) with the current health
// report.
func (s *Server) register(ctx context.Context) (codersdk.RegisterWorkspaceProxyResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, attemptTimeout)
	defer cancel()
	res, err := s.client.RegisterWorkspaceProxy(ctx, codersdk.RegisterWorkspaceProxyRequest{
		AccessURL: s.opts.AccessURL.String(), WildcardHostname: s.opts.WildcardAccessURL, Version: s.opts.Version,
		ReplicaID: s.replicaID, ReplicaHostname: s.opts.Hostname, HealthReport: s.healthReport(),
		ActiveAgentIDs: s.activeAgentIDs(),
	})
	if err != nil {
		return res, classify(err)
	}
	if res.ProxyID == "" || res.HeartbeatInterval() <= 0 {
		return res, &refusedError{err: fmt.Errorf("the primary's registration answer has no proxy id or heartbeat interval: %+v", res)}
	}
	s.mu.Lock()
	s.reg = res
	s.mu.Unlock()
	return res, nil
}

// newBackoff is the wait between failed attempts to reach the primary:
// doubling from Options.RegisterRetry up to 30 s, each wait ±50% so that
// the replicas that lost the same primary do not come back at once.
func (s *Server) newBackoff() *backoff.ExponentialBackOff {
	b := &backoff.ExponentialBackOff{
		InitialInterval: s.opts.RegisterRetry, RandomizationFactor: 0.5, Multiplier: 2, MaxInterval: 30 * time.Second,
	}
	b.Reset()
	return b
}

// sleep waits d on the proxy's clock (a timer tagged "wsproxy" and what);
// it reports whether d passed before ctx ended. Every backoff of the proxy
// waits here.
func (s *Server) sleep(ctx context.Context, d time.Duration, what string) bool {
	return clockwait.Sleep(ctx, s.clock, d, nil, "wsproxy", what)
}

// registerUntilAccepted registers, waiting the backoff between attempts,
// until the primary accepts the proxy (its answer), refuses it or its
// certificate fails verification (an error), or ctx ends (ctx's error).
func (s *Server) registerUntilAccepted(ctx context.Context) (codersdk.RegisterWorkspaceProxyResponse, error) {
	return clockwait.Retry(ctx, s.clock, s.newBackoff(), func() (codersdk.RegisterWorkspaceProxyResponse, error) {
		res, err := s.register(ctx)
		var refused *refusedError
		if errors.As(err, &refused) {
			return res, backoff.Permanent(err)
		}
		if untrustedCertificate(err) {
			return res, backoff.Permanent(fmt.Errorf("%w; the proxy does not trust the primary's certificate: add the CA that issued it to what the proxy trusts (coder wsproxy server --ca-file)", err))
		}
		return res, err
	}, func(err error, next time.Duration) {
		s.log.Warn("register with the primary failed; retrying", "primary", s.opts.PrimaryAccessURL.String(), "retry_in", next.Round(time.Millisecond), "err", err)
	}, "wsproxy", "registerBackoff")
}

// registerAndHeartbeat registers (retrying until the primary answers),
// calls registered, then registers again every interval until ctx ends
// (nil), the primary refuses the proxy (a heartbeat, or the relay session
// on s.fatal), or the listener fails (served is closed: errServeStopped).
func (s *Server) registerAndHeartbeat(ctx context.Context, served <-chan struct{}, registered func()) error {
	res, err := s.registerUntilAccepted(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		s.log.Error("the primary refused this workspace proxy; stopping", "err", err)
		return fmt.Errorf("register with %s: %w", s.opts.PrimaryAccessURL, err)
	}
	interval := res.HeartbeatInterval()
	s.log.Info("workspace proxy registered with the primary", "proxy", res.ProxyName, "primary", s.opts.PrimaryAccessURL.String(),
		"access_url", s.opts.AccessURL.String(), "listen", s.Addr().String(), "heartbeat_interval", interval)
	registered()
	close(s.ready)
	t := s.clock.NewTicker(interval, "wsproxy", "heartbeat")
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-served:
			return errServeStopped
		case err := <-s.fatal:
			return err
		case <-t.C:
		}
		res, err := s.register(ctx)
		var refused *refusedError
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.As(err, &refused):
			s.log.Error("the primary refused this workspace proxy's heartbeat; stopping", "err", err)
			return fmt.Errorf("heartbeat: %w", err)
		case err != nil:
			s.log.Warn("heartbeat to the primary failed; trying again at the next interval", "interval", interval, "err", err)
			continue
		}
		s.log.Debug("heartbeat accepted by the primary", "proxy", res.ProxyName)
		if next := res.HeartbeatInterval(); next != interval {
			interval = next
			t.Reset(interval, "wsproxy", "heartbeat")
		}
	}
}
