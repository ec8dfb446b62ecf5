package controlplane

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"airgapcoder/coderd"
	"airgapcoder/coderd/appurl"
	"airgapcoder/coderd/database"
	"airgapcoder/coderd/replicasync"
	"airgapcoder/coderd/updatecheck"
	"airgapcoder/internal/lifecycle"
)

// startup carries what the steps have built so far to the next steps.
type startup struct {
	s    *Server
	log  *slog.Logger
	stop lifecycle.Stack
	// failed receives the error of a server that stopped serving by itself.
	failed chan error

	tlsCert       tls.Certificate
	terraformPath string
	dbURL         string
	db            *database.DB
	pubsub        *database.Pubsub
	httpLn, tlsLn net.Listener
	accessURL     *url.URL
	registry      *prometheus.Registry
	outbound      *http.Client
	checker       *updatecheck.Checker
	builtinKey    string
	replicas      *replicasync.Manager
	api           *coderd.API
	handler       http.Handler
	metricsLn     net.Listener
}

// steps is the start-up, in order: what only reads files and checks
// binaries first, then the database, the listeners, the API and its loops,
// serving, and the built-in provisioners last (they are clients of the
// API). Shutdown runs in reverse.
func (st *startup) steps() []lifecycle.Step {
	return []lifecycle.Step{
		{Name: "load TLS certificate", Run: st.loadTLSCertificate},
		{Name: "find terraform for the built-in provisioners", Run: st.findTerraform},
		{Name: "start built-in postgres", Run: st.startBuiltinPostgres},
		{Name: "open database", Run: st.openDatabase},
		{Name: "migrate database", Run: st.migrate},
		{Name: "listen for database notifications", Run: st.startPubsub},
		{Name: "open listeners", Run: st.listen},
		{Name: "resolve access URL", Run: st.resolveAccessURL},
		{Name: "register replica", Run: st.registerReplica},
		{Name: "start update check", Run: st.startUpdateCheck},
		{Name: "create API", Run: st.startAPI},
		{Name: "start telemetry", Run: st.startTelemetry},
		{Name: "serve", Run: st.serve},
		{Name: "start built-in provisioners", Run: st.startProvisioners},
	}
}

// Run raises the soft limit on open files to the hard limit and logs it
// (filelimit.go), starts the control plane, step by step (see steps), closes Ready
// once it answers requests, and serves until ctx is canceled. Then it
// shuts down: the built-in provisioners stop, long-polls answer, in-flight
// requests finish within ShutdownTimeout, background loops stop, the
// database pool closes and the built-in PostgreSQL stops. It returns nil
// after a clean shutdown, also when ctx is canceled during start-up.
//
// A step that fails stops what the steps before it started, in reverse,
// and Run returns its error wrapped in the step's name; so does a listener
// that stops serving. Run may be called once.
func (s *Server) Run(ctx context.Context) (err error) {
	if !s.started.CompareAndSwap(false, true) {
		return errors.New("controlplane: Run called twice")
	}
	raiseFileLimit(s.log)
	st := &startup{s: s, log: s.log, stop: lifecycle.Stack{Log: s.log}, failed: make(chan error, 4)}
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.ShutdownTimeout)
		defer cancel()
		err = errors.Join(err, st.stop.Stop(stopCtx))
	}()
	if err := lifecycle.Start(ctx, s.log, st.steps()); err != nil || ctx.Err() != nil {
		return err
	}
	s.log.Info("coder server is ready", "access_url", st.accessURL.String(), "urls", s.URLs(),
		"telemetry", s.cfg.Telemetry, "update_check", s.cfg.UpdateCheck)
	close(s.ready)

	select {
	case <-ctx.Done():
		s.log.Info("shutting down: waiting for in-flight requests", "timeout", s.cfg.ShutdownTimeout)
		return nil
	case err := <-st.failed:
		return err
	}
}

func (st *startup) loadTLSCertificate(context.Context) error {
	if !st.s.cfg.TLS.Enable {
		return nil
	}
	cert, err := loadCertificate(st.s.cfg.TLS.CertFile, st.s.cfg.TLS.KeyFile, time.Now())
	if err != nil {
		return err
	}
	st.tlsCert = cert
	return nil
}

