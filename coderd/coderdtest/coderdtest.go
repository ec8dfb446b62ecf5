// Package coderdtest starts real control planes for tests: a coderd API on a
// loopback listener over a real PostgreSQL, one fresh database per test.
//
// The PostgreSQL cluster is shared by a test binary: CODER_TEST_POSTGRES_URL
// names an external server (make test starts Debian's on loopback), else the
// built-in PostgreSQL is started once under the temp dir. Packages that use
// coderdtest call RunMain from TestMain so the built-in server's helper
// process works and the cluster is stopped at the end.
package coderdtest

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/coder/quartz"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"airgapcoder/coderd"
	"airgapcoder/coderd/appurl"
	"airgapcoder/coderd/database"
	"airgapcoder/coderd/externalauth"
	"airgapcoder/coderd/replicasync"
	"airgapcoder/codersdk"
	"airgapcoder/internal/testbin"
	"airgapcoder/internal/testprovider"
	"airgapcoder/internal/testtier"
	"airgapcoder/postgres"
	"airgapcoder/relayconn"
)

// EnvPostgresURL names an external PostgreSQL for tests (a superuser URL).
const EnvPostgresURL = "CODER_TEST_POSTGRES_URL"

var (
	clusterOnce sync.Once
	clusterURL  string
	clusterErr  error
	builtin     *postgres.Server
	builtinDir  string
)

// RunMain runs a package's tests with a shared PostgreSQL cluster, and
// removes what testbin and testprovider built for them.
func RunMain(m interface{ Run() int }) int {
	postgres.RunHelperIfRequested()
	code := m.Run()
	testbin.RemoveAll()
	testprovider.RemoveAll()
	if builtin != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_ = builtin.Stop(ctx)
		cancel()
		_ = os.RemoveAll(builtinDir)
	}
	return code
}

