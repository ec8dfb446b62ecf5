package coderd

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"airgapcoder/coderd/codersdk"
	"airgapcoder/coderd/database"
	"airgapcoder/coderd/telemetry"
	"airgapcoder/coderd/updatecheck"
	"airgapcoder/postgres"
	"airgapcoder/provisionerd"
	"airgapcoder/terraform"
)

// ServerConfig is `coder server`'s configuration, filled from flags,
// environment and config file by the CLI.
type ServerConfig struct {
	// HTTPAddress is where the plain HTTP listener binds ("" disables it
	// when TLS is on). With TLS on it only redirects to the https access
	// URL (/healthz excepted).
	HTTPAddress string
	// AccessURL is how users and workspaces reach the deployment; empty
	// means derived from the listener (the TLS one when TLS is on).
	AccessURL string
	// AdvertiseHost replaces an unspecified listen host (0.0.0.0, ::) in
	// every URL the server derives or logs (default 127.0.0.1).
	AdvertiseHost string
	// PostgresURL selects an external PostgreSQL; empty runs the built-in one.
	PostgresURL string
	// ConfigDir is the global config dir; the built-in PostgreSQL keeps its
	// data under ConfigDir/postgres.
	ConfigDir string
	// CacheDir holds PostgreSQL binary archives and unpacked binaries.
	CacheDir string
	// BuiltinPostgres tunes the built-in PostgreSQL (paths are filled in
	// from ConfigDir and CacheDir when empty).
	BuiltinPostgres postgres.Options

	ProvisionerDaemons  int
	ProvisionerPSK      string
	JobHeartbeatTimeout time.Duration
	// Provisioner configures the built-in provisioner daemons.
	Provisioner ProvisionerConfig

	Telemetry      bool
	TelemetryURL   string
	UpdateCheck    bool
	UpdateCheckURL string
	// BlockDirectConnections forces every workspace connection through
	// coderd's relay.
	BlockDirectConnections bool

	TLS TLSConfig

	// AgentBinariesDir serves agent binaries of other platforms (a bundle's).
	AgentBinariesDir string
	// HealthChecks and OnFirstUser are passed to the API (see Options).
	HealthChecks map[string]func(context.Context) error
	OnFirstUser  func(ctx context.Context, username, token string)
	// RateLimits bound logins and API requests per replica (see Options).
	RateLimits RateLimits
	// AuditRetention deletes audit records older than this (0 keeps them).
	AuditRetention time.Duration
	// AuditJournal is an audit journal to copy into the audit log at start
	// (the appliance's; see package auditjournal).
	AuditJournal string

	Version string
	Logger  *slog.Logger
	// ShutdownTimeout bounds the graceful shutdown (default 30s).
	ShutdownTimeout time.Duration
}

// ProvisionerConfig is what built-in provisioner daemons run with.
type ProvisionerConfig struct {
	// Terraform locates the pinned terraform binary.
	Terraform terraform.Options
	// ProviderMirror is a folder or https URL: the only provider source.
	ProviderMirror string
	// CACertFile is handed to terraform (SSL_CERT_FILE).
	CACertFile string
	// AgentCACertFile is carried in agent init scripts (default CACertFile).
	AgentCACertFile string
	// WorkDir holds job folders (default: under the cache dir).
	WorkDir string
}

// TLSConfig is the HTTPS listener.
type TLSConfig struct {
	// Enable serves HTTPS on Address.
	Enable  bool
	Address string
	// CertFile is the PEM certificate (leaf first, then intermediates);
	// KeyFile its PEM private key. Both are read once at start.
	CertFile string
	KeyFile  string
	// StrictTransportSecurity is the max-age (seconds) of the
	// Strict-Transport-Security header on HTTPS responses; 0 sends none.
	StrictTransportSecurity int
}

// Server runs the control plane: PostgreSQL (built in or external), the
// migrations, the API with health and metrics, and the background loops.
type Server struct {
	cfg   ServerConfig
	log   *slog.Logger
	ready chan struct{}

	mu        sync.Mutex
	urls      []string
	accessURL *url.URL
	httpAddr  net.Addr
	tlsAddr   net.Addr
}

