// Package provisionerd runs provisioner jobs: it registers with coderd over
// the network (codersdk), long-polls for jobs its tags match, runs the pinned
// terraform in a fresh work dir against a provider mirror, streams every
// output line back while it runs, and reports state, resources, agents,
// parameters, variables and workspace tags. The same Daemon runs built into
// `coder server` and as the external `coder provisionerd start`.
//
// It must not import server packages (coderd, database, gin, pgx): a test
// checks its dependencies. Nothing it starts may reach the internet: the
// CLI configuration it hands terraform allows only the mirror.
//
// # Environment
//
// Terraform and its providers see nothing of the daemon's environment but
// PATH (terraform-exec's SetEnv replaces the whole environment):
//
//	PATH                                  the daemon's PATH
//	HOME                                  the job's folder, unless Options.Environment sets it
//	(Options.Environment)                 the host's own settings, e.g. CODER_WORKSPACE_LAUNCHER
//	TF_CLI_CONFIG_FILE                    a CLI config whose only installation method is the mirror
//	TF_PLUGIN_CACHE_DIR                   the daemon's plugin cache
//	CHECKPOINT_DISABLE                    1
//	SSL_CERT_FILE                         Options.CACertFile, when set
//	HTTPS_PROXY, HTTP_PROXY (and lower case) the daemon's egress proxy (containment.go)
//	NO_PROXY, no_proxy                    loopback, the mirrors' and the access URL's hosts
//	GIT_ALLOW_PROTOCOL                    file:http:https (GIT_TERMINAL_PROMPT=0)
//
// and the context the official provider (registry.terraform.io/coder/coder)
// reads, as Coder's provisioner sets it:
//
//	CODER_AGENT_URL                       the access URL (the provider's url default)
//	CODER_AGENT_FALLBACK_URL              Options.AgentFallbackURL, when set (the init
//	                                      scripts carry it too)
//	CODER_WORKSPACE_TRANSITION            start or stop (a delete is a stop; an import a start)
//	CODER_WORKSPACE_NAME, _ID             the workspace
//	CODER_WORKSPACE_OWNER, _OWNER_ID      the owner's user name and id
//	CODER_WORKSPACE_OWNER_NAME, _EMAIL    the owner's full name and email
//	CODER_WORKSPACE_OWNER_GROUPS          JSON array of group names
//	CODER_WORKSPACE_OWNER_RBAC_ROLES      JSON array of {"name", "org_id"}
//	CODER_WORKSPACE_OWNER_SESSION_TOKEN   a token of the owner's minted for the build
//	CODER_WORKSPACE_OWNER_SSH_PUBLIC_KEY, _SSH_PRIVATE_KEY, _LOGIN_TYPE
//	CODER_WORKSPACE_TEMPLATE_ID, _TEMPLATE_NAME, _TEMPLATE_VERSION
//	CODER_WORKSPACE_BUILD_ID              workspace builds only (with it the provider
//	                                      requires the template id, name and version)
//	CODER_PARAMETER_<sha256 of name>      the build's parameter values (hex digest)
//	CODER_PARAMETER_PREVIOUS_<...>        the previous build's values (monotonic checks)
//	CODER_EXTERNAL_AUTH_ACCESS_TOKEN_<id> the owner's token for each external auth
//	                                      provider coderd sent (builds only), what
//	                                      data "coder_external_auth" reads
//	CODER_AGENT_SCRIPT_<os>_<arch>        agent init scripts (see agentscript.go) for
//	                                      linux amd64/arm64/armv7, darwin amd64/arm64,
//	                                      windows amd64/arm64
//
// The environment holds the owner's session token, SSH private key and
// external auth tokens, and `terraform show -json` holds agent tokens: the
// daemon never logs either.
//
// # Jobs
//
// An import first checks that every provider and registry module the
// template needs is in the mirrors (preflight.go) and refuses it, naming
// all that is missing, before terraform runs. A template that still
// requires the retired provider
// coder.internal/appliance/coder fails before terraform init, saying what
// to write instead. An import plans the template with its Terraform
// variables (-var, from the values given at push; a required variable
// without one fails the import) and reports the variables, the
// data "coder_parameter" sources read during the plan (required ones with a
// validation block get a placeholder value that passes it, see
// placeholder.go), the data "coder_external_auth" sources (id and optional,
// see externalauth.go), the data "coder_workspace_tags" entries as source
// text and the planned resources. A build writes the previous state, plans with
// the variables (parameters reach the provider only through the
// environment), applies, and reports the state and the resources read from
// it (see state.go); the state goes back to coderd even when apply fails.
//
// # Time
//
// The daemon's own waits (the backoff between attempts to reach coderd,
// heartbeats, log flushes, its requests' deadlines) and the times it
// reports (log lines) are on Options.Clock, so that tests step a
// quartz.Mock instead of sleeping. Terraform and what it runs keep the
// operating system's time, CancelGrace included; so do the egress proxy's
// shutdown and the mirror client's request timeout, which bound network
// I/O rather than pace the daemon.
package provisionerd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/coder/quartz"

	"airgapcoder/codersdk"
	"airgapcoder/internal/clockwait"
	"airgapcoder/internal/egress"
)

