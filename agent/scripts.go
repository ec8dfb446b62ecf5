package agent

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/coder/quartz"
	"github.com/robfig/cron/v3"

	"airgapcoder/codersdk"
)

// The script runner runs a manifest's scripts (coder_script resources and
// the agent's startup_script and shutdown_script, which coderd converts to
// scripts) as Coder's agent does:
//
//   - on start, every RunOnStart script, all at once; the agent is ready
//     when they have all exited 0;
//   - SSH logins wait for the StartBlocksLogin ones (see session.waitForLogin);
//   - once the start scripts are done, every script with a Cron schedule
//     (six fields, seconds first, as the provider validates it) on that
//     schedule, a run being skipped while the previous one still runs;
//   - on shutdown, every RunOnStop script, all at once.
//
// A script runs as `$SHELL -c SCRIPT` in the workspace's folder with the
// agent's environment plus CODER_SCRIPT_DATA_DIR (a folder of its own) and
// CODER_SCRIPT_BIN_DIR (a folder on every PATH the agent sets). Each line
// it writes goes to coderd (stdout at level info, stderr at level error,
// Source = its LogSourceID) and to its log file: LogPath, relative to the
// log folder (the temporary folder by default, as the provider documents),
// else coder-script-<LogSourceID>.log there. The script leads a process
// group of its own; what it leaves running in the background after it exits
// keeps running and logging. A script that runs past its timeout, or is
// still running when the agent stops, gets SIGTERM on its whole group and
// SIGKILL after a grace period. (Not SIGHUP: an agent started under nohup
// passes on an ignored SIGHUP to its scripts, which then never stop before
// the grace ends.)

// errScriptTimeout marks a script stopped because it ran past its timeout.
var errScriptTimeout = errors.New("script timed out")

// scriptCronParser reads cron schedules as the provider validates them.
var scriptCronParser = cron.NewParser(cron.Second | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.DowOptional | cron.Descriptor)

// scriptOutput receives what scripts write (the agent's logSender).
type scriptOutput interface {
	add(source, level, line string)
}

// scriptRunnerConfig is what a scriptRunner needs.
type scriptRunnerConfig struct {
	log     *slog.Logger
	out     scriptOutput
	env     execEnv
	scripts []codersdk.AgentScript
	// logDir holds relative log paths.
	logDir string
	// dataDir holds each script's CODER_SCRIPT_DATA_DIR and the shared
	// CODER_SCRIPT_BIN_DIR (dataDir/bin).
	dataDir string
	// startTimeout stops RunOnStart scripts that have no timeout of their
	// own (zero: none).
	startTimeout time.Duration
	// killGrace is how long a stopped script has between SIGTERM and
	// SIGKILL.
	killGrace time.Duration
	// clock schedules the cron runs (nil: the real clock).
	clock quartz.Clock
}

type scriptRunner struct {
	cfg scriptRunnerConfig

	// loginDone is closed once every StartBlocksLogin script has finished;
	// loginFailed tells whether one of them failed.
	loginDone   chan struct{}
	closeLogin  sync.Once
	loginFailed atomic.Bool

	mu sync.Mutex
	// cronStarted is set by startCron, which schedules once; cronCancel
	// ends the schedules and their runs, which cronRuns counts.
	cronStarted bool
	cronCancel  context.CancelFunc
	cronRuns    sync.WaitGroup
}

func newScriptRunner(cfg scriptRunnerConfig) *scriptRunner {
	if cfg.clock == nil {
		cfg.clock = quartz.NewReal()
	}
	r := &scriptRunner{cfg: cfg, loginDone: make(chan struct{})}
	blocking := false
	for _, s := range cfg.scripts {
		blocking = blocking || (s.RunOnStart && s.StartBlocksLogin)
	}
	if !blocking {
		r.closeLogin.Do(func() { close(r.loginDone) })
	}
	return r
}

// start runs the RunOnStart scripts concurrently and waits for them. The
// error joins each failure; it wraps errScriptTimeout when a script timed
// out.
func (r *scriptRunner) start(ctx context.Context) error {
	var all, blocking sync.WaitGroup
	errs := make([]error, len(r.cfg.scripts))
	for i, s := range r.cfg.scripts {
		if !s.RunOnStart {
			continue
		}
		if s.StartBlocksLogin {
			blocking.Add(1)
		}
		all.Go(func() {
			timeout := seconds(s.TimeoutSeconds)
			if timeout == 0 {
				timeout = r.cfg.startTimeout
			}
			errs[i] = r.run(ctx, s, timeout)
			if s.StartBlocksLogin {
				if errs[i] != nil {
					r.loginFailed.Store(true)
				}
				blocking.Done()
			}
		})
	}
	go func() {
		blocking.Wait()
		r.closeLogin.Do(func() { close(r.loginDone) })
	}()
	all.Wait()
	return errors.Join(errs...)
}

