// Package agent is the workspace agent: what `coder agent` runs inside a
// workspace. It owns the agent's end of the relay: one WebSocket to coderd
// carrying a yamux session, kept up with backoff across coderd restarts and
// network blips, in which coderd opens one stream per user connection. A
// stream of kind ssh goes to the agent's SSH server (shells with a PTY,
// exec with exit codes, SFTP, direct-tcpip), a stream of kind tcp to a port
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
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/hashicorp/yamux"

	"airgapcoder/codersdk"
	"airgapcoder/relayconn"
)

// Options configure an Agent. Client is required.
type Options struct {
	// Client reaches coderd; its SessionToken is the agent token.
	Client *codersdk.Client
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
}

// Agent is a workspace agent. Construct with New and run with Run.
type Agent struct {
	opts   Options
	log    *slog.Logger
	client *codersdk.Client
	ssh    *sshServer
	ptys   *ptyManager

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
	a := &Agent{opts: opts, log: opts.Logger, client: opts.Client}
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
		startTimeout: a.opts.StartupScriptTimeout, killGrace: scriptKillGrace,
	})
	a.mu.Lock()
	a.manifest, a.scripts = m, scripts
	a.mu.Unlock()

	var wg sync.WaitGroup
	wg.Go(func() { a.reportStartup(ctx) })
	wg.Go(func() { a.runStartScripts(ctx, scripts) })
	wg.Go(func() { newMetadataCollector(a.log, a.client, env, m.Metadata, a.opts.MetadataFlushInterval).run(ctx) })
	wg.Go(func() {
		newAppHealthChecker(appHealthConfig{log: a.log, poster: a.client, apps: m.Apps, retry: a.retry}).run(ctx)
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

// waitBackoff sleeps for b's next delay; false when ctx ended.
func waitBackoff(ctx context.Context, b backoff.BackOff) bool {
	t := time.NewTimer(b.NextBackOff())
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// retry calls fn until it succeeds, ctx ends or fn's error is permanent.
func (a *Agent) retry(ctx context.Context, what string, fn func(context.Context) error) error {
	_, err := backoff.Retry(ctx, func() (struct{}, error) {
		err := fn(ctx)
		if err != nil && permanent(err) {
			return struct{}{}, backoff.Permanent(err)
		}
		return struct{}{}, err
	},
		backoff.WithBackOff(a.newBackoff()),
		backoff.WithMaxElapsedTime(0), // until ctx ends
		backoff.WithNotify(func(err error, _ time.Duration) { a.log.Warn(what+" failed; retrying", "err", err) }),
	)
	return err
}

// permanent reports whether retrying err cannot help (a bad request).
func permanent(err error) bool {
	var e *codersdk.Error
	return errors.As(err, &e) && e.StatusCode >= 400 && e.StatusCode < 500 &&
		e.StatusCode != http.StatusUnauthorized && e.StatusCode != http.StatusTooManyRequests && e.StatusCode != http.StatusRequestTimeout
}

func (a *Agent) fetchManifest(ctx context.Context) (codersdk.AgentManifest, bool) {
	m, err := backoff.Retry(ctx, func() (codersdk.AgentManifest, error) { return a.client.AgentManifest(ctx) },
		backoff.WithBackOff(a.newBackoff()),
		backoff.WithMaxElapsedTime(0), // until ctx ends
		backoff.WithNotify(func(err error, _ time.Duration) {
			if codersdk.IsStatus(err, http.StatusUnauthorized) {
				a.log.Error("coderd refuses the agent token; retrying (is the workspace deleted, or CODER_AGENT_TOKEN wrong?)", "err", err)
			} else {
				a.log.Warn("fetch agent manifest; retrying", "err", err)
			}
		}),
	)
	return m, err == nil
}

func (a *Agent) reportStartup(ctx context.Context) {
	m := a.currentManifest()
	req := codersdk.PostAgentStartupRequest{
		Version: a.opts.Version, OperatingSystem: runtime.GOOS, Architecture: runtime.GOARCH,
		ExpandedDirectory: a.workDir(m),
	}
	if err := a.retry(ctx, "report agent startup", func(ctx context.Context) error { return a.client.PostAgentStartup(ctx, req) }); err != nil && ctx.Err() == nil {
		a.log.Error("report agent startup", "err", err)
	}
}

// connectLoop keeps a connection to coderd up until ctx ends.
func (a *Agent) connectLoop(ctx context.Context) {
	b := a.newBackoff()
	for ctx.Err() == nil {
		began := time.Now()
		err := a.serveConnection(ctx)
		if ctx.Err() != nil {
			return
		}
		if time.Since(began) > time.Minute {
			b.Reset()
		}
		if codersdk.IsStatus(err, http.StatusUnauthorized) {
			a.log.Error("coderd refuses the agent token; retrying", "err", err)
		} else {
			a.log.Warn("connection to coderd lost; reconnecting", "err", err)
		}
		if !waitBackoff(ctx, b) {
			return
		}
	}
}

func (a *Agent) yamuxConfig() *yamux.Config {
	cfg := yamux.DefaultConfig()
	cfg.LogOutput = nil
	cfg.Logger = yamuxLogger{a.log}
	cfg.KeepAliveInterval = a.opts.KeepAliveInterval
	cfg.ConnectionWriteTimeout = a.opts.KeepAliveInterval
	cfg.MaxStreamWindowSize = relayconn.StreamWindow
	cfg.StreamCloseTimeout = 30 * time.Second
	return cfg
}

// serveConnection dials coderd and serves the streams it opens until the
// connection ends.
func (a *Agent) serveConnection(ctx context.Context) error {
	dialCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	conn, err := a.client.ConnectAgent(dialCtx)
	cancel()
	if err != nil {
		return err
	}
	mux, err := yamux.Server(relayconn.CoalescedYamuxConn(conn), a.yamuxConfig())
	if err != nil {
		_ = conn.Close()
		return fmt.Errorf("start relay session: %w", err)
	}
	defer mux.Close()
	stop := context.AfterFunc(ctx, func() { _ = mux.Close() })
	defer stop()
	session, endSession := context.WithCancel(ctx)
	defer endSession()
	a.runSpares(session)
	a.log.Info("connected to coderd", "url", a.client.URL.Redacted())
	// A lifecycle report lost while coderd was away is sent again.
	a.lifecycle.resend()
	for {
		stream, err := mux.AcceptStream()
		if err != nil {
			if errors.Is(err, yamux.ErrSessionShutdown) {
				return errors.New("coderd closed the connection")
			}
			return err
		}
		a.streams.Go(func() { a.handleStream(ctx, stream) })
	}
}

// waitStreams waits, up to limit, for the goroutines serving user
// connections to end (SSH sessions, web terminals and TCP forwards are
// closed by then); one that does not is logged, not waited for forever.
func (a *Agent) waitStreams(limit time.Duration) {
	done := make(chan struct{})
	go func() {
		a.streams.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(limit):
		a.log.Warn("user connections still open at shutdown", "waited", limit)
	}
}

// yamuxLogger sends yamux's own log lines to slog at debug level.
type yamuxLogger struct{ log *slog.Logger }

func (l yamuxLogger) Print(v ...any) { l.log.Debug(strings.TrimSpace(fmt.Sprint(v...))) }
func (l yamuxLogger) Printf(format string, v ...any) {
	l.log.Debug(strings.TrimSpace(fmt.Sprintf(format, v...)))
}
func (l yamuxLogger) Println(v ...any) { l.log.Debug(strings.TrimSpace(fmt.Sprintln(v...))) }
