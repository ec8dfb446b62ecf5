// Package coderd is the control plane's API and its state: the HTTP API
// under /api/v2 (users, templates, workspaces, builds, the provisioner job
// queue, the workspace relay, dev URLs), /healthz, the API's metrics and its
// background loops (API.Run).
//
// State lives only in PostgreSQL, through package database, so any number of
// replicas can share one database. coderd must not run Terraform or reach
// into a workspace itself: provisioner daemons and agents do that and talk to
// coderd over the network through codersdk. It starts no PostgreSQL, opens
// no listener and links neither provisionerd nor terraform: package
// controlplane composes a whole server from the API, the database, the
// listeners and the built-in provisioner daemons.
package coderd

import (
	"context"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/quartz"
	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"

	"airgapcoder/coderd/appurl"
	"airgapcoder/coderd/database"
	"airgapcoder/coderd/externalauth"
	"airgapcoder/coderd/replicasync"
	"airgapcoder/coderd/updatecheck"
	"airgapcoder/codersdk"
	"airgapcoder/internal/bodydeadline"
	"airgapcoder/internal/logring"
	"airgapcoder/internal/templatetar"
)

// Options configure the API. DB, Pubsub and Logger are required.
type Options struct {
	DB     *database.DB
	Pubsub *database.Pubsub
	Logger *slog.Logger
	// AccessURL is how users and workspaces reach this deployment.
	AccessURL *url.URL
	// WildcardAccessURL, when set, serves subdomain apps on the hosts
	// under it (subdomainapps.go); the zero value serves none.
	WildcardAccessURL appurl.Wildcard
	// Version is reported by /api/v2/buildinfo.
	Version string
	// ProvisionerPSK, when set, lets external provisioner daemons
	// authenticate with this pre-shared key.
	ProvisionerPSK string
	// BuiltinProvisionerKey authenticates the server's own provisioner
	// daemons like a PSK; it never leaves the process.
	BuiltinProvisionerKey string
	// JobHeartbeatTimeout fails a running job whose daemon has been silent
	// this long (default 60s).
	JobHeartbeatTimeout time.Duration
	// SessionDuration is the lifetime of a password login (default 24h).
	SessionDuration time.Duration
	// MaxTokenLifetime caps API tokens (default 365 days).
	MaxTokenLifetime time.Duration
	// MaxUploadSize caps a template tar (default templatetar.DefaultMaxSize).
	MaxUploadSize int64
	// AuditRetention deletes audit records older than this, hourly; 0
	// keeps them forever.
	AuditRetention time.Duration
	// AuditJournal, when set, is an audit journal (see package
	// auditjournal) whose new records Run copies into the audit log.
	AuditJournal string
	// Telemetry and UpdateCheck are reported in buildinfo; UpdateChecker is
	// the running checker when the update check is on.
	Telemetry     bool
	UpdateCheck   bool
	UpdateChecker *updatecheck.Checker
	// AgentBinariesDir holds coder-<os>-<arch> binaries for platforms other
	// than the server's own (optional).
	AgentBinariesDir string
	// HealthChecks are extra readiness checks /healthz runs (e.g. the
	// appliance's mirror); a failing one makes /healthz answer 503.
	HealthChecks map[string]func(context.Context) error
	// OnFirstUser, when set, runs after the first user is created, with a
	// short-lived API token of that user (the appliance pushes its bundled
	// templates with it).
	OnFirstUser func(ctx context.Context, username, token string)
	// Registerer receives the API's metrics; nil means none.
	Registerer prometheus.Registerer
	// Now is what api.now() reads (default Clock.Now). When both are
	// set, Now gives the time and Clock drives tickers and timers.
	Now func() time.Time
	// Clock drives coderd's tickers and timers (the lifecycle tick and
	// activity bump, the audit retention and journal, stale-job checks,
	// job acquisition long-polls, agent heartbeats, the job-log stream's
	// safety-net wake, the wait for a reconnecting agent, the external
	// auth listen poll), tagged "coderd" and the loop's name; tests pass a
	// quartz.Mock to step time. Default: the real clock. Pass the same
	// clock to the Pubsub and to Replicas.
	Clock quartz.Clock
	// AgentHeartbeatInterval is how often coderd records that a connected
	// agent is alive (default 10s); an agent silent for three intervals
	// counts as disconnected.
	AgentHeartbeatInterval time.Duration
	// AgentKeepAliveInterval is the relay's ping interval on an agent's
	// connection (default 15s): a dead connection is noticed within about
	// twice this.
	AgentKeepAliveInterval time.Duration
	// Replicas is this replica's registration among the deployment's
	// replicas (nil in tests that run one API without one).
	Replicas *replicasync.Manager
	// Appliance, when set, describes the installed appliance for GET
	// /api/v2/appliance and /api/v2/debug/appliance (nil: a plain coder
	// server, which answers 404).
	Appliance func(context.Context) (codersdk.Appliance, error)
	// RecentLogs, when set, holds this process's newest log lines, which
	// GET /api/v2/debug/logs serves to owners (nil: it answers 404).
	RecentLogs *logring.Ring
	// PeerHTTPClient dials other replicas' relay addresses (its TLS trust
	// checks their certificates); nil means http.DefaultClient.
	PeerHTTPClient *http.Client
	// RateLimits bound logins and API requests, in this replica's memory
	// (ratelimit.go); the zero value means the defaults.
	RateLimits RateLimits
	// OIDC is OpenID Connect sign-in (oidc.go); the zero value is off.
	OIDC OIDCConfig
	// ExternalAuth are the external auth providers (externalauth.go) users
	// link their accounts to; none by default.
	ExternalAuth []externalauth.Config
	// ExternalAuthHTTPClient makes the requests to those providers (token
	// exchange, refresh, validation): the appliance's trust store and
	// egress guard; nil means http.DefaultClient.
	ExternalAuthHTTPClient *http.Client
	// DisablePasswordAuth refuses password logins except an owner's (as
	// Coder's --disable-password-auth, so that owners cannot lock
	// themselves out).
	DisablePasswordAuth bool
	// BodyReadTimeout is how long a request has to send its body
	// (package bodydeadline); 0 means bodydeadline.Default, a negative value
	// sets no deadline.
	BodyReadTimeout time.Duration
	// WorkspaceProxyHeartbeatInterval is how often workspace proxies
	// register again (workspaceproxies.go); one silent for three intervals
	// is unreachable. 0 means DefaultWorkspaceProxyHeartbeatInterval.
	WorkspaceProxyHeartbeatInterval time.Duration
	// WorkspaceProxyAuthTTL is how long a proxy may reuse the primary's
	// answer about a user's token (codersdk.ProxyAuthorizeConnectResponse):
	// the bound on revocation at a proxy. 0 means
	// DefaultWorkspaceProxyAuthTTL.
	WorkspaceProxyAuthTTL time.Duration
	// Lifecycle tunes the workspace lifecycle scheduler (autostop and
	// autostart, lifecycle.go); the zero value means its defaults.
	Lifecycle LifecycleOptions
}