// stop runs the RunOnStop scripts concurrently and waits for them.
func (r *scriptRunner) stop(ctx context.Context) error {
	var wg sync.WaitGroup
	errs := make([]error, len(r.cfg.scripts))
	for i, s := range r.cfg.scripts {
		if s.RunOnStop {
			wg.Go(func() { errs[i] = r.run(ctx, s, seconds(s.TimeoutSeconds)) })
		}
	}
	wg.Wait()
	return errors.Join(errs...)
}

// startCron schedules the scripts that have a Cron schedule until ctx ends
// or stopCron is called, on the runner's clock (timers tagged "agent",
// "cron"). A run still going at the next occurrence skips that occurrence.
// A schedule the agent cannot read is reported in the script's log.
func (r *scriptRunner) startCron(ctx context.Context) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cronStarted || ctx.Err() != nil {
		return
	}
	r.cronStarted = true
	ctx, cancel := context.WithCancel(ctx)
	r.cronCancel = cancel
	for _, s := range r.cfg.scripts {
		if strings.TrimSpace(s.Cron) == "" {
			continue
		}
		sched, err := scriptCronParser.Parse(s.Cron)
		if err != nil {
			r.cfg.out.add(s.LogSourceID, codersdk.LogLevelError,
				fmt.Sprintf("coder agent: script %q is not scheduled: its cron %q is not six fields (seconds first): %v", s.DisplayName, s.Cron, err))
			continue
		}
		r.cronRuns.Go(func() { r.runCron(ctx, s, sched) })
	}
}

// runCron runs s at each occurrence of sched until ctx ends, skipping an
// occurrence while the previous run still goes.
func (r *scriptRunner) runCron(ctx context.Context, s codersdk.AgentScript, sched cron.Schedule) {
	var running atomic.Bool
	for {
		// A schedule without CRON_TZ is in the agent's local time zone.
		now := r.cfg.clock.Now().In(time.Local)
		t := r.cfg.clock.NewTimer(sched.Next(now).Sub(now), "agent", "cron")
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		if running.CompareAndSwap(false, true) {
			r.cronRuns.Go(func() {
				defer running.Store(false)
				_ = r.run(ctx, s, seconds(s.TimeoutSeconds))
			})
		}
	}
}

// stopCron stops scheduling, stops the runs in progress and waits for them.
func (r *scriptRunner) stopCron() {
	r.mu.Lock()
	cancel := r.cronCancel
	r.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	r.cronRuns.Wait()
}

func seconds(n int32) time.Duration { return time.Duration(n) * time.Second }

// run runs one script to its end, its timeout (zero: none) or ctx's end.
func (r *scriptRunner) run(ctx context.Context, s codersdk.AgentScript, timeout time.Duration) error {
	out := r.newScriptLog(s)
	defer out.writers.Done()
	name := s.DisplayName
	if name == "" {
		name = "script " + s.LogSourceID
	}
	began := time.Now()
	cmd, drained, err := r.startScript(s, out)
	if err != nil {
		out.line(codersdk.LogLevelError, fmt.Sprintf("coder agent: start %s: %v", name, err))
		return fmt.Errorf("start %s: %w", name, err)
	}
	r.cfg.log.Info("script started", "script", name, "pid", cmd.Process.Pid, "dir", cmd.Dir)
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	var expired <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		expired = t.C
	}
	select {
	case err = <-waited:
	case <-expired:
		out.line(codersdk.LogLevelError, fmt.Sprintf("coder agent: %s ran longer than its timeout of %s and was stopped", name, timeout))
		r.stopGroup(cmd.Process, waited)
		r.cfg.log.Warn("script timed out", "script", name, "timeout", timeout)
		return fmt.Errorf("%s: %w after %s", name, errScriptTimeout, timeout)
	case <-ctx.Done():
		out.line(codersdk.LogLevelWarn, fmt.Sprintf("coder agent: %s was stopped because the agent is shutting down", name))
		r.stopGroup(cmd.Process, waited)
		return fmt.Errorf("%s: %w", name, ctx.Err())
	}
	// What the script wrote before it exited is part of its run; a
	// background process it left holding the pipes does not delay the end
	// for longer than outputGrace.
	select {
	case <-drained:
	case <-time.After(outputGrace):
	}
	took := time.Since(began).Round(time.Millisecond)
	if code := exitCode(err); code != 0 {
		out.line(codersdk.LogLevelError, fmt.Sprintf("coder agent: %s exited with code %d after %s", name, code, took))
		r.cfg.log.Warn("script failed", "script", name, "exit_code", code, "took", took)
		return fmt.Errorf("%s exited with code %d", name, code)
	}
	r.cfg.log.Info("script finished", "script", name, "took", took)
	return nil
}

// outputGrace is how long a script's end waits for the last of its output
// once the script itself has exited.
const outputGrace = 250 * time.Millisecond

