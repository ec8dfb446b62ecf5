// Package provisionerd runs provisioner jobs: it registers with coderd over
// the network (codersdk), long-polls for jobs its tags match, runs the pinned
// terraform in a fresh work dir against a provider mirror, streams every
// output line back while it runs, and reports state, resources, agents and
// parameters. The same Daemon runs built into `coder server` and as the
// external `coder provisionerd start`.
//
// It must not import server packages (coderd, database, gin, pgx): a test
// checks its dependencies. Nothing it starts may reach the internet: the
// CLI configuration it hands terraform allows only the mirror.
package provisionerd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"time"

	"airgapcoder/coderd/codersdk"
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
	// FindTerraform, which callers run at start-up to fail early).
	TerraformPath string
	// ProviderMirror is a folder (filesystem mirror) or https URL (network
	// mirror): the only place terraform may install providers from.
	ProviderMirror string
	// CACertFile is the trust bundle handed to terraform and providers as
	// SSL_CERT_FILE and carried in agent init scripts (optional).
	CACertFile string
	// AgentCACertFile is the PEM bundle our provider embeds in agent init
	// scripts, so workspaces trust coderd without knowing its CA (default
	// CACertFile). Keep it to the site's own CAs: an init script lives in
	// an environment variable, which Linux caps at 128 KiB.
	AgentCACertFile string
	// WorkDir holds the per-job folders and the plugin cache (default: a
	// folder under the OS temp dir).
	WorkDir string
	// AccessURL is what workspaces use to reach coderd (default Client.URL).
	AccessURL string
	// HeartbeatInterval spaces heartbeats (default 5s); logs are flushed
	// more often while they flow.
	HeartbeatInterval time.Duration
	// AcquireWait is the long-poll duration (default 30s).
	AcquireWait time.Duration
	// CancelGrace is how long terraform gets after SIGINT before it is
	// killed (default 60s).
	CancelGrace time.Duration
	Logger      *slog.Logger
}

// Daemon is one provisioner: it runs one job at a time.
type Daemon struct {
	opts Options
	log  *slog.Logger

	mu        sync.Mutex
	id        string
	heartbeat time.Duration
}

// New validates options; it starts nothing.
func New(opts Options) (*Daemon, error) {
	if opts.Client == nil {
		return nil, errors.New("provisionerd: a client is required")
	}
	if opts.TerraformPath == "" {
		return nil, errors.New("provisionerd: a terraform path is required (see FindTerraform)")
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
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return &Daemon{opts: opts, log: opts.Logger.With("daemon", opts.Name)}, nil
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
	backoff := time.Second
	for ctx.Err() == nil {
		if d.ID() == "" {
			if err := d.Register(ctx); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				d.log.Warn("register failed; retrying", "err", err, "in", backoff)
				sleep(ctx, backoff)
				backoff = min(backoff*2, 30*time.Second)
				continue
			}
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
			d.log.Warn("acquire job failed; retrying", "err", err, "in", backoff)
			sleep(ctx, backoff)
			backoff = min(backoff*2, 30*time.Second)
			continue
		}
		backoff = time.Second
		if job == nil {
			continue
		}
		d.runJob(ctx, job)
	}
	return nil
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