// API serves /api/v2. Construct with New; run its background loops with Run.
type API struct {
	opts    Options
	db      *database.DB
	ps      *database.Pubsub
	log     *slog.Logger
	now     func() time.Time
	org     database.Organization
	metrics *metrics
	router  *gin.Engine
	// handler is the router behind the request body deadline
	// (bodydeadline.go).
	handler http.Handler

	// oidc is the OpenID Connect provider (oidc.go), nil when off.
	oidc *oidcProvider
	// extAuth are the external auth providers (externalauth.go), nil when
	// none are configured.
	extAuth *externalAuth
	// relay holds this replica's agent connections (relay.go); peers its
	// sessions to other replicas, which authenticate with replicaSecret
	// (peers.go).
	relay         *relay
	peers         peers
	replicaSecret string
	// proxyRelays are the workspace proxies' relay sessions on this
	// replica (workspaceproxyrelay.go).
	proxyRelays proxyRelays
	// activity is the relay's activity that moves workspace deadlines
	// (schedules_activity.go).
	activity activity
	// limits are the login and API rate limits (ratelimit.go).
	limits *rateLimiters
	// authEpoch counts changes of who may do what (authchanges.go).
	authEpoch atomic.Uint64
	// firstUserHooks counts running OnFirstUser hooks (firstuser.go).
	firstUserHooks atomic.Int32
	// hooksCtx is the hooks' context, canceled when Run ends, which waits
	// for hooks.
	hooksCtx  context.Context
	stopHooks context.CancelFunc
	hooks     sync.WaitGroup

	shutdownOnce sync.Once
	// closing is closed when the server begins to shut down.
	closing chan struct{}
}

// Shutdown makes long-polls (job acquisition) answer at once, so a graceful
// HTTP shutdown does not wait for their deadline. The API keeps serving.
func (api *API) Shutdown() {
	api.shutdownOnce.Do(func() {
		close(api.closing)
		api.closePeers()
	})
}