// startScript starts s in a process group of its own, its output read
// line by line into out for as long as anything writes it; drained is
// closed when both output pipes are at their end.
func (r *scriptRunner) startScript(s codersdk.AgentScript, out *scriptLog) (_ *exec.Cmd, drained <-chan struct{}, _ error) {
	dataDir := filepath.Join(r.cfg.dataDir, safeFileName(s.LogSourceID))
	binDir := filepath.Join(r.cfg.dataDir, "bin")
	for _, d := range []string{dataDir, binDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			r.cfg.log.Warn("create script folder", "dir", d, "err", err)
		}
	}
	cmd := r.cfg.env.command(s.Script, "CODER_SCRIPT_DATA_DIR="+dataDir, "CODER_SCRIPT_BIN_DIR="+binDir)
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		_ = outR.Close()
		_ = outW.Close()
		return nil, nil, err
	}
	cmd.Stdout, cmd.Stderr = outW, errW
	detach(cmd)
	err = cmd.Start()
	_ = outW.Close()
	_ = errW.Close()
	var readers sync.WaitGroup
	for _, c := range []struct {
		level string
		r     *os.File
	}{{codersdk.LogLevelInfo, outR}, {codersdk.LogLevelError, errR}} {
		out.writers.Add(1)
		readers.Go(func() {
			defer out.writers.Done()
			out.copyLines(c.level, c.r)
		})
	}
	done := make(chan struct{})
	go func() { readers.Wait(); close(done) }()
	if err != nil {
		return nil, nil, fmt.Errorf("with %s: %w", cmd.Path, err)
	}
	return cmd, done, nil
}

// stopGroup sends SIGTERM to the group p leads, waits for p for the grace
// period, then kills what is left of the group.
func (r *scriptRunner) stopGroup(p *os.Process, waited <-chan error) {
	_ = signalGroup(p, syscall.SIGTERM)
	t := time.NewTimer(r.cfg.killGrace)
	defer t.Stop()
	select {
	case <-waited:
	case <-t.C:
		_ = signalGroup(p, syscall.SIGKILL)
		<-waited
	}
	// Children that outlived their leader go too.
	_ = signalGroup(p, syscall.SIGKILL)
}

// scriptLog writes one run's lines to coderd and to its log file, which
// closes when every writer is done: the run and the readers of the
// script's output.
type scriptLog struct {
	source  string
	out     scriptOutput
	writers sync.WaitGroup

	mu   sync.Mutex
	file *os.File
}

func (r *scriptRunner) newScriptLog(s codersdk.AgentScript) *scriptLog {
	l := &scriptLog{source: s.LogSourceID, out: r.cfg.out}
	path := r.logPath(s)
	err := os.MkdirAll(filepath.Dir(path), 0o700)
	if err == nil {
		l.file, err = os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	}
	if err != nil {
		r.cfg.log.Warn("open script log file", "path", path, "err", err)
		l.out.add(l.source, codersdk.LogLevelWarn, fmt.Sprintf("coder agent: this script's output is not written to %s: %v", path, err))
	}
	l.writers.Add(1) // the run; released by run
	go func() {
		l.writers.Wait()
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.file != nil {
			_ = l.file.Close()
			l.file = nil
		}
	}()
	return l
}

// logPath is where a script's output is written: its LogPath (~ and
// $VARIABLES expanded, relative to the log folder), else
// coder-script-<LogSourceID>.log in the log folder.
func (r *scriptRunner) logPath(s codersdk.AgentScript) string {
	p := s.LogPath
	if p == "" {
		p = "coder-script-" + safeFileName(s.LogSourceID) + ".log"
	}
	if p == "~" || strings.HasPrefix(p, "~/") {
		if home, err := os.UserHomeDir(); err == nil {
			p = filepath.Join(home, p[1:])
		}
	}
	p = os.Expand(p, func(name string) string { return lookupEnv(r.cfg.env.env, name) })
	if !filepath.IsAbs(p) {
		p = filepath.Join(r.cfg.logDir, p)
	}
	return p
}

// lookupEnv returns the last value of name in env.
func lookupEnv(env []string, name string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(env[i], name+"="); ok {
			return v
		}
	}
	return ""
}

// safeFileName keeps s usable as one path element.
func safeFileName(s string) string {
	s = strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.':
			return r
		}
		return '_'
	}, s)
	if s == "" || s == "." || s == ".." {
		return "script"
	}
	return s
}

// line sends one line to coderd and appends it to the log file.
func (l *scriptLog) line(level, text string) {
	text = strings.ToValidUTF8(strings.ReplaceAll(text, "\x00", ""), "\uFFFD")
	l.out.add(l.source, level, text)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.file != nil {
		_, _ = l.file.WriteString(text + "\n")
	}
}

// copyLines sends what r carries line by line until it ends; a line longer
// than 64 KiB is sent in pieces.
func (l *scriptLog) copyLines(level string, r io.ReadCloser) {
	defer r.Close()
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		b, err := br.ReadSlice('\n')
		if len(b) > 0 {
			l.line(level, strings.TrimRight(string(b), "\r\n"))
		}
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
			return
		}
	}
}