// Options configure a daemon.
type Options struct {
	// Client talks to coderd, authenticated by PSK or session token.
	Client *codersdk.Client
	// Name identifies the daemon in listings (default: the host name).
	Name    string
	Tags    map[string]string
	Version string
	// TerraformPath is a terraform binary of the pinned version (see
	// terraform.Find, which callers run at start-up to fail early).
	TerraformPath string
	// ProviderMirror is a folder (filesystem mirror) or https URL (network
	// mirror): the only place terraform may install providers from.
	ProviderMirror string
	// ModuleMirror is the https URL of a module registry mirror (the
	// appliance mirror's mirror.ModulesPath), optional. Each job asks it for
	// its registry hosts and gives terraform a `host` block per host, so
	// that registry module sources resolve against it and nowhere else.
	ModuleMirror string
	// CACertFile is the trust bundle handed to terraform and providers as
	// SSL_CERT_FILE (optional).
	CACertFile string
	// AgentCACertFile is the PEM bundle the agent init scripts carry, so
	// workspaces trust coderd without knowing its CA. New reads it once;
	// an unreadable file, one without certificates or one too large for an
	// init script (an environment variable, which Linux caps at 128 KiB) is
	// an error. Keep it to the site's own CAs. Empty means CACertFile, except
	// that a CACertFile too large to carry (a bundle with the system roots)
	// is then left out with a warning: the scripts carry no CA.
	AgentCACertFile string
	// WorkDir holds the per-job folders and the plugin cache (default: a
	// folder under the OS temp dir).
	WorkDir string
	// AccessURL is what workspaces use to reach coderd (default Client.URL).
	AccessURL string
	// AgentFallbackURL, when set and not AccessURL, is where the agents of
	// the workspaces this daemon builds reach coderd while AccessURL does
	// not answer: the primary's URL when AccessURL is a region's workspace
	// proxy (`coder provisionerd start --agent-url`). The init scripts
	// carry it (agentscript.go) and the environment has it as
	// CODER_AGENT_FALLBACK_URL. Empty: none.
	AgentFallbackURL string
	// Egress decides what terraform, the git it calls and the providers may
	// reach (their downloads and API calls, through the proxy the daemon
	// names in HTTPS_PROXY and HTTP_PROXY): loopback, and the hosts the
	// guard allows. Nil allows loopback only.
	Egress *egress.Guard
	// Environment is added to what terraform and the templates' local-exec
	// commands see (the host's own settings: the appliance names its
	// workspace launcher in CODER_WORKSPACE_LAUNCHER, and the HOME and
	// XDG_RUNTIME_DIR where rootless podman keeps its storage). It cannot
	// change the variables the daemon sets itself.
	Environment map[string]string
	// HeartbeatInterval spaces heartbeats (default 5s); logs are flushed
	// more often while they flow.
	HeartbeatInterval time.Duration
	// AcquireWait is the long-poll duration (default 30s).
	AcquireWait time.Duration
	// CancelGrace is how long terraform gets after SIGINT before it is
	// killed (default 60s).
	CancelGrace time.Duration
	// Clock drives the daemon's waits and times: the backoff between
	// attempts to register, to acquire and to reach coderd during a job,
	// the log flush ticker and the heartbeat timer, the deadlines of its
	// requests to coderd, the times on log lines and a job's duration
	// (tagged "provisionerd" and "registerBackoff", "acquireBackoff",
	// "retryBackoff", "logFlush", "heartbeat", "deadline"); tests pass a
	// quartz.Mock to step time. Default: the real clock. (Terraform's own
	// time, CancelGrace included, is the operating system's.)
	Clock  quartz.Clock
	Logger *slog.Logger
}