// NewServer validates cfg. It starts nothing.
func NewServer(cfg ServerConfig) (*Server, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.HTTPAddress == "" && !cfg.TLS.Enable {
		return nil, errors.New("nothing to listen on: set --http-address or --tls-enable")
	}
	if cfg.TLS.Enable && (cfg.TLS.CertFile == "" || cfg.TLS.KeyFile == "" || cfg.TLS.Address == "") {
		return nil, errors.New("--tls-enable needs --tls-address, --tls-cert-file and --tls-key-file")
	}
	if cfg.AccessURL != "" {
		u, err := url.Parse(cfg.AccessURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("--access-url %q must be an absolute http(s) URL", cfg.AccessURL)
		}
		if cfg.TLS.Enable && cfg.HTTPAddress != "" && u.Scheme != "https" {
			return nil, fmt.Errorf("--access-url %q is http, but with --tls-enable plain HTTP only redirects to the access URL: use an https access URL, or set --http-address \"\" to serve HTTPS only", cfg.AccessURL)
		}
	}
	if cfg.AdvertiseHost == "" {
		cfg.AdvertiseHost = "127.0.0.1"
	}
	if cfg.Telemetry && cfg.TelemetryURL == "" {
		return nil, errors.New("--telemetry is on but --telemetry-url is empty: this product sends telemetry only to a collector you run; set --telemetry-url or turn --telemetry off")
	}
	if cfg.UpdateCheck && cfg.UpdateCheckURL == "" {
		return nil, errors.New("--update-check is on but --update-check-url is empty: set it to the URL of a release feed on your network, or turn --update-check off")
	}
	if cfg.PostgresURL == "" && cfg.ConfigDir == "" {
		return nil, errors.New("the built-in PostgreSQL needs a global config dir for its data")
	}
	if cfg.ShutdownTimeout <= 0 {
		cfg.ShutdownTimeout = 30 * time.Second
	}
	if cfg.ProvisionerDaemons < 0 {
		return nil, fmt.Errorf("--provisioner-daemons must be 0 or more, got %d", cfg.ProvisionerDaemons)
	}
	if cfg.AuditRetention < 0 {
		return nil, fmt.Errorf("--audit-retention must be 0 (keep forever) or more, got %s", cfg.AuditRetention)
	}
	return &Server{cfg: cfg, log: cfg.Logger, ready: make(chan struct{})}, nil
}

// Ready is closed once the server answers requests.
func (s *Server) Ready() <-chan struct{} { return s.ready }

// URLs returns the listeners' base URLs (valid after Ready).
func (s *Server) URLs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.urls...)
}

// ListenAddrs returns the addresses the plain HTTP and the HTTPS listeners
// bound (nil for one that is off; valid after Ready).
func (s *Server) ListenAddrs() (httpAddr, tlsAddr net.Addr) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.httpAddr, s.tlsAddr
}

// AccessURL returns the deployment's access URL (valid after Ready).
func (s *Server) AccessURL() *url.URL {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.accessURL
}