// New builds the API over a migrated database. It starts no goroutines.
func New(ctx context.Context, opts Options) (*API, error) {
	if opts.JobHeartbeatTimeout <= 0 {
		opts.JobHeartbeatTimeout = 60 * time.Second
	}
	if opts.SessionDuration <= 0 {
		opts.SessionDuration = 24 * time.Hour
	}
	if opts.MaxTokenLifetime <= 0 {
		opts.MaxTokenLifetime = 365 * 24 * time.Hour
	}
	if opts.MaxUploadSize <= 0 {
		opts.MaxUploadSize = templatetar.DefaultMaxSize
	}
	if opts.Clock == nil {
		opts.Clock = quartz.NewReal()
	}
	if opts.Now == nil {
		clock := opts.Clock
		opts.Now = func() time.Time { return clock.Now() }
	}
	if opts.AgentHeartbeatInterval <= 0 {
		opts.AgentHeartbeatInterval = 10 * time.Second
	}
	if opts.AgentKeepAliveInterval <= 0 {
		opts.AgentKeepAliveInterval = 15 * time.Second
	}
	if opts.BodyReadTimeout == 0 {
		opts.BodyReadTimeout = bodydeadline.Default
	}
	opts.Lifecycle = opts.Lifecycle.withDefaults()
	if opts.AccessURL == nil {
		opts.AccessURL = &url.URL{Scheme: "http", Host: "127.0.0.1:3000"}
	}
	org, err := opts.DB.EnsureDefaultOrganization(ctx)
	if err != nil {
		return nil, err
	}
	api := &API{
		opts: opts, db: opts.DB, ps: opts.Pubsub, log: opts.Logger,
		now: func() time.Time { return opts.Now().UTC() },
		org: org, metrics: newMetrics(opts.Registerer), closing: make(chan struct{}),
	}
	if api.replicaSecret, err = loadReplicaSecret(ctx, opts.DB); err != nil {
		return nil, err
	}
	if opts.OIDC.Enabled() {
		api.opts.OIDC.setDefaults()
		api.oidc = &oidcProvider{cfg: api.opts.OIDC, secret: func(ctx context.Context) (string, error) {
			return opts.DB.DeploymentValue(ctx, "oidc_state_secret", randomString(48))
		}}
	}
	if api.extAuth, err = newExternalAuth(ctx, opts); err != nil {
		return nil, err
	}
	api.limits = newRateLimiters(opts.RateLimits, opts.Now)
	api.hooksCtx, api.stopHooks = context.WithCancel(context.WithoutCancel(ctx))
	api.watchAuthChanges()
	api.watchProxyDeletions() // workspaceproxyrelay.go
	api.router = api.routes()
	api.handler = bodydeadline.Wrap(opts.BodyReadTimeout, api.byHost(api.router))
	return api, nil
}

// ServeHTTP serves the API, the dashboard and dev URLs.
func (api *API) ServeHTTP(w http.ResponseWriter, r *http.Request) { api.handler.ServeHTTP(w, r) }

// Run runs the background loops (the job heartbeat reaper, the audit
// retention, the audit journal) until ctx ends. It first copies the audit
// journal's new records into the audit log and records a new server
// version there; later records (an appliance command run on the host while
// the server runs, such as a password reset) follow every
// journalInterval.
func (api *API) Run(ctx context.Context) error {
	defer func() {
		api.stopHooks()
		api.hooks.Wait()
	}()
	defer api.runLifecycle(ctx)() // autostop and autostart (lifecycle.go)
	// Agent sessions' liveness, one heartbeat for all (agentheartbeat.go).
	defer api.runAgentHeartbeats(ctx)()
	api.ingestAuditJournal(ctx)
	api.recordVersion(ctx)
	var retention <-chan time.Time
	if api.opts.AuditRetention > 0 {
		api.deleteOldAuditLogs(ctx)
		rt := api.opts.Clock.NewTicker(auditRetentionInterval, "coderd", "auditRetention")
		defer rt.Stop()
		retention = rt.C
	}
	interval := max(api.opts.JobHeartbeatTimeout/4, 100*time.Millisecond)
	t := api.opts.Clock.NewTicker(interval, "coderd", "staleJobs")
	defer t.Stop()
	journal := api.opts.Clock.NewTicker(journalInterval, "coderd", "auditJournal")
	defer journal.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			api.failStaleJobs(ctx)
		case <-retention:
			api.deleteOldAuditLogs(ctx)
		case <-journal.C:
			api.ingestAuditJournal(ctx)
		}
	}
}

