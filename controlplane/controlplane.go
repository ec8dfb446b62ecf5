// Package controlplane is the composition root of a control plane: it builds
// one `coder server` (or the appliance's coderd) from its parts and runs it.
// It owns what is started, in which order, and how it stops: the database
// (the built-in PostgreSQL of package postgres, or an external URL), the
// migrations, the pubsub, the API (package coderd) with /metrics, the
// listeners (plain HTTP, HTTPS with the operator's certificate, the plain
// HTTP redirect to HTTPS), telemetry and the update check when they are on,
// and the built-in provisioner daemons (package provisionerd) with the
// terraform binary they run (package terraform).
//
// # Start-up and shutdown
//
// [Server.Run] starts the parts as a list of small steps (see run.go). Each
// step registers what it started for shutdown before the next step can
// fail, so a failing step makes Run stop everything started so far, in
// reverse order, close every listener it opened and return an error that
// names the step. A canceled context, during start-up or after, ends Run the
// same way and is not an error.
//
// # What it must not do
//
// controlplane holds no API logic and no state of its own: handlers,
// authorization and the job queue are coderd's, state is PostgreSQL's, and
// plans and applies run only inside provisionerd (controlplane only asks
// package terraform where the binary is). It reads no flags and no
// environment (the CLI and the appliance fill [Config]), and [New] starts
// nothing.
package controlplane

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/quartz"

	"airgapcoder/coderd"
	"airgapcoder/coderd/appurl"
	"airgapcoder/codersdk"
	"airgapcoder/internal/buildinfo"
	"airgapcoder/internal/egress"
	"airgapcoder/internal/logring"
	"airgapcoder/postgres"
	"airgapcoder/terraform"
)

// Config is a control plane's configuration (`coder server`'s, filled from
// flags, environment and config file by the CLI; the appliance's, from
// appliance.yaml). The zero value of each field is documented; New checks
// the combination.
type Config struct {
	// Prometheus serves /metrics on a listener of its own (as Coder's
	// --prometheus-enable); the public listeners never serve it.
	Prometheus PrometheusConfig
	// HTTPAddress is where the plain HTTP listener binds ("" disables it
	// when TLS is on). With TLS on it only redirects to the https access
	// URL (/healthz excepted).
	HTTPAddress string
	// AccessURL is how users and workspaces reach the deployment; empty
	// means derived from the listener (the TLS one when TLS is on).
	AccessURL string
	// WildcardAccessURL, e.g. "*.apps.example.internal", serves subdomain
	// apps on the hosts under it (coderd/subdomainapps.go); empty serves
	// none.
	WildcardAccessURL string
	// AdvertiseHost replaces an unspecified listen host (0.0.0.0, ::) in
	// every URL the server derives or logs (default 127.0.0.1).
	AdvertiseHost string
	// PostgresURL selects an external PostgreSQL; empty runs the built-in one.
	PostgresURL string
	// ConfigDir is the global config dir; the built-in PostgreSQL keeps its
	// data under ConfigDir/postgres. Required without PostgresURL.
	ConfigDir string
	// CacheDir holds PostgreSQL binary archives and unpacked binaries, the
	// built-in provisioners' job folders and a downloaded terraform
	// (default ConfigDir/cache).
	CacheDir string
	// BuiltinPostgres tunes the built-in PostgreSQL (paths are filled in
	// from ConfigDir and CacheDir when empty).
	BuiltinPostgres postgres.Options

	// ProvisionerDaemons is the number of built-in provisioner daemons; 0
	// runs none (and needs no terraform).
	ProvisionerDaemons int
	// ProvisionerPSK, when set, is the pre-shared key external provisioner
	// daemons authenticate with.
	ProvisionerPSK string
	// JobHeartbeatTimeout fails a running job whose daemon has been silent
	// this long (0 means coderd's default).
	JobHeartbeatTimeout time.Duration
	// Provisioner configures the built-in provisioner daemons.
	Provisioner ProvisionerConfig

	// Telemetry sends usage snapshots to TelemetryURL (required when on).
	Telemetry    bool
	TelemetryURL string
	// UpdateCheck polls UpdateCheckURL, a release feed (required when on).
	UpdateCheck    bool
	UpdateCheckURL string

	// TLS is the HTTPS listener (off in the zero value).
	TLS TLSConfig

	// AgentBinariesDir serves agent binaries of other platforms (a bundle's).
	AgentBinariesDir string
	// HealthChecks and OnFirstUser are passed to the API (see coderd.Options).
	HealthChecks map[string]func(context.Context) error
	OnFirstUser  func(ctx context.Context, username, token string)
	// RateLimits bound logins and API requests per replica (see
	// coderd.Options; the zero value means coderd's defaults).
	RateLimits coderd.RateLimits
	// AuditRetention deletes audit records older than this (0 keeps them).
	AuditRetention time.Duration
	// Lifecycle tunes the workspace lifecycle scheduler (see
	// coderd.LifecycleOptions; the zero value means coderd's defaults, a
	// one-minute tick).
	Lifecycle coderd.LifecycleOptions
	// AuditJournal is an audit journal to copy into the audit log at start
	// (the appliance's; see package auditjournal). Empty means none.
	AuditJournal string

	// Version is reported by /api/v2/buildinfo and by the daemons, and
	// compared with the other replicas' (default buildinfo.Version).
	Version string
	// Logger receives every part's logs (default slog.Default()).
	Logger *slog.Logger
	// ShutdownTimeout bounds the graceful shutdown of the HTTP servers
	// (default 30s).
	ShutdownTimeout time.Duration
	// Appliance describes the installed appliance for the API and the
	// dashboard (set by the appliance; nil for coder server).
	Appliance func(context.Context) (codersdk.Appliance, error)
	// RecentLogs holds the process's newest log lines (a ring that
	// Logger's handler writes to), which the API serves to owners for
	// support bundles; nil keeps none.
	RecentLogs *logring.Ring
	// ReplicaTrustFile is a PEM file of the CAs other replicas'
	// certificates chain to, for relaying to an agent connected to another
	// replica over HTTPS (the appliance's trust store); empty means the
	// system's roots.
	ReplicaTrustFile string
	// OIDC is OpenID Connect sign-in (off in the zero value).
	OIDC OIDCConfig
	// ExternalAuth are the external auth providers users link their Git
	// accounts to (none in the zero value; docs/external-auth.md).
	ExternalAuth ExternalAuthConfig
	// DisablePasswordAuth refuses password logins but an owner's
	// (--disable-password-auth).
	DisablePasswordAuth bool
	// ReplicaHeartbeatInterval is how often this replica says it is alive
	// in the database (default replicasync.DefaultInterval); one silent
	// for three intervals drops out of GET /api/v2/replicas.
	ReplicaHeartbeatInterval time.Duration
	// Clock drives the API's tickers and timers (coderd.Options.Clock), the
	// pubsub's reconnect backoff, the replica heartbeat, the built-in
	// provisioners (provisionerd.Options.Clock) and their restart backoff
	// (default: the real clock; tests pass a quartz.Mock).
	Clock quartz.Clock
}