// Daemon is one provisioner: it runs one job at a time.
type Daemon struct {
	opts Options
	log  *slog.Logger

	// agentCA is the PEM the init scripts carry ("" for none).
	agentCA string
	// mirrorClient asks the mirrors what they hold (the module mirror's
	// hosts and versions, a network provider mirror's index), trusting
	// CACertFile (nil without either mirror).
	mirrorClient *http.Client

	mu        sync.Mutex
	id        string
	heartbeat time.Duration
	proxyURL  string   // the egress proxy while Run runs
	jobLogs   *jobLogs // the running job's, for the proxy's refusals
}

// New validates options; it starts nothing.
func New(opts Options) (*Daemon, error) {
	if opts.Client == nil {
		return nil, errors.New("provisionerd: a client is required")
	}
	if opts.TerraformPath == "" {
		return nil, errors.New("provisionerd: a terraform path is required (see terraform.Find)")
	}
	if opts.Name == "" {
		host, _ := os.Hostname()
		opts.Name = host
	}
	if opts.HeartbeatInterval <= 0 {
		opts.HeartbeatInterval = 5 * time.Second
	}
	if opts.AcquireWait <= 0 {
		opts.AcquireWait = 30 * time.Second
	}
	if opts.CancelGrace <= 0 {
		opts.CancelGrace = 60 * time.Second
	}
	if opts.WorkDir == "" {
		opts.WorkDir = os.TempDir() + "/coder-provisionerd"
	}
	if opts.AccessURL == "" {
		opts.AccessURL = opts.Client.URL.String()
	}
	if strings.TrimSuffix(opts.AgentFallbackURL, "/") == strings.TrimSuffix(opts.AccessURL, "/") {
		opts.AgentFallbackURL = ""
	}
	if opts.Clock == nil {
		opts.Clock = quartz.NewReal()
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	d := &Daemon{opts: opts, log: opts.Logger.With("daemon", opts.Name)}
	switch {
	case opts.AgentCACertFile != "":
		ca, err := loadAgentCA(opts.AgentCACertFile)
		if err != nil {
			return nil, fmt.Errorf("provisionerd: agent CA: %w", err)
		}
		d.agentCA = ca
	case opts.CACertFile != "":
		ca, err := loadAgentCA(opts.CACertFile)
		if errors.Is(err, errAgentCATooLarge) {
			d.log.Warn("agent init scripts carry no CA: workspaces must trust coderd's certificate themselves", "err", err)
			break
		}
		if err != nil {
			return nil, fmt.Errorf("provisionerd: CA bundle: %w", err)
		}
		d.agentCA = ca
	}
	if d.opts.Egress == nil {
		g, err := egress.New(nil, d.log.With("component", "egress"))
		if err != nil {
			return nil, err
		}
		d.opts.Egress = g
	}
	if opts.ModuleMirror != "" || strings.HasPrefix(opts.ProviderMirror, "https://") {
		client, err := mirrorClient(opts.CACertFile)
		if err != nil {
			return nil, fmt.Errorf("provisionerd: %w", err)
		}
		d.mirrorClient = client
	}
	return d, nil
}

// Register announces the daemon to coderd. Run calls it; callers may call it
// first to fail at start-up on a wrong PSK or token.
func (d *Daemon) Register(ctx context.Context) error {
	reg, err := d.opts.Client.RegisterProvisionerDaemon(ctx, codersdk.RegisterProvisionerDaemonRequest{
		Name: d.opts.Name, Version: d.opts.Version, Tags: d.opts.Tags,
	})
	if err != nil {
		if codersdk.IsStatus(err, http.StatusUnauthorized) || codersdk.IsStatus(err, http.StatusForbidden) {
			return fmt.Errorf("coderd at %s refused this provisioner: %w", d.opts.Client.URL, err)
		}
		return fmt.Errorf("register with coderd at %s: %w", d.opts.Client.URL, err)
	}
	d.mu.Lock()
	d.id = reg.ID
	d.heartbeat = d.opts.HeartbeatInterval
	if t := time.Duration(reg.JobHeartbeatTimeoutMillis) * time.Millisecond; t > 0 && t/3 < d.heartbeat {
		// Heartbeat well within the server's deadline.
		d.heartbeat = t / 3
	}
	d.mu.Unlock()
	d.log.Info("provisioner daemon registered", "id", reg.ID, "tags", reg.Tags)
	return nil
}

// heartbeatInterval is the interval agreed at registration.
func (d *Daemon) heartbeatInterval() time.Duration {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.heartbeat > 0 {
		return d.heartbeat
	}
	return d.opts.HeartbeatInterval
}

// ID is the daemon's id once registered.
func (d *Daemon) ID() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.id
}