// journalInterval spaces the reads of the audit journal while the server
// runs.
const journalInterval = 5 * time.Second

func (api *API) failStaleJobs(ctx context.Context) {
	jobs, err := api.db.FailStaleJobs(ctx, api.now().Add(-api.opts.JobHeartbeatTimeout))
	if err != nil {
		if ctx.Err() == nil {
			api.log.Error("fail stale provisioner jobs", "err", err)
		}
		return
	}
	for _, j := range jobs {
		api.log.Warn("provisioner job failed: no heartbeat", "job", j.ID, "daemon", deref(j.WorkerID), "timeout", api.opts.JobHeartbeatTimeout)
		api.metrics.jobsFinished.WithLabelValues(database.JobFailed).Inc()
	}
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

func (api *API) routes() *gin.Engine {
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	r.Use(gin.Recovery(), api.instrument(), api.rateLimitAPI())
	r.Use(api.auditRequests()) // writes the audit records handlers leave to it (audit.go)
	// The web dashboard (/, /login, /workspaces, /@owner/workspace[/terminal],
	// …; package site, dashboard.go) answers the paths it owns first.
	r.Use(api.dashboard())
	// Dev URLs (/@owner/workspace/apps|ports/...) match no route; this
	// middleware serves them before the 404 handler (devurls.go).
	r.Use(api.devURLs())
	r.HandleMethodNotAllowed = true
	r.NoRoute(api.handle(func(c *gin.Context) error { return notFound("Route " + c.Request.URL.Path) }))
	r.NoMethod(api.handle(func(c *gin.Context) error {
		return errorf(http.StatusMethodNotAllowed, "", "Method %s is not allowed on %s", c.Request.Method, c.Request.URL.Path)
	}))

	r.GET("/healthz", api.handle(api.healthz))
	r.GET("/bin/:name", api.handle(api.agentBinary))
	r.HEAD("/bin/:name", api.handle(api.agentBinary))
	// The external auth link flow starts and ends here (externalauth.go).
	r.GET("/external-auth/:provider/callback", api.handle(api.externalAuthCallback))
	v2 := r.Group("/api/v2")
	v2.GET("/buildinfo", api.handle(api.buildInfo))
	v2.GET("/users/first", api.handle(api.firstUserExists))
	v2.POST("/users/first", api.handle(api.postFirstUser))
	v2.POST("/users/login", api.handle(api.limitLogin(api.postLogin)))
	// How to sign in, and the OpenID Connect sign-in (oidc.go).
	v2.GET("/users/authmethods", api.handle(api.authMethods))
	v2.GET("/users/oidc/callback", api.handle(api.oidcCallback))
	// Subdomain apps sign in here (appauth.go); it redirects to the login
	// page itself.
	v2.GET("/applications/auth-redirect", api.handle(api.appAuthRedirect))
	// Other replicas authenticate with the replica secret (peers.go).
	v2.GET("/replicas/relay", api.handle(api.servePeer))

	// Provisioner daemons authenticate by PSK or session token.
	pd := v2.Group("/provisionerdaemons")
	pd.POST("", api.handle(api.registerProvisionerDaemon))
	pd.POST("/:daemon/acquire", api.handle(api.acquireJob))
	pd.POST("/:daemon/jobs/:job/update", api.handle(api.updateJob))
	pd.POST("/:daemon/jobs/:job/complete", api.handle(api.completeJob))
	pd.POST("/:daemon/jobs/:job/fail", api.handle(api.failJob))
	pd.GET("/:daemon/files/:file", api.handle(api.daemonFile))

	// Workspace agents authenticate with their own token (workspaceagents.go, relay.go).
	api.relay = newRelay()
	me := v2.Group("/workspaceagents/me", api.requireAgent())
	me.GET("/manifest", api.handle(api.agentManifest))
	me.POST("/startup", api.handle(api.postAgentStartup))
	me.POST("/lifecycle", api.handle(api.postAgentLifecycle))
	me.POST("/logs", api.handle(api.postAgentLogs))
	me.POST("/metadata", api.handle(api.postAgentMetadata))
	me.POST("/ports", api.handle(api.postAgentPorts))
	me.POST("/app-health", api.handle(api.postAgentAppHealth))
	me.GET("/connect", api.handle(api.agentConnect))
	me.GET("/external-auth", api.handle(api.agentExternalAuth))

	a := v2.Group("", api.requireAuth())
	a.GET("/updatecheck", api.handle(api.updateCheck))
	a.GET("/debug/health", api.handle(api.debugHealth))
	a.GET("/debug/logs", api.handle(api.debugLogs))
	a.GET("/debug/system", api.handle(api.debugSystem))
	a.GET("/debug/postgres", api.handle(api.debugPostgres))
	a.GET("/debug/appliance", api.handle(api.debugAppliance))
	a.POST("/users/logout", api.handle(api.postLogout))
	a.GET("/users", api.handle(api.users))
	a.POST("/users", api.handle(api.postUser))
	a.GET("/workspace-quota/:user", api.handle(api.workspaceQuota)) // quotas.go
	a.GET("/users/:user", api.handle(api.user))
	a.DELETE("/users/:user", api.handle(api.deleteUser)) // adminapi.go
	a.PUT("/users/:user/roles", api.handle(api.putUserRoles))
	a.PUT("/users/:user/profile", api.handle(api.putUserProfile))
	a.PUT("/users/:user/status/suspend", api.handle(api.putUserStatus(database.UserStatusSuspended)))
	a.PUT("/users/:user/status/activate", api.handle(api.putUserStatus(database.UserStatusActive)))
	a.GET("/users/:user/gitsshkey", api.handle(api.gitSSHKey))
	a.POST("/users/:user/keys/tokens", api.handle(api.postToken))
	a.GET("/users/:user/keys/tokens", api.handle(api.tokens))
	a.DELETE("/users/:user/keys/:key", api.handle(api.deleteAPIKey))
	a.POST("/users/:user/logout-all", api.handle(api.postLogoutAll))
	a.POST("/users/:user/workspaces", api.handle(api.postWorkspace))
	a.GET("/users/:user/workspace/:name", api.handle(api.workspaceByOwnerAndName))

	a.GET("/organizations", api.handle(api.organizations))
	a.GET("/organizations/:org", api.handle(api.organization))
	a.POST("/organizations/:org/templateversions", api.handle(api.postTemplateVersion))
	a.POST("/organizations/:org/templates", api.handle(api.postTemplate))
	a.GET("/organizations/:org/templates", api.handle(api.templates))
	a.GET("/organizations/:org/templates/:name", api.handle(api.templateByName))
	a.GET("/organizations/:org/provisionerdaemons", api.handle(api.provisionerDaemons))
	a.GET("/organizations/:org/groups", api.handle(api.groups))
	a.POST("/organizations/:org/groups", api.handle(api.postGroup))
	a.GET("/organizations/:org/groups/:name", api.handle(api.groupByName))
	a.GET("/groups/:group", api.handle(api.group))
	a.PATCH("/groups/:group", api.handle(api.patchGroup))
	a.DELETE("/groups/:group", api.handle(api.deleteGroup))
	a.GET("/provisionerdaemons", api.handle(api.provisionerDaemons))
	a.GET("/replicas", api.handle(api.replicas))
	a.GET("/appliance", api.handle(api.appliance))

	a.POST("/files", api.handle(api.postFile))
	a.GET("/files/:file", api.handle(api.file))

	a.GET("/templates/:template", api.handle(api.template))
	a.DELETE("/templates/:template", api.handle(api.deleteTemplate))
	a.GET("/templates/:template/versions", api.handle(api.templateVersions))
	a.POST("/templates/:template/versions/archive", api.handle(api.archiveTemplateVersions))
	a.PATCH("/templates/:template/versions", api.handle(api.patchActiveVersion))
	a.GET("/templates/:template/acl", api.handle(api.templateACL))
	a.PATCH("/templates/:template/acl", api.handle(api.patchTemplateACL))
	a.GET("/templateversions/:version", api.handle(api.templateVersion))
	a.GET("/templateversions/:version/logs", api.handle(api.templateVersionLogs))
	a.PATCH("/templateversions/:version/cancel", api.handle(api.cancelTemplateVersion))
	a.POST("/templateversions/:version/archive", api.handle(api.setArchiveTemplateVersion(true)))
	a.POST("/templateversions/:version/unarchive", api.handle(api.setArchiveTemplateVersion(false)))
	a.GET("/templateversions/:version/external-auth", api.handle(api.templateVersionExternalAuth))
	a.GET("/external-auth", api.handle(api.listExternalAuths))
	a.GET("/external-auth/:provider", api.handle(api.externalAuthByID))
	a.DELETE("/external-auth/:provider", api.handle(api.deleteExternalAuth))

	a.GET("/applications/host", api.handle(api.appHost))
	a.GET("/workspaces", api.handle(api.workspaces))
	a.GET("/workspaces/:workspace", api.handle(api.workspace))
	a.POST("/workspaces/:workspace/builds", api.handle(api.postWorkspaceBuild))
	a.GET("/workspaces/:workspace/builds", api.handle(api.workspaceBuilds))
	a.GET("/workspacebuilds/:build", api.handle(api.workspaceBuild))
	a.GET("/workspacebuilds/:build/logs", api.handle(api.workspaceBuildLogs))
	a.GET("/workspacebuilds/:build/state", api.handle(api.workspaceBuildState))
	a.PUT("/workspacebuilds/:build/state", api.handle(api.putWorkspaceBuildState))
	a.PATCH("/workspacebuilds/:build/cancel", api.handle(api.cancelWorkspaceBuild))
	a.GET("/workspaceagents/:agent", api.handle(api.workspaceAgent))
	a.GET("/workspaceagents/:agent/logs", api.handle(api.workspaceAgentLogs))
	a.GET("/workspaceagents/:agent/connect", api.handle(api.workspaceAgentConnect))
	a.GET("/workspaceagents/:agent/pty", api.handle(api.workspaceAgentPTY))
	a.GET("/audit", api.handle(api.auditLogs))
	api.workspaceProxyRoutes(v2, a) // workspaceproxies.go
	api.scheduleRoutes(a)           // schedules.go
	api.templateScheduleRoutes(a)   // templateschedules.go
	return r
}

func (api *API) healthz(c *gin.Context) error {
	ctx, cancel := context.WithTimeout(c.Request.Context(), 5*time.Second)
	defer cancel()
	for _, h := range api.checkHealth(ctx, true) {
		if h.Error != "" {
			if h.Name == "database" {
				return errorf(http.StatusServiceUnavailable, h.Error, "Database is not reachable")
			}
			return errorf(http.StatusServiceUnavailable, h.Error, "%s is not ready", h.Name)
		}
	}
	c.String(http.StatusOK, "OK")
	return nil
}

// checkHealth runs the database check, then each of Options.HealthChecks,
// in name order; firstFailure stops at the first that fails (/healthz
// stays cheap).
func (api *API) checkHealth(ctx context.Context, firstFailure bool) []codersdk.ComponentHealth {
	checks := map[string]func(context.Context) error{"database": api.db.Ping}
	names := []string{"database"}
	for _, name := range slices.Sorted(maps.Keys(api.opts.HealthChecks)) {
		checks[name] = api.opts.HealthChecks[name]
		names = append(names, name)
	}
	var out []codersdk.ComponentHealth
	for _, name := range names {
		start := time.Now()
		err := checks[name](ctx)
		h := codersdk.ComponentHealth{Name: name, Healthy: err == nil, TookMillis: time.Since(start).Milliseconds()}
		if err != nil {
			h.Error = err.Error()
		}
		out = append(out, h)
		if err != nil && firstFailure {
			break
		}
	}
	return out
}

// debugHealth is GET /api/v2/debug/health (owners): every component's
// check, each with its result, as Coder's health report.
func (api *API) debugHealth(c *gin.Context) error {
	if err := authorize(c, resDeploymentStats, actRead, ""); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(c.Request.Context(), 10*time.Second)
	defer cancel()
	report := codersdk.HealthReport{Healthy: true, Time: api.now(), Components: api.checkHealth(ctx, false)}
	for _, h := range report.Components {
		report.Healthy = report.Healthy && h.Healthy
	}
	c.JSON(http.StatusOK, report)
	return nil
}

func (api *API) buildInfo(c *gin.Context) error {
	c.JSON(http.StatusOK, codersdk.BuildInfo{
		Version: api.opts.Version, ExternalURL: api.opts.AccessURL.String(),
		Telemetry: api.opts.Telemetry, UpdateCheck: api.opts.UpdateCheck,
		TemplatesImporting: api.firstUserHooks.Load() > 0,
	})
	return nil
}

func (api *API) updateCheck(c *gin.Context) error {
	if api.opts.UpdateChecker == nil {
		return errorf(http.StatusNotFound, "Start the server with --update-check and --update-check-url to enable it.", "The update check is off")
	}
	res, ok := api.opts.UpdateChecker.Latest()
	if !ok {
		return errorf(http.StatusServiceUnavailable, "", "No update check has succeeded yet")
	}
	c.JSON(http.StatusOK, res)
	return nil
}
