// Package agent is the workspace agent: what `coder agent` runs inside a
// workspace. It owns the agent's end of the relay: one WebSocket to coderd
// carrying a yamux session, kept up with backoff across coderd restarts and
// network blips, in which coderd opens one stream per user connection; an
// agent given a fallback URL (the primary, when its agent URL is a region's
// workspace proxy) connects there while its agent URL does not answer
// (endpoints.go). A stream of kind ssh goes to the agent's SSH server
// (shells with a PTY, exec with exit codes, SFTP, direct-tcpip), a stream
// of kind tcp to a port
// inside the workspace, a stream of kind pty to a web terminal session that
// outlives its connections (reconnectingpty.go). The agent also runs the workspace's scripts
// (coder_script, startup_script, shutdown_script: on start, on a cron
// schedule, on stop; scripts.go) and streams their output, runs the
// metadata blocks and posts their results (metadata.go), checks the health
// of the apps that have a healthcheck and reports its changes
// (apphealth.go), reports its
// lifecycle (created → starting → ready | start_timeout | start_error →
// shutting_down → off), its version and platform, and the TCP ports
// listening in the workspace.
//
// The agent is a network client of coderd: it talks to it only through
// codersdk and must not import server packages (coderd, its database, gin,
// pgx). TestDependencies fails if it does. It never listens on a network
// port of its own: every connection arrives through coderd.
package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/coder/quartz"
	"github.com/hashicorp/yamux"

	"airgapcoder/codersdk"
	"airgapcoder/internal/clockwait"
	"airgapcoder/relayconn"
	"airgapcoder/relaymux"
)

// Options configure an Agent. Client is required.
type Options struct {
	// Client reaches coderd at the agent URL; its SessionToken is the
	// agent token.
	Client *codersdk.Client
	// FallbackURL, when set, is where the agent reaches coderd while its
	// agent URL does not answer (the primary's, when the agent URL is a
	// region's workspace proxy): see endpoints.go. Nil or the agent URL
	// itself: none.
	FallbackURL *url.URL
	// FallbackProbeInterval is how often, while on the fallback URL, the
	// agent asks the agent URL's /healthz (default 5s, ±20%).
	FallbackProbeInterval time.Duration
	// Logger receives the agent's own logs (default: discarded).
	Logger *slog.Logger
	// Version is reported to coderd.
	Version string
	// Environ is the base environment of shells and scripts (default
	// os.Environ()). CODER_AGENT_TOKEN and BinaryDirEnv are always removed
	// from it.
	Environ []string
	// ReconnectMin and ReconnectMax bound the backoff between attempts to
	// reach coderd (defaults 1s and 30s).
	ReconnectMin, ReconnectMax time.Duration
	// PortsInterval is how often listening ports are scanned (default 5s;
	// negative turns the scan off).
	PortsInterval time.Duration
	// StartupScriptTimeout stops a script that runs on start and has no
	// timeout of its own after that long, and reports start_timeout (zero:
	// no limit).
	StartupScriptTimeout time.Duration
	// LogDir holds script log files whose log_path is relative, and the
	// default coder-script-<id>.log files (default: the temporary folder,
	// as the provider documents log_path).
	LogDir string
	// ScriptDataDir holds each script's CODER_SCRIPT_DATA_DIR and the
	// CODER_SCRIPT_BIN_DIR put first on every PATH (default
	// $TMPDIR/coder-script-data, as in Coder).
	ScriptDataDir string
	// MetadataFlushInterval is how often metadata results are posted
	// (default 1s).
	MetadataFlushInterval time.Duration
	// KeepAliveInterval is the yamux ping interval on the connection to
	// coderd (default 15s): a dead connection is noticed within about twice
	// this.
	KeepAliveInterval time.Duration
	// LogFlushInterval is how often script output is sent (default 250ms).
	LogFlushInterval time.Duration
	// ReconnectingPTYTimeout is how long a web terminal session with no
	// client attached is kept before its process is killed (default 5m).
	ReconnectingPTYTimeout time.Duration
	// Clock drives the agent's waits: the backoff between attempts to
	// fetch the manifest, send a report (startup, app health, lifecycle)
	// and connect to coderd, the fallback URL's probe, the cron scripts,
	// each metadata key's interval, the metadata and log flushes, the app
	// healthchecks and the wait before their report, the port scan and a
	// web terminal's idle expiry. Its timers are tagged "agent" and
	// "backoff" (with "manifest", "connect", "lifecycle" or the report
	// retried, as "report agent startup"), "probe", "cron",
	// "metadataInterval" (with the key), "metadataFlush", "logFlush",
	// "appHealthInterval" (with the app's slug), "appHealthBatch", "ports"
	// or "ptyIdle" (with the reconnect id); tests pass a quartz.Mock.
	// Timeouts of real processes and peers (scripts, kill grace, dials,
	// HTTP checks) stay on real time. Default: the real clock.
	Clock quartz.Clock
}