// Run serves until ctx is canceled, then shuts down gracefully: in-flight
// requests finish, background loops stop, the database pool closes and the
// built-in PostgreSQL stops. It returns nil after a clean shutdown.
func (s *Server) Run(ctx context.Context) (err error) {
	log := s.log
	// A bad certificate or key is a start-up error naming the file, found
	// before anything else starts.
	var tlsCert tls.Certificate
	if s.cfg.TLS.Enable {
		if tlsCert, err = loadCertificate(s.cfg.TLS.CertFile, s.cfg.TLS.KeyFile, time.Now()); err != nil {
			return err
		}
	}
	// Fail before anything starts when the built-in provisioners cannot
	// work: a missing or wrong terraform is a start-up error, not a build one.
	var terraformPath string
	if s.cfg.ProvisionerDaemons > 0 {
		tfOpts := s.cfg.Provisioner.Terraform
		if tfOpts.InstallDir == "" {
			tfOpts.InstallDir = filepath.Join(s.cacheDir(), "terraform")
		}
		if terraformPath, err = terraform.Find(ctx, tfOpts); err != nil {
			return fmt.Errorf("built-in provisioners: %w (or run with --provisioner-daemons=0)", err)
		}
	}
	dbURL := s.cfg.PostgresURL
	if dbURL == "" {
		pg, err := s.startBuiltinPostgres(ctx)
		if err != nil {
			return err
		}
		defer func() {
			stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			if stopErr := pg.Stop(stopCtx); stopErr != nil {
				log.Error("stop built-in postgres", "err", stopErr)
				err = errors.Join(err, stopErr)
			} else {
				log.Info("built-in postgres stopped")
			}
		}()
		dbURL = pg.URL()
	}
	db, err := database.Open(ctx, dbURL)
	if err != nil {
		return err
	}
	defer db.Close()
	if err := db.Migrate(ctx, log); err != nil {
		return err
	}

	bg, stopBackground := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	defer func() {
		stopBackground()
		wg.Wait()
	}()
	goRun := func(name string, run func(context.Context) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := run(bg); err != nil {
				log.Error("background task stopped", "task", name, "err", err)
			}
		}()
	}

	ps := database.NewPubsub(dbURL, log.With("component", "pubsub"), database.ChannelJobPosted, database.ChannelJobUpdated)
	goRun("pubsub", ps.Run)
	select {
	case <-ps.Ready():
	case <-ctx.Done():
		return nil
	case <-time.After(30 * time.Second):
		return errors.New("listen for database notifications: timed out")
	}

	httpLn, tlsLn, err := s.listen()
	if err != nil {
		return err
	}
	// Whatever fails from here on, the listeners close and every server
	// started stops, so Run returns (and `coder server` exits) instead of
	// waiting for servers nobody will shut down. After a clean shutdown
	// this closes what is already closed.
	var servers []*http.Server
	defer func() {
		for _, srv := range servers {
			_ = srv.Close()
		}
		for _, ln := range []net.Listener{httpLn, tlsLn} {
			if ln != nil {
				_ = ln.Close()
			}
		}
	}()
	accessURL, err := s.resolveAccessURL(httpLn, tlsLn)
	if err != nil {
		return err
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	var outbound *http.Client // exists only when something is allowed to go out
	if s.cfg.Telemetry || s.cfg.UpdateCheck {
		outbound = &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone(), Timeout: 30 * time.Second}
	}
	var checker *updatecheck.Checker
	if s.cfg.UpdateCheck {
		u, _ := url.Parse(s.cfg.UpdateCheckURL)
		checker, err = updatecheck.New(updatecheck.Options{URL: u, Client: outbound, CurrentVersion: s.cfg.Version, Logger: log.With("component", "updatecheck")})
		if err != nil {
			return fmt.Errorf("update check: %w", err)
		}
		goRun("updatecheck", checker.Run)
	}

	builtinKey := randomString(32)
	api, err := New(ctx, Options{
		DB: db, Pubsub: ps, Logger: log.With("component", "api"), AccessURL: accessURL, Version: s.cfg.Version,
		ProvisionerPSK: s.cfg.ProvisionerPSK, BuiltinProvisionerKey: builtinKey, JobHeartbeatTimeout: s.cfg.JobHeartbeatTimeout,
		Telemetry: s.cfg.Telemetry, UpdateCheck: s.cfg.UpdateCheck, UpdateChecker: checker, Registerer: reg,
		AuditRetention: s.cfg.AuditRetention, AuditJournal: s.cfg.AuditJournal,
		AgentBinariesDir: s.cfg.AgentBinariesDir, HealthChecks: s.cfg.HealthChecks, OnFirstUser: s.cfg.OnFirstUser, RateLimits: s.cfg.RateLimits,
	})
	if err != nil {
		return err
	}
	goRun("job reaper", api.Run)

	if s.cfg.Telemetry {
		deploymentID, err := db.DeploymentValue(ctx, "deployment_id", uuid.NewString())
		if err != nil {
			return err
		}
		u, _ := url.Parse(s.cfg.TelemetryURL)
		rep, err := telemetry.New(telemetry.Options{
			URL: u, Client: outbound, DeploymentID: deploymentID, Version: s.cfg.Version, Logger: log.With("component", "telemetry"),
			Collect: func(ctx context.Context) (telemetry.Snapshot, error) {
				var snap telemetry.Snapshot
				var err error
				if snap.Users, err = db.CountUsers(ctx); err != nil {
					return snap, err
				}
				if snap.Templates, err = db.CountTemplates(ctx); err != nil {
					return snap, err
				}
				snap.Workspaces, err = db.CountWorkspaces(ctx)
				return snap, err
			},
		})
		if err != nil {
			return fmt.Errorf("telemetry: %w", err)
		}
		goRun("telemetry", rep.Run)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.Handle("/", api)
	serve := func(ln net.Listener, handler http.Handler, tlsCfg *tls.Config) {
		srv := &http.Server{
			Handler: handler, TLSConfig: tlsCfg,
			ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 120 * time.Second,
			// No WriteTimeout: log streams and long-polls stay open by design.
			ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		}
		servers = append(servers, srv)
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			if tlsCfg != nil {
				err = srv.ServeTLS(ln, "", "")
			} else {
				err = srv.Serve(ln)
			}
			if err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("http server stopped", "addr", ln.Addr().String(), "err", err)
			}
		}()
	}
	if tlsLn != nil {
		var handler http.Handler = mux
		if s.cfg.TLS.StrictTransportSecurity > 0 {
			handler = strictTransportSecurity(s.cfg.TLS.StrictTransportSecurity, mux)
		}
		serve(tlsLn, handler, &tls.Config{Certificates: []tls.Certificate{tlsCert}, MinVersion: tls.VersionTLS12})
	}
	if httpLn != nil {
		var handler http.Handler = mux
		if tlsLn != nil {
			handler = redirectToHTTPS(accessURL, mux)
		}
		serve(httpLn, handler, nil)
	}
	// Built-in daemons stop first on shutdown, while the API can still hear
	// them report the job they were running.
	daemonsCtx, stopDaemons := context.WithCancel(bg)
	defer stopDaemons()
	var daemons sync.WaitGroup
	if s.cfg.ProvisionerDaemons > 0 {
		// Built-in daemons speak the same protocol as external ones, over a
		// private loopback listener, authenticated by a key that lives only
		// in this process.
		internalLn, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return fmt.Errorf("listen for built-in provisioners: %w", err)
		}
		serve(internalLn, mux, nil)
		internalURL := &url.URL{Scheme: "http", Host: internalLn.Addr().String()}
		workDir := s.cfg.Provisioner.WorkDir
		if workDir == "" {
			workDir = filepath.Join(s.cacheDir(), "provisionerd")
		}
		for i := range s.cfg.ProvisionerDaemons {
			client := codersdk.New(internalURL)
			client.ProvisionerPSK = builtinKey
			d, err := provisionerd.New(provisionerd.Options{
				Client: client, Name: fmt.Sprintf("built-in-%d", i+1), Version: s.cfg.Version,
				TerraformPath: terraformPath, ProviderMirror: s.cfg.Provisioner.ProviderMirror, CACertFile: s.cfg.Provisioner.CACertFile,
				AgentCACertFile: s.cfg.Provisioner.AgentCACertFile,
				WorkDir:         workDir, AccessURL: accessURL.String(), Logger: log.With("component", "provisionerd"),
			})
			if err != nil {
				return err
			}
			daemons.Add(1)
			go func() {
				defer daemons.Done()
				_ = d.Run(daemonsCtx)
			}()
		}
		log.Info("built-in provisioners started", "count", s.cfg.ProvisionerDaemons, "terraform", terraformPath, "mirror", s.cfg.Provisioner.ProviderMirror)
	}

	log.Info("coder server is ready", "access_url", accessURL.String(), "urls", s.URLs(),
		"telemetry", s.cfg.Telemetry, "update_check", s.cfg.UpdateCheck, "block_direct_connections", s.cfg.BlockDirectConnections)
	close(s.ready)

	<-ctx.Done()
	log.Info("shutting down: waiting for in-flight requests", "timeout", s.cfg.ShutdownTimeout)
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.ShutdownTimeout)
	defer cancel()
	stopDaemons()
	daemons.Wait()
	// Answer waiting job requests now rather than at their long-poll deadline.
	api.Shutdown()
	for _, srv := range servers {
		if err := srv.Shutdown(shutdownCtx); err != nil {
			log.Warn("graceful shutdown timed out; closing connections", "err", err)
			_ = srv.Close()
		}
	}
	return nil
}