// ProvisionerConfig is what built-in provisioner daemons run with.
type ProvisionerConfig struct {
	// Terraform locates the pinned terraform binary (InstallDir defaults
	// to CacheDir/terraform).
	Terraform terraform.Options
	// ProviderMirror is a folder or https URL: the only provider source.
	ProviderMirror string
	// ModuleMirror is the https URL of a module registry mirror (see
	// provisionerd.Options.ModuleMirror); empty means none.
	ModuleMirror string
	// CACertFile is handed to terraform (SSL_CERT_FILE); empty means none.
	CACertFile string
	// AgentCACertFile is carried in agent init scripts (default CACertFile).
	AgentCACertFile string
	// WorkDir holds job folders (default CacheDir/provisionerd).
	WorkDir string
	// Environment is added to terraform's (provisionerd.Options.Environment).
	Environment map[string]string
	// Egress is what terraform may reach (provisionerd.Options.Egress).
	Egress *egress.Guard
}

// PrometheusConfig is the metrics listener.
type PrometheusConfig struct {
	// Enable serves /metrics on Address.
	Enable bool
	// Address is where it binds (default 127.0.0.1:2112, loopback only, as
	// Coder's default).
	Address string
}

// DefaultPrometheusAddress is PrometheusConfig.Address's default.
const DefaultPrometheusAddress = "127.0.0.1:2112"

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

// Server is one control plane. Construct it with New; Run it once.
type Server struct {
	cfg     Config
	log     *slog.Logger
	ready   chan struct{}
	started atomic.Bool

	mu        sync.Mutex
	urls      []string
	accessURL *url.URL
	httpAddr  net.Addr
	tlsAddr   net.Addr
}

// New checks cfg and fills in defaults. It starts nothing, opens nothing
// and reads no file.
func New(cfg Config) (*Server, error) {
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
	if cfg.WildcardAccessURL != "" {
		if _, err := appurl.ParseWildcard(cfg.WildcardAccessURL); err != nil {
			return nil, fmt.Errorf("--wildcard-access-url: %w", err)
		}
	}
	if err := cfg.OIDC.check(); err != nil {
		return nil, err
	}
	if err := cfg.ExternalAuth.check(); err != nil {
		return nil, err
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
	if cfg.Version == "" {
		cfg.Version = buildinfo.Version()
	}
	if cfg.ProvisionerDaemons < 0 {
		return nil, fmt.Errorf("--provisioner-daemons must be 0 or more, got %d", cfg.ProvisionerDaemons)
	}
	if cfg.AuditRetention < 0 {
		return nil, fmt.Errorf("--audit-retention must be 0 (keep forever) or more, got %s", cfg.AuditRetention)
	}
	if cfg.CacheDir == "" {
		cfg.CacheDir = filepath.Join(cfg.ConfigDir, "cache")
	}
	if cfg.Clock == nil {
		cfg.Clock = quartz.NewReal()
	}
	return &Server{cfg: cfg, log: cfg.Logger, ready: make(chan struct{})}, nil
}

// Ready is closed once every part has started and the server answers
// requests. It is never closed when Run fails or is canceled first.
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