// startAPI builds the API over the migrated database, with the metrics
// registry /metrics serves, and starts its background loops.
func (st *startup) startAPI(ctx context.Context) error {
	cfg := st.s.cfg
	st.registry = prometheus.NewRegistry()
	st.registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if cfg.ProvisionerDaemons > 0 {
		st.builtinKey = randomKey()
	}
	peerClient, err := peerHTTPClient(cfg.ReplicaTrustFile)
	if err != nil {
		return err
	}
	wildcard, _ := appurl.ParseWildcard(cfg.WildcardAccessURL) // checked by New; zero when empty
	oidcCfg, err := cfg.OIDC.coderd()
	if err != nil {
		return err
	}
	externalAuth, externalAuthClient, err := cfg.ExternalAuth.coderd()
	if err != nil {
		return err
	}
	api, err := coderd.New(ctx, coderd.Options{
		WildcardAccessURL: wildcard, PeerHTTPClient: peerClient, Appliance: cfg.Appliance, RecentLogs: cfg.RecentLogs,
		DB: st.db, Pubsub: st.pubsub, Logger: st.log.With("component", "api"), AccessURL: st.accessURL, Version: cfg.Version,
		ProvisionerPSK: cfg.ProvisionerPSK, BuiltinProvisionerKey: st.builtinKey, JobHeartbeatTimeout: cfg.JobHeartbeatTimeout,
		Telemetry: cfg.Telemetry, UpdateCheck: cfg.UpdateCheck, UpdateChecker: st.checker, Registerer: st.registry,
		AuditRetention: cfg.AuditRetention, AuditJournal: cfg.AuditJournal, Lifecycle: cfg.Lifecycle,
		AgentBinariesDir: cfg.AgentBinariesDir, Replicas: st.replicas, HealthChecks: cfg.HealthChecks, OnFirstUser: cfg.OnFirstUser, RateLimits: cfg.RateLimits,
		OIDC: oidcCfg, DisablePasswordAuth: cfg.DisablePasswordAuth,
		ExternalAuth: externalAuth, ExternalAuthHTTPClient: externalAuthClient, Clock: cfg.Clock,
	})
	if err != nil {
		return err
	}
	st.api = api
	st.stop.Go(ctx, "API background loops", api.Run)
	st.handler = api
	return nil
}

// peerHTTPClient is the client that dials other replicas: the system's
// roots, or the CAs in trustFile.
func peerHTTPClient(trustFile string) (*http.Client, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil // replicas reach each other directly
	if trustFile != "" {
		pem, err := os.ReadFile(trustFile)
		if err != nil {
			return nil, fmt.Errorf("replica trust file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("replica trust file %s holds no PEM certificate", trustFile)
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	return &http.Client{Transport: tr}, nil
}

// serve serves the API on the public listeners: HTTPS with the certificate
// (and Strict-Transport-Security), plain HTTP directly or, with TLS on, as
// a redirect to the https access URL.
func (st *startup) serve(context.Context) error {
	cfg := st.s.cfg
	if st.tlsLn != nil {
		handler := st.handler
		if cfg.TLS.StrictTransportSecurity > 0 {
			handler = strictTransportSecurity(cfg.TLS.StrictTransportSecurity, handler)
		}
		st.serveHTTP("HTTPS", st.tlsLn, handler, &tls.Config{Certificates: []tls.Certificate{st.tlsCert}, MinVersion: tls.VersionTLS12})
	}
	if st.httpLn != nil {
		handler := st.handler
		if st.tlsLn != nil {
			wildcard, _ := appurl.ParseWildcard(cfg.WildcardAccessURL)
			handler = redirectToHTTPS(st.accessURL, wildcard, st.handler)
		}
		st.serveHTTP("HTTP", st.httpLn, handler, nil)
	}
	if st.metricsLn != nil {
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(st.registry, promhttp.HandlerOpts{}))
		st.serveHTTP("Prometheus", st.metricsLn, mux, nil)
	}
	return nil
}