func (s *Server) cacheDir() string {
	if s.cfg.CacheDir != "" {
		return s.cfg.CacheDir
	}
	return filepath.Join(s.cfg.ConfigDir, "cache")
}

func (s *Server) startBuiltinPostgres(ctx context.Context) (*postgres.Server, error) {
	opts := s.cfg.BuiltinPostgres
	base := filepath.Join(s.cfg.ConfigDir, "postgres")
	if opts.DataDir == "" {
		opts.DataDir = filepath.Join(base, "data")
	}
	if opts.RuntimeDir == "" {
		opts.RuntimeDir = filepath.Join(base, "run")
	}
	cache := s.cacheDir()
	if opts.CacheDir == "" {
		opts.CacheDir = filepath.Join(cache, "postgres")
	}
	if opts.BinariesDir == "" {
		opts.BinariesDir = filepath.Join(cache, "postgres", "bin")
	}
	if opts.Logger == nil {
		opts.Logger = s.log.With("component", "postgres")
	}
	pg, err := postgres.New(opts)
	if err != nil {
		return nil, fmt.Errorf("built-in postgres: %w", err)
	}
	s.log.Info("starting built-in postgres", "data", opts.DataDir)
	if err := pg.Start(ctx); err != nil {
		return nil, fmt.Errorf("start built-in postgres (data in %s): %w", opts.DataDir, err)
	}
	return pg, nil
}