// Run takes jobs until ctx is canceled. A job running at that moment is
// canceled (terraform gets SIGINT) and reported failed. It returns nil on
// cancellation.
func (d *Daemon) Run(ctx context.Context) error {
	if err := os.MkdirAll(d.opts.WorkDir, 0o700); err != nil {
		return fmt.Errorf("create work dir: %w", err)
	}
	stopProxy, err := d.serveEgressProxy()
	if err != nil {
		return err
	}
	defer stopProxy()
	acquire := newBackoff()
	for ctx.Err() == nil {
		if d.ID() == "" && !d.registerUntil(ctx) {
			return nil
		}
		job, err := d.opts.Client.AcquireJob(ctx, d.ID(), d.opts.AcquireWait)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if codersdk.IsStatus(err, http.StatusNotFound) {
				d.mu.Lock()
				d.id = "" // coderd forgot us (database reset): register again
				d.mu.Unlock()
			}
			in := acquire.NextBackOff()
			d.log.Warn("acquire job failed; retrying", "err", err, "in", in)
			d.sleep(ctx, in, "acquireBackoff")
			continue
		}
		acquire.Reset()
		if job == nil {
			continue
		}
		d.runJob(ctx, job)
	}
	return nil
}

// registerUntil registers, again with backoff while coderd refuses or
// cannot be reached, until it succeeds (true) or ctx ends (false).
func (d *Daemon) registerUntil(ctx context.Context) bool {
	_, err := clockwait.Retry(ctx, d.opts.Clock, newBackoff(), func() (struct{}, error) { return struct{}{}, d.Register(ctx) },
		func(err error, in time.Duration) { d.log.Warn("register failed; retrying", "err", err, "in", in) },
		"provisionerd", "registerBackoff")
	return err == nil
}

// newBackoff is the delay between attempts to reach coderd: doubling from
// 1s to 30s.
func newBackoff() *backoff.ExponentialBackOff {
	b := &backoff.ExponentialBackOff{InitialInterval: time.Second, Multiplier: 2, MaxInterval: 30 * time.Second}
	b.Reset()
	return b
}

// sleep waits dur on the daemon's clock (a timer tagged "provisionerd"
// and what); false when ctx ended first.
func (d *Daemon) sleep(ctx context.Context, dur time.Duration, what string) bool {
	return clockwait.Sleep(ctx, d.opts.Clock, dur, nil, "provisionerd", what)
}

// withTimeout is context.WithTimeout on the daemon's clock (an AfterFunc
// tagged "provisionerd", "deadline" and what): ctx ends when the clock
// has moved on by timeout, its cause then context.DeadlineExceeded.
func (d *Daemon) withTimeout(ctx context.Context, timeout time.Duration, what string) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	t := d.opts.Clock.AfterFunc(timeout, func() { cancel(context.DeadlineExceeded) }, "provisionerd", "deadline", what)
	return ctx, func() {
		t.Stop()
		cancel(context.Canceled)
	}
}