// ClusterURL returns the admin URL of the shared cluster, starting the
// built-in one when no external one is configured.
func ClusterURL(t testing.TB) string {
	t.Helper()
	testtier.Heavy(t, "needs PostgreSQL")
	clusterOnce.Do(func() {
		if u := os.Getenv(EnvPostgresURL); u != "" {
			clusterURL = u
			return
		}
		dir, err := os.MkdirTemp("", "coderdtest-pg-")
		if err != nil {
			clusterErr = err
			return
		}
		_ = os.Chmod(dir, 0o755)
		builtinDir = dir
		builtin, err = postgres.New(postgres.Options{
			DataDir: filepath.Join(dir, "data"), RuntimeDir: filepath.Join(dir, "run"),
			CacheDir: filepath.Join(dir, "cache"), BinariesDir: filepath.Join(dir, "bin"),
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		})
		if err != nil {
			clusterErr = err
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if clusterErr = builtin.Start(ctx); clusterErr == nil {
			clusterURL = builtin.URL()
		}
	})
	if clusterErr != nil {
		t.Fatalf("start test postgres: %v", clusterErr)
	}
	return clusterURL
}

// NewDatabase creates an empty database in the shared cluster and returns
// its URL; it is dropped when the test ends.
func NewDatabase(t testing.TB) string {
	t.Helper()
	admin := ClusterURL(t)
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := "test_" + hex.EncodeToString(b)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Fatalf("connect to test postgres: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("create database: %v", err)
	}
	t.Cleanup(func() {
		conn, err := pgx.Connect(ctx, admin)
		if err != nil {
			return
		}
		defer conn.Close(ctx)
		_, _ = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
	})
	u, err := url.Parse(admin)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	return u.String()
}

// Options tune a test deployment.
type Options struct {
	// DatabaseURL reuses a database (e.g. to restart over the same data).
	DatabaseURL         string
	ProvisionerPSK      string
	JobHeartbeatTimeout time.Duration
	// AgentBinariesDir serves coder-<os>-<arch> agent binaries.
	AgentBinariesDir string
	Logger           *slog.Logger
	// Address, when set, is the loopback address to listen on (e.g. the
	// address of a deployment stopped with Close, to restart it there).
	Address string
	// AgentHeartbeatInterval and AgentKeepAliveInterval tune agent liveness
	// (coderd's defaults when zero).
	AgentHeartbeatInterval time.Duration
	AgentKeepAliveInterval time.Duration
	// RateLimits are coderd's rate limits. The API limit is off unless set
	// (tests poll freely); the login limits are coderd's defaults unless set.
	RateLimits coderd.RateLimits
	// OnFirstUser is coderd's first-user hook (see coderd.Options).
	OnFirstUser func(ctx context.Context, username, token string)
	// HealthChecks are coderd's extra readiness checks (coderd.Options).
	HealthChecks map[string]func(context.Context) error
	// Now is what coderd reads as the time (default: Clock's time, else
	// the wall clock's). It moves no ticker: set Clock for that.
	Now func() time.Time
	// Clock, when set, drives coderd's tickers and timers (the lifecycle
	// tick and activity bump, the audit retention and journal, stale-job
	// checks, job acquisition long-polls, the replica heartbeat, the
	// pubsub's reconnect backoff: a clock left still silences the replica,
	// which leaves GET /api/v2/replicas once its row is MaxAge old on the
	// database's clock); the test steps it with
	// AdvanceClock. Without Now it is also coderd's time. Nil means the
	// real clock. NewClock makes one at the wall clock's time.
	Clock *quartz.Mock
	// TLS serves HTTPS (the appliance's default) with a certificate for
	// 127.0.0.1 that Deployment.CAFile holds and Client trusts.
	TLS bool
	// TLSCertificate, with TLS, is served instead of that certificate (its
	// leaf is then what CAFile holds and Client trusts).
	TLSCertificate *tls.Certificate
	// Appliance, when set, answers GET /api/v2/appliance (the appliance's
	// own overview is tested against a real appliance in package
	// appliance; the dashboard's page only needs the data).
	Appliance func(context.Context) (codersdk.Appliance, error)
	// Registerer receives the API's metrics (none when nil).
	Registerer prometheus.Registerer
	// BodyReadTimeout is coderd's request body deadline (coderd's default
	// when zero).
	BodyReadTimeout time.Duration
	// WildcardAccessURL serves subdomain apps (e.g. "*.apps.test"; app URLs
	// take the deployment's port). A test's client dials the deployment's
	// address for those hosts itself.
	WildcardAccessURL string
	// OIDC and DisablePasswordAuth are coderd's sign-in options.
	OIDC                coderd.OIDCConfig
	DisablePasswordAuth bool
	// ExternalAuth and ExternalAuthHTTPClient are coderd's external auth
	// providers and the client that reaches them.
	ExternalAuth           []externalauth.Config
	ExternalAuthHTTPClient *http.Client
	// Lifecycle tunes coderd's autostop/autostart scheduler (e.g. a short
	// tick and minimum TTL).
	Lifecycle coderd.LifecycleOptions
	// WorkspaceProxyHeartbeatInterval and WorkspaceProxyAuthTTL are
	// coderd's (its defaults when zero).
	WorkspaceProxyHeartbeatInterval time.Duration
	WorkspaceProxyAuthTTL           time.Duration
}

// Deployment is a running API.
type Deployment struct {
	URL         *url.URL
	psk         string
	DatabaseURL string
	DB          *database.DB
	API         *coderd.API
	// CAFile is the PEM certificate an HTTPS deployment serves (Options.TLS).
	CAFile     string
	server     *httptest.Server
	httpClient *http.Client
	stop       func()
}

// New starts an API over a fresh (or the given) database and stops it when
// the test ends.
func New(t testing.TB, opts Options) *Deployment {
	t.Helper()
	dbURL := opts.DatabaseURL
	if dbURL == "" {
		dbURL = NewDatabase(t)
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	ctx, cancel := context.WithCancel(context.Background())
	db, err := database.Open(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Migrate(ctx, log); err != nil {
		t.Fatal(err)
	}
	var clock quartz.Clock // nil: the real clock (coderd's, the pubsub's and the replica's default)
	if opts.Clock != nil {
		clock = opts.Clock
	}
	ps := database.NewPubsub(dbURL, log, clock, database.Channels...)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = ps.Run(ctx) }()
	select {
	case <-ps.Ready():
	case <-time.After(30 * time.Second):
		t.Fatal("pubsub did not connect")
	}
	srv := httptest.NewUnstartedServer(nil)
	if opts.Address != "" {
		_ = srv.Listener.Close()
		var ln net.Listener
		// The old deployment's port may take a moment to be released.
		for i := 0; ; i++ {
			if ln, err = net.Listen("tcp", opts.Address); err == nil || i == 50 {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil {
			t.Fatalf("listen on %s: %v", opts.Address, err)
		}
		srv.Listener = ln
	}
	scheme := "http"
	if opts.TLS {
		scheme = "https"
	}
	u, _ := url.Parse(scheme + "://" + srv.Listener.Addr().String())
	limits := opts.RateLimits
	if limits.API == 0 {
		limits.API = -1
	}
	var wildcard appurl.Wildcard
	if opts.WildcardAccessURL != "" {
		if wildcard, err = appurl.ParseWildcard(opts.WildcardAccessURL); err != nil {
			t.Fatal(err)
		}
	}
	replicas, err := replicasync.New(ctx, db, ps, replicasync.Options{
		Hostname: "coderdtest", RelayAddress: u.String(), Version: "v0.0.0-test", Logger: log, Clock: clock,
	})
	if err != nil {
		t.Fatal(err)
	}
	wg.Add(1)
	go func() { defer wg.Done(); _ = replicas.Run(ctx) }()
	api, err := coderd.New(ctx, coderd.Options{
		DB: db, Pubsub: ps, Logger: log, AccessURL: u, Version: "v0.0.0-test", Replicas: replicas,
		ProvisionerPSK: opts.ProvisionerPSK, JobHeartbeatTimeout: opts.JobHeartbeatTimeout, AgentBinariesDir: opts.AgentBinariesDir,
		AgentHeartbeatInterval: opts.AgentHeartbeatInterval, AgentKeepAliveInterval: opts.AgentKeepAliveInterval,
		RateLimits: limits, OnFirstUser: opts.OnFirstUser, HealthChecks: opts.HealthChecks, Now: opts.Now, Clock: clock, Appliance: opts.Appliance, Registerer: opts.Registerer,
		BodyReadTimeout: opts.BodyReadTimeout, WildcardAccessURL: wildcard,
		OIDC: opts.OIDC, DisablePasswordAuth: opts.DisablePasswordAuth,
		ExternalAuth: opts.ExternalAuth, ExternalAuthHTTPClient: opts.ExternalAuthHTTPClient,
		Lifecycle: opts.Lifecycle, WorkspaceProxyHeartbeatInterval: opts.WorkspaceProxyHeartbeatInterval, WorkspaceProxyAuthTTL: opts.WorkspaceProxyAuthTTL,
	})
	if err != nil {
		t.Fatal(err)
	}
	srv.Config.Handler = api
	var caFile string
	var httpClient *http.Client
	if opts.TLS {
		if opts.TLSCertificate != nil {
			srv.TLS = &tls.Config{Certificates: []tls.Certificate{*opts.TLSCertificate}}
		}
		srv.Listener = relayconn.BatchingListener(srv.Listener) // as controlplane serves HTTPS
		srv.StartTLS()
		caFile = filepath.Join(t.TempDir(), "ca.pem")
		if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o644); err != nil {
			t.Fatal(err)
		}
		httpClient = srv.Client()
	} else {
		srv.Start()
	}
	wg.Add(1)
	go func() { defer wg.Done(); _ = api.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			// Shutdown ends agent connections, which the HTTP server no
			// longer tracks once they are WebSockets.
			api.Shutdown()
			srv.CloseClientConnections()
			srv.Close()
			cancel()
			wg.Wait()
			db.Close()
		})
	}
	t.Cleanup(stop)
	return &Deployment{URL: u, psk: opts.ProvisionerPSK, DatabaseURL: dbURL, DB: db, API: api, CAFile: caFile, server: srv, httpClient: httpClient, stop: stop}
}

// Close stops the deployment now, as a crash would for its clients: every
// connection is cut. Its database stays; New with DatabaseURL and Address
// starts it again.
func (d *Deployment) Close() { d.stop() }

// NewDaemon registers a provisioner daemon that authenticates with the
// deployment's pre-shared key (Options.ProvisionerPSK must be set).
func (d *Deployment) NewDaemon(t testing.TB, name string, tags map[string]string) *Daemon {
	t.Helper()
	if d.psk == "" {
		t.Fatal("coderdtest: NewDaemon needs Options.ProvisionerPSK")
	}
	c := d.Client()
	c.ProvisionerPSK = d.psk
	return NewDaemon(t, c, name, tags)
}

// NewWithDaemon starts a deployment (New, with a provisioner PSK when opts
// has none) with its owner and one untagged daemon named daemonName, driven
// by hand: where tests that build workspaces start. It returns the
// deployment, the owner's client and the daemon.
func NewWithDaemon(t testing.TB, opts Options, daemonName string) (*Deployment, *codersdk.Client, *Daemon) {
	t.Helper()
	if opts.ProvisionerPSK == "" {
		opts.ProvisionerPSK = "coderdtest-psk"
	}
	d := New(t, opts)
	owner, _ := d.CreateFirstUser(t)
	return d, owner, d.NewDaemon(t, daemonName, nil)
}

// Client returns an unauthenticated client.
func (d *Deployment) Client() *codersdk.Client {
	c := codersdk.New(d.URL)
	c.HTTPClient = d.httpClient // nil: the default, for plain HTTP
	return c
}

// FirstUserPassword is the password of every user these helpers create.
const FirstUserPassword = "password-for-tests"

// CreateFirstUser creates the owner "admin" and returns its client.
func (d *Deployment) CreateFirstUser(t testing.TB) (*codersdk.Client, codersdk.CreateFirstUserResponse) {
	t.Helper()
	return CreateFirstUser(t, d.Client())
}

// CreateFirstUser creates the owner "admin" (password FirstUserPassword)
// through anon, an unauthenticated client of a running server that has no
// user yet, and returns a client of the same server logged in as it.
func CreateFirstUser(t testing.TB, anon *codersdk.Client) (*codersdk.Client, codersdk.CreateFirstUserResponse) {
	t.Helper()
	ctx := context.Background()
	resp, err := anon.CreateFirstUser(ctx, codersdk.CreateFirstUserRequest{Email: "admin@example.com", Username: "admin", Password: FirstUserPassword})
	if err != nil {
		t.Fatalf("create first user: %v", err)
	}
	login, err := anon.LoginWithPassword(ctx, codersdk.LoginWithPasswordRequest{Email: "admin@example.com", Password: FirstUserPassword})
	if err != nil {
		t.Fatalf("log in first user: %v", err)
	}
	c := codersdk.New(anon.URL)
	c.HTTPClient = anon.HTTPClient
	c.SessionToken = login.SessionToken
	return c, resp
}

// CreateUser creates a user with the given roles (none means member) and
// returns its logged-in client.
func (d *Deployment) CreateUser(t testing.TB, owner *codersdk.Client, username string, roles ...string) (*codersdk.Client, codersdk.User) {
	t.Helper()
	ctx := context.Background()
	email := username + "@example.com"
	u, err := owner.CreateUser(ctx, codersdk.CreateUserRequest{Email: email, Username: username, Password: FirstUserPassword, Roles: roles})
	if err != nil {
		t.Fatalf("create user %s: %v", username, err)
	}
	c := d.Client()
	login, err := c.LoginWithPassword(ctx, codersdk.LoginWithPasswordRequest{Email: email, Password: FirstUserPassword})
	if err != nil {
		t.Fatalf("log in %s: %v", username, err)
	}
	c.SessionToken = login.SessionToken
	return c, u
}

// Do sends a raw request with an optional token and returns status and body.
func Do(t testing.TB, method, rawURL, token string, body io.Reader, contentType string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, rawURL, body)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set(codersdk.SessionTokenHeader, token)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, rawURL, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// String formats a status and body for failure messages.
func String(status int, body []byte) string { return fmt.Sprintf("%d %s", status, body) }