// Agent is a workspace agent. Construct with New and run with Run.
type Agent struct {
	opts Options
	log  *slog.Logger
	// client is the agent URL's (Options.Client): its URL and token are
	// what the agent hands its shells. Calls to coderd go through
	// endpoints.client(), which is the fallback URL's while the agent uses
	// it.
	client    *codersdk.Client
	endpoints *endpoints
	ssh       *sshServer
	ptys      *ptyManager

	// exeDir is the folder of the agent's binary, added to PATH so that
	// scripts can run `coder stat`.
	exeDir string

	mu        sync.Mutex
	manifest  codersdk.AgentManifest
	scripts   *scriptRunner // set with the manifest
	lifecycle *lifecycleReporter
	logs      *logSender

	// runCtx is Run's context: TCP forwards end with it, whichever
	// connection (the session or a spare) carries them.
	runCtx context.Context
	// streams counts the goroutines serving user connections (streams of
	// the session, spares and what they carry); Run waits for them.
	streams sync.WaitGroup
}

// scriptKillGrace is how long a script being stopped has between SIGTERM
// and SIGKILL.
const scriptKillGrace = 5 * time.Second

// New checks opts and prepares an agent (its SSH host key included). It
// starts no goroutines.
func New(opts Options) (*Agent, error) {
	if opts.Client == nil || opts.Client.URL == nil {
		return nil, errors.New("agent: a client with the coderd URL is required (CODER_AGENT_URL)")
	}
	if opts.Client.SessionToken == "" {
		return nil, errors.New("agent: the agent token is required (CODER_AGENT_TOKEN)")
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if opts.Environ == nil {
		opts.Environ = os.Environ()
	}
	if opts.ReconnectMin <= 0 {
		opts.ReconnectMin = time.Second
	}
	if opts.ReconnectMax < opts.ReconnectMin {
		opts.ReconnectMax = max(30*time.Second, opts.ReconnectMin)
	}
	if opts.PortsInterval == 0 {
		opts.PortsInterval = 5 * time.Second
	}
	if opts.KeepAliveInterval <= 0 {
		opts.KeepAliveInterval = 15 * time.Second
	}
	if opts.LogFlushInterval <= 0 {
		opts.LogFlushInterval = 250 * time.Millisecond
	}
	if opts.MetadataFlushInterval <= 0 {
		opts.MetadataFlushInterval = time.Second
	}
	if opts.ReconnectingPTYTimeout <= 0 {
		opts.ReconnectingPTYTimeout = defaultPTYTimeout
	}
	if opts.LogDir == "" {
		opts.LogDir = os.TempDir()
	}
	if opts.ScriptDataDir == "" {
		opts.ScriptDataDir = filepath.Join(os.TempDir(), "coder-script-data")
	}
	if opts.Clock == nil {
		opts.Clock = quartz.NewReal()
	}
	if opts.FallbackProbeInterval <= 0 {
		opts.FallbackProbeInterval = 5 * time.Second
	}
	var fallback *codersdk.Client
	if u := opts.FallbackURL; u != nil && strings.TrimSuffix(u.String(), "/") != strings.TrimSuffix(opts.Client.URL.String(), "/") {
		fallback = opts.Client.WithURL(u)
	}
	a := &Agent{opts: opts, log: opts.Logger, client: opts.Client}
	a.endpoints = newEndpoints(opts.Client, fallback, opts.Logger, opts.Clock)
	if exe, err := os.Executable(); err == nil {
		a.exeDir = filepath.Dir(exe)
	}
	var err error
	if a.ssh, err = newSSHServer(a); err != nil {
		return nil, err
	}
	a.ptys = newPTYManager(a, opts.ReconnectingPTYTimeout)
	a.lifecycle = newLifecycleReporter(a)
	a.logs = newLogSender(a)
	return a, nil
}

// Run fetches the manifest, runs the start scripts, the cron scripts and
// the metadata blocks, and keeps the connection to coderd up until ctx
// ends. Then it reports shutting_down, ends the SSH sessions and the web
// terminals, runs the stop
// scripts, reports off and returns nil.
func (a *Agent) Run(ctx context.Context) error {
	a.runCtx = ctx
	// Reports outlive ctx a little, so that shutting_down, the stop
	// scripts' output and off arrive.
	reportCtx, stopReports := context.WithCancel(context.WithoutCancel(ctx))
	defer stopReports()
	var reporters sync.WaitGroup
	reporters.Go(func() { a.lifecycle.run(reportCtx) })
	reporters.Go(func() { a.logs.run(reportCtx) })
	var probing sync.WaitGroup
	probing.Go(func() { a.endpoints.probePreferred(ctx, a.opts.FallbackProbeInterval) })
	defer probing.Wait()

	m, ok := a.fetchManifest(ctx)
	if !ok {
		stopReports()
		reporters.Wait()
		return nil
	}
	a.log.Info("agent manifest", "agent", m.AgentID, "workspace", m.OwnerName+"/"+m.WorkspaceName, "directory", m.Directory,
		"scripts", len(m.Scripts), "metadata", len(m.Metadata), "apps", len(m.Apps))
	env := a.execEnv(m)
	// execEnv wrote the agent token's file for `coder gitaskpass`
	// (gitaskpass.go); it goes with the agent.
	if a.client != nil && a.client.SessionToken != "" {
		defer os.Remove(a.tokenFilePath())
	}
	scripts := newScriptRunner(scriptRunnerConfig{
		log: a.log, out: a.logs, env: env, scripts: m.Scripts, logDir: a.opts.LogDir, dataDir: a.opts.ScriptDataDir,
		startTimeout: a.opts.StartupScriptTimeout, killGrace: scriptKillGrace, clock: a.opts.Clock,
	})
	a.mu.Lock()
	a.manifest, a.scripts = m, scripts
	a.mu.Unlock()

	var wg sync.WaitGroup
	wg.Go(func() { a.reportStartup(ctx) })
	wg.Go(func() { a.runStartScripts(ctx, scripts) })
	wg.Go(func() {
		c := newMetadataCollector(a.log, currentClient{a}, env, m.Metadata, a.opts.MetadataFlushInterval)
		c.clock = a.opts.Clock
		c.run(ctx)
	})
	wg.Go(func() {
		newAppHealthChecker(appHealthConfig{log: a.log, poster: currentClient{a}, apps: m.Apps, retry: a.retry, clock: a.opts.Clock}).run(ctx)
	})
	if a.opts.PortsInterval > 0 {
		wg.Go(func() { a.reportPorts(ctx) })
	}
	a.connectLoop(ctx)
	wg.Wait()

	a.lifecycle.set(codersdk.AgentLifecycleShuttingDown)
	a.ssh.closeAll()
	a.ptys.closeAll()
	a.waitStreams(10 * time.Second)
	scripts.stopCron()
	if err := scripts.stop(reportCtx); err != nil {
		a.log.Warn("shutdown scripts failed", "err", err)
	}
	a.lifecycle.set(codersdk.AgentLifecycleOff)
	flushCtx, cancel := context.WithTimeout(reportCtx, 5*time.Second)
	defer cancel()
	a.logs.flush(flushCtx)
	a.lifecycle.wait(flushCtx)
	stopReports()
	reporters.Wait()
	return nil
}

// runStartScripts reports starting, runs the start scripts and reports
// ready, start_timeout or start_error; then it starts the cron schedules,
// as Coder's agent does.
func (a *Agent) runStartScripts(ctx context.Context, scripts *scriptRunner) {
	a.lifecycle.set(codersdk.AgentLifecycleStarting)
	began := time.Now()
	err := scripts.start(ctx)
	if ctx.Err() != nil {
		return
	}
	switch {
	case errors.Is(err, errScriptTimeout):
		a.lifecycle.set(codersdk.AgentLifecycleStartTimeout)
	case err != nil:
		a.lifecycle.set(codersdk.AgentLifecycleStartError)
	default:
		a.lifecycle.set(codersdk.AgentLifecycleReady)
	}
	if err != nil {
		a.log.Warn("start scripts failed", "err", err, "took", time.Since(began).Round(time.Millisecond))
	}
	scripts.startCron(ctx)
}

func (a *Agent) currentManifest() codersdk.AgentManifest {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.manifest
}

// currentScripts is the script runner, nil before the manifest arrived.
func (a *Agent) currentScripts() *scriptRunner {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.scripts
}

// newBackoff is the delay between attempts to reach coderd: doubling from
// ReconnectMin to ReconnectMax, with ±20% jitter to spread the agents that
// lost the same coderd.
func (a *Agent) newBackoff() *backoff.ExponentialBackOff {
	b := &backoff.ExponentialBackOff{
		InitialInterval:     a.opts.ReconnectMin,
		RandomizationFactor: 0.2,
		Multiplier:          2,
		MaxInterval:         a.opts.ReconnectMax,
	}
	b.Reset()
	return b
}

// backoffWait sleeps for b's next delay on the agent's clock (a timer
// tagged "agent", "backoff" and tags), cut short when cut is closed (nil:
// never); false when ctx ended.
func (a *Agent) backoffWait(ctx context.Context, b backoff.BackOff, cut <-chan struct{}, tags ...string) bool {
	return clockwait.Sleep(ctx, a.opts.Clock, b.NextBackOff(), cut, append([]string{"agent", "backoff"}, tags...)...)
}

// retry calls fn until it succeeds (nil), fn's error is permanent (that
// error) or ctx ends (its cause), waiting the agent's backoff between
// attempts (tagged what, as "report agent startup"). Each retry is logged
// as what failed.
func (a *Agent) retry(ctx context.Context, what string, fn func(context.Context) error) error {
	_, err := clockwait.Retry(ctx, a.opts.Clock, a.newBackoff(), func() (struct{}, error) {
		err := fn(ctx)
		if err != nil && permanent(err) {
			return struct{}{}, backoff.Permanent(err)
		}
		return struct{}{}, err
	}, func(err error, _ time.Duration) { a.log.Warn(what+" failed; retrying", "err", err) },
		"agent", "backoff", what)
	return err
}

// permanent reports whether retrying err cannot help (a bad request).
func permanent(err error) bool {
	var e *codersdk.Error
	return errors.As(err, &e) && e.StatusCode >= 400 && e.StatusCode < 500 &&
		e.StatusCode != http.StatusUnauthorized && e.StatusCode != http.StatusTooManyRequests && e.StatusCode != http.StatusRequestTimeout
}

// api is the client to call coderd with now: the agent URL's, or the
// fallback URL's while the agent uses it.
func (a *Agent) api() *codersdk.Client { return a.endpoints.client() }

// currentClient sends the metadata and app health reports to the URL the
// agent uses when each is sent.
type currentClient struct{ a *Agent }

func (c currentClient) PostAgentMetadata(ctx context.Context, req codersdk.PostAgentMetadataRequest) error {
	return c.a.api().PostAgentMetadata(ctx, req)
}

func (c currentClient) PostWorkspaceAppHealth(ctx context.Context, req codersdk.PostWorkspaceAppHealthsRequest) error {
	return c.a.api().PostWorkspaceAppHealth(ctx, req)
}

// fetchManifest asks coderd for the manifest until it answers or ctx
// ends, waiting the agent's backoff between attempts (tagged "manifest");
// attempts count towards the switch to the fallback URL.
func (a *Agent) fetchManifest(ctx context.Context) (codersdk.AgentManifest, bool) {
	m, err := clockwait.Retry(ctx, a.opts.Clock, a.newBackoff(), func() (codersdk.AgentManifest, error) {
		c := a.api()
		m, err := c.AgentManifest(ctx)
		if err != nil {
			a.endpoints.failed(c, err)
		} else {
			a.endpoints.reached(c)
		}
		return m, err
	}, func(err error, _ time.Duration) {
		if codersdk.IsStatus(err, http.StatusUnauthorized) {
			a.log.Error("coderd refuses the agent token; retrying (is the workspace deleted, or CODER_AGENT_TOKEN wrong?)", "err", err)
		} else {
			a.log.Warn("fetch agent manifest; retrying", "err", err)
		}
	}, "agent", "backoff", "manifest")
	return m, err == nil
}

func (a *Agent) reportStartup(ctx context.Context) {
	m := a.currentManifest()
	req := codersdk.PostAgentStartupRequest{
		Version: a.opts.Version, OperatingSystem: runtime.GOOS, Architecture: runtime.GOARCH,
		ExpandedDirectory: a.workDir(m),
	}
	if err := a.retry(ctx, "report agent startup", func(ctx context.Context) error { return a.api().PostAgentStartup(ctx, req) }); err != nil && ctx.Err() == nil {
		a.log.Error("report agent startup", "err", err)
	}
}

// connectLoop keeps a connection to coderd up until ctx ends, through the
// URL endpoints chooses: a switch ends the connection and the next one is
// dialed at once.
func (a *Agent) connectLoop(ctx context.Context) {
	b := a.newBackoff()
	for ctx.Err() == nil {
		c, changed := a.endpoints.current()
		began := a.opts.Clock.Now()
		connected, err := a.serveConnection(ctx, c, changed)
		if ctx.Err() != nil {
			return
		}
		if a.opts.Clock.Since(began) > time.Minute {
			b.Reset()
		}
		if !connected && a.endpoints.failed(c, err) || isClosed(changed) {
			b.Reset()
			continue
		}
		if codersdk.IsStatus(err, http.StatusUnauthorized) {
			a.log.Error("coderd refuses the agent token; retrying", "err", err)
		} else {
			a.log.Warn("connection to coderd lost; reconnecting", "url", c.URL.Redacted(), "err", err)
		}
		if !a.backoffWait(ctx, b, changed, "connect") {
			return
		}
	}
}

// isClosed reports whether ch is closed.
func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func (a *Agent) yamuxConfig() *yamux.Config {
	return relaymux.Config(a.log, a.opts.KeepAliveInterval)
}

// serveConnection dials coderd through c and serves the streams it opens
// until the connection ends, or changed is closed (the agent switches
// URLs). connected says whether the dial succeeded.
func (a *Agent) serveConnection(ctx context.Context, c *codersdk.Client, changed <-chan struct{}) (connected bool, err error) {
	timeout := connectDialTimeout
	if c == a.endpoints.preferred && a.endpoints.fallback != nil {
		timeout = preferredDialTimeout
	}
	dialCtx, cancel := context.WithTimeout(ctx, timeout)
	conn, err := c.ConnectAgent(dialCtx)
	cancel()
	if err != nil {
		return false, err // it names the URL
	}
	a.endpoints.reached(c)
	mux, err := yamux.Server(relayconn.CoalescedYamuxConn(conn), a.yamuxConfig())
	if err != nil {
		_ = conn.Close()
		return true, fmt.Errorf("start relay session: %w", err)
	}
	defer mux.Close()
	session, endSession := context.WithCancel(ctx)
	defer endSession()
	stop := context.AfterFunc(session, func() { _ = mux.Close() })
	defer stop()
	go func() {
		select {
		case <-changed:
			endSession()
		case <-session.Done():
		}
	}()
	a.runSpares(session, c)
	a.log.Info("connected to coderd", "url", c.URL.Redacted())
	// A lifecycle report lost while coderd was away is sent again.
	a.lifecycle.resend()
	for {
		stream, err := mux.AcceptStream()
		if err != nil {
			if isClosed(changed) {
				return true, errors.New("the agent switched URLs")
			}
			if errors.Is(err, yamux.ErrSessionShutdown) {
				return true, errors.New("coderd closed the connection")
			}
			return true, err
		}
		a.streams.Go(func() { a.handleStream(ctx, stream) })
	}
}

// waitStreams waits, up to limit, for the goroutines serving user
// connections to end (SSH sessions, web terminals and TCP forwards are
// closed by then); one that does not is logged, not waited for forever.
func (a *Agent) waitStreams(limit time.Duration) {
	if !waitGroupWithin(&a.streams, limit) {
		a.log.Warn("user connections still open at shutdown", "waited", limit)
	}
}

// waitGroupWithin waits for wg for up to limit and reports whether it
// finished. The goroutine it waits in ends when wg does.
func waitGroupWithin(wg *sync.WaitGroup, limit time.Duration) bool {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return true
	case <-time.After(limit):
		return false
	}
}