func (s *Server) listen() (httpLn, tlsLn net.Listener, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cfg.HTTPAddress != "" {
		if httpLn, err = net.Listen("tcp", s.cfg.HTTPAddress); err != nil {
			return nil, nil, fmt.Errorf("listen on --http-address %s: %w", s.cfg.HTTPAddress, err)
		}
		s.httpAddr = httpLn.Addr()
		s.urls = append(s.urls, "http://"+advertisedAddr(httpLn.Addr(), s.cfg.AdvertiseHost))
	}
	if s.cfg.TLS.Enable {
		if tlsLn, err = net.Listen("tcp", s.cfg.TLS.Address); err != nil {
			if httpLn != nil {
				httpLn.Close()
			}
			return nil, nil, fmt.Errorf("listen on --tls-address %s: %w", s.cfg.TLS.Address, err)
		}
		s.tlsAddr = tlsLn.Addr()
		s.urls = append(s.urls, "https://"+advertisedAddr(tlsLn.Addr(), s.cfg.AdvertiseHost))
	}
	return httpLn, tlsLn, nil
}

func (s *Server) resolveAccessURL(httpLn, tlsLn net.Listener) (*url.URL, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	raw := s.cfg.AccessURL
	if raw == "" {
		ln, scheme := httpLn, "http://"
		if tlsLn != nil {
			ln, scheme = tlsLn, "https://"
		}
		raw = scheme + advertisedAddr(ln.Addr(), s.cfg.AdvertiseHost)
		if host, _, _ := net.SplitHostPort(ln.Addr().String()); net.ParseIP(host).IsUnspecified() {
			s.log.Warn("listening on every interface without --access-url: workspaces and redirects use "+raw+"; set --access-url to the name users reach this server by",
				"listen", ln.Addr().String())
		}
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, err
	}
	s.accessURL = u
	return u, nil
}
