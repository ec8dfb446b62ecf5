package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/quartz"

	"airgapcoder/codersdk"
	"airgapcoder/internal/testtier"
	"airgapcoder/internal/testwait"
)

// fakeOutput records what scripts write, as the logSender would send it.
type fakeOutput struct {
	lines *recorder[codersdk.AgentLogInput]
}

func newFakeOutput() *fakeOutput { return &fakeOutput{lines: newRecorder[codersdk.AgentLogInput](0)} }

func (o *fakeOutput) add(source, level, line string) {
	o.lines.add(codersdk.AgentLogInput{Source: source, Level: level, Output: line})
}

// linesOf returns the output of source in lines.
func linesOf(lines []codersdk.AgentLogInput, source string) []string {
	var out []string
	for _, l := range lines {
		if l.Source == source {
			out = append(out, l.Output)
		}
	}
	return out
}

// of returns the lines of source.
func (o *fakeOutput) of(source string) []string { return linesOf(o.lines.all(), source) }

func (o *fakeOutput) all() []codersdk.AgentLogInput { return o.lines.all() }

// waitFor waits until cond holds for the lines of source, failing after
// timeout.
func (o *fakeOutput) waitFor(t *testing.T, timeout time.Duration, source string, cond func(lines []string) bool) []string {
	t.Helper()
	var lines []string
	o.lines.waitFor(t, timeout, "lines of "+source, func(all []codersdk.AgentLogInput) bool {
		lines = linesOf(all, source)
		return cond(lines)
	})
	return lines
}

func hasPrefix(lines []string, prefix string) bool {
	return slices.ContainsFunc(lines, func(l string) bool { return strings.HasPrefix(l, prefix) })
}

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// testRunner returns a runner of scripts in a fresh folder, with the
// environment FROM_MANIFEST=yes.
func testRunner(t *testing.T, scripts ...codersdk.AgentScript) (*scriptRunner, *fakeOutput, string) {
	t.Helper()
	dir := t.TempDir()
	out := newFakeOutput()
	r := newScriptRunner(scriptRunnerConfig{
		log: discardLogger(), out: out, scripts: scripts,
		env:    execEnv{shell: "/bin/sh", dir: dir, env: append(os.Environ(), "FROM_MANIFEST=yes")},
		logDir: filepath.Join(dir, "logs"), dataDir: filepath.Join(dir, "data"), killGrace: 2 * time.Second,
	})
	return r, out, dir
}

func TestScriptRunnerStartRunsScriptsConcurrently(t *testing.T) {
	// Each waits for the other's marker: run one after the other, the first
	// would time out.
	waitOther := func(mine, other string) string {
		return fmt.Sprintf("touch %s; for i in $(seq 100); do [ -e %s ] && break; sleep 0.1; done; [ -e %s ] && echo done", mine, other, other)
	}
	r, out, _ := testRunner(t,
		codersdk.AgentScript{LogSourceID: "a", DisplayName: "A", Script: waitOther("a.marker", "b.marker"), RunOnStart: true, TimeoutSeconds: 8},
		codersdk.AgentScript{LogSourceID: "b", DisplayName: "B", Script: waitOther("b.marker", "a.marker"), RunOnStart: true, TimeoutSeconds: 8},
		codersdk.AgentScript{LogSourceID: "c", DisplayName: "C", Script: "echo never", RunOnStop: true},
	)
	if err := r.start(context.Background()); err != nil {
		t.Fatalf("start: %v (lines %v)", err, out.all())
	}
	for _, src := range []string{"a", "b"} {
		if got := out.of(src); !slices.Equal(got, []string{"done"}) {
			t.Errorf("script %s wrote %q, want [done]", src, got)
		}
	}
	if got := out.of("c"); len(got) != 0 {
		t.Errorf("a stop script ran on start: %q", got)
	}
}

func TestScriptRunnerOutputEnvAndLogFiles(t *testing.T) {
	abs := filepath.Join(t.TempDir(), "abs", "script.log")
	r, out, dir := testRunner(t,
		codersdk.AgentScript{LogSourceID: "env", DisplayName: "Env", RunOnStart: true, LogPath: "sub/env.log",
			Script: `echo "manifest=$FROM_MANIFEST"; echo "pwd=$(pwd)"; [ -d "$CODER_SCRIPT_DATA_DIR" ] && echo data dir ok; echo "bin=$CODER_SCRIPT_BIN_DIR"; echo oops >&2`},
		codersdk.AgentScript{LogSourceID: "abs", DisplayName: "Abs", RunOnStart: true, LogPath: abs, Script: "echo to an absolute path"},
		codersdk.AgentScript{LogSourceID: "default", DisplayName: "Default", RunOnStart: true, Script: "echo to the default file"},
	)
	if err := r.start(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := []string{"manifest=yes", "pwd=" + dir, "data dir ok", "bin=" + filepath.Join(dir, "data", "bin"), "oops"}
	got := out.waitFor(t, 5*time.Second, "env", func(l []string) bool { return len(l) >= len(want) })
	for _, w := range want {
		if !slices.Contains(got, w) {
			t.Errorf("script output %q lacks %q", got, w)
		}
	}
	for _, l := range out.all() {
		if l.Output == "oops" && l.Level != codersdk.LogLevelError || l.Output == "manifest=yes" && l.Level != codersdk.LogLevelInfo {
			t.Errorf("line %q has level %q: want stderr at error, stdout at info", l.Output, l.Level)
		}
	}
	for _, tc := range []struct{ path, want string }{
		{filepath.Join(dir, "logs", "sub", "env.log"), "manifest=yes"},
		{abs, "to an absolute path"},
		{filepath.Join(dir, "logs", "coder-script-default.log"), "to the default file"},
	} {
		waitFile(t, tc.path, tc.want)
	}
}

// waitFile waits until path contains want (the log file is written by the
// readers of the script's output, which may end just after the script).
func waitFile(t *testing.T, path, want string) {
	t.Helper()
	testwait.For(t, 5*time.Second, fmt.Sprintf("%s containing %q", path, want), func() (bool, string) {
		b, err := os.ReadFile(path)
		return err == nil && strings.Contains(string(b), want), fmt.Sprintf("got %q (%v)", b, err)
	})
}

func TestScriptRunnerFailureAndTimeout(t *testing.T) {
	r, out, dir := testRunner(t,
		codersdk.AgentScript{LogSourceID: "fails", DisplayName: "Fails", RunOnStart: true, Script: "echo failing; exit 3"},
		codersdk.AgentScript{LogSourceID: "slow", DisplayName: "Slow", RunOnStart: true, TimeoutSeconds: 1,
			// An ignored SIGHUP, as under nohup, must not keep it running
			// until the grace ends.
			Script: "trap '' HUP; sleep 60 & echo $! > child.pid; echo started; wait"},
	)
	began := time.Now()
	err := r.start(context.Background())
	took := time.Since(began)
	if !errors.Is(err, errScriptTimeout) || !strings.Contains(err.Error(), "Fails exited with code 3") {
		t.Errorf("start: got %v, want a timeout and the failure", err)
	}
	if took > 1*time.Second+r.cfg.killGrace {
		t.Errorf("start took %s with a 1s timeout", took)
	}
	if lines := out.of("fails"); !hasPrefix(lines, "coder agent: Fails exited with code 3") {
		t.Errorf("failing script's log: %q", lines)
	}
	if lines := out.of("slow"); !hasPrefix(lines, "coder agent: Slow ran longer than its timeout of 1s and was stopped") {
		t.Errorf("slow script's log: %q", lines)
	}
	// The script's whole process group was stopped, its background child
	// included.
	b, err := os.ReadFile(filepath.Join(dir, "child.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	waitGone(t, pid)
}

// waitGone waits until pid no longer runs (gone or a zombie).
func waitGone(t *testing.T, pid int) {
	t.Helper()
	testwait.For(t, 5*time.Second, fmt.Sprintf("process %d gone", pid), func() (bool, string) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return true, ""
		}
		_, after, ok := strings.Cut(string(b), ") ")
		return ok && strings.HasPrefix(after, "Z"), "still runs: " + string(b)
	})
}

func TestScriptRunnerBackgroundProcessKeepsLogging(t *testing.T) {
	testtier.Heavy(t, "waits 3 s for a background process")
	// A script that starts a server and exits counts as done; what the
	// server writes later still arrives.
	r, out, _ := testRunner(t, codersdk.AgentScript{LogSourceID: "bg", DisplayName: "Bg", RunOnStart: true,
		Script: "(sleep 3; echo from the background) & echo script done"})
	began := time.Now()
	if err := r.start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(began); took > 2*time.Second {
		t.Errorf("start waited %s for the background process", took)
	}
	out.waitFor(t, 10*time.Second, "bg", func(l []string) bool { return slices.Contains(l, "from the background") })
}

func TestScriptRunnerLoginGate(t *testing.T) {
	r, _, _ := testRunner(t,
		codersdk.AgentScript{LogSourceID: "blocks", RunOnStart: true, StartBlocksLogin: true, Script: "sleep 0.5"},
		codersdk.AgentScript{LogSourceID: "slow", RunOnStart: true, Script: "sleep 30", TimeoutSeconds: 30},
	)
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan error, 1)
	go func() { started <- r.start(ctx) }()
	select {
	case <-r.loginDone:
		t.Fatal("login was open before the blocking script ran")
	default:
	}
	select {
	case <-r.loginDone:
	case <-time.After(10 * time.Second):
		t.Fatal("login still closed 10s after the blocking script should have finished")
	}
	if r.loginFailed.Load() {
		t.Error("the blocking script counts as failed")
	}
	select {
	case err := <-started:
		t.Fatalf("start returned (%v) while a non-blocking script still runs", err)
	default:
	}
	cancel()
	if err := <-started; !errors.Is(err, context.Canceled) {
		t.Errorf("start after cancel: %v", err)
	}

	// Without blocking scripts login is open at once.
	r, _, _ = testRunner(t, codersdk.AgentScript{LogSourceID: "x", RunOnStart: true, Script: "true"})
	select {
	case <-r.loginDone:
	default:
		t.Error("login closed without blocking scripts")
	}
}

// TestScriptRunnerCron: a script with a cron schedule runs at its
// occurrences on the agent's clock; an occurrence while the previous run
// still goes starts none (runs never overlap); a schedule the agent cannot
// read is reported; after stopCron nothing is scheduled.
func TestScriptRunnerCron(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	clock := quartz.NewMock(t).WithLogger(quartz.NoOpLogger)
	armed := clock.Trap().NewTimer("agent", "cron")
	defer armed.Close()
	r, out, dir := testRunner(t,
		codersdk.AgentScript{LogSourceID: "tick", DisplayName: "Tick", Cron: "* * * * * *", Script: "echo tick"},
		// Runs until the test creates "release": occurrences meanwhile
		// must not start another run.
		codersdk.AgentScript{LogSourceID: "slow", DisplayName: "Slow", Cron: "* * * * * *",
			Script: "if [ -e running ]; then echo OVERLAP; fi; touch running; while [ ! -e release ]; do sleep 0.02; done; rm running release; echo slow done"},
		codersdk.AgentScript{LogSourceID: "bad", DisplayName: "Bad", Cron: "*/5 * * *", Script: "echo never"},
	)
	r.cfg.clock = clock
	r.startCron(context.Background())
	// Each readable schedule arms a timer for its next occurrence, and
	// again after each.
	armedBoth := func() {
		t.Helper()
		for range 2 {
			armed.MustWait(ctx).MustRelease(ctx)
		}
	}
	occurrence := func() {
		t.Helper()
		_, w := clock.AdvanceNext()
		w.MustWait(ctx)
		armedBoth()
	}
	running := func() bool {
		_, err := os.Stat(filepath.Join(dir, "running"))
		return err == nil
	}
	release := func() {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, "release"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	armedBoth()
	if lines := out.of("bad"); !hasPrefix(lines, `coder agent: script "Bad" is not scheduled`) {
		t.Errorf("a bad schedule: lines %q", lines)
	}
	occurrence()
	out.waitFor(t, 10*time.Second, "tick", func(l []string) bool { return CountLines(l, "tick") >= 1 })
	testwait.For(t, 10*time.Second, "the slow script's first run", testwait.Bool(running))
	for range 3 {
		occurrence() // the slow run still goes: skipped
	}
	release()
	out.waitFor(t, 10*time.Second, "slow", func(l []string) bool { return CountLines(l, "slow done") >= 1 })
	// The next occurrences start it again (once its run has returned).
	testwait.For(t, 10*time.Second, "the slow script's second run", func() (bool, string) {
		occurrence()
		return running(), "not running"
	})
	release()
	lines := out.waitFor(t, 10*time.Second, "slow", func(l []string) bool { return CountLines(l, "slow done") >= 2 })
	if slices.Contains(lines, "OVERLAP") {
		t.Errorf("two runs of one cron script overlapped: %q", lines)
	}

	armed.Close()
	r.stopCron()
	n := CountLines(out.of("tick"), "tick")
	if d, ok := clock.Peek(); ok {
		t.Errorf("a timer (due in %s) outlives stopCron", d)
	}
	clock.Advance(time.Minute).MustWait(ctx)
	if m := CountLines(out.of("tick"), "tick"); m != n {
		t.Errorf("cron ran %d more times in the minute after stopCron", m-n)
	}
}

func TestScriptRunnerStop(t *testing.T) {
	r, out, dir := testRunner(t,
		codersdk.AgentScript{LogSourceID: "start", RunOnStart: true, Script: "echo start"},
		codersdk.AgentScript{LogSourceID: "stop1", RunOnStop: true, Script: "echo stopping > stopped1"},
		codersdk.AgentScript{LogSourceID: "stop2", RunOnStop: true, Script: "exit 4"},
		codersdk.AgentScript{LogSourceID: "stop3", RunOnStop: true, TimeoutSeconds: 1, Script: "sleep 60"},
	)
	err := r.stop(context.Background())
	if err == nil || !strings.Contains(err.Error(), "exited with code 4") || !errors.Is(err, errScriptTimeout) {
		t.Errorf("stop: got %v, want the failure and the timeout", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "stopped1")); err != nil {
		t.Errorf("stop script did not run: %v", err)
	}
	if got := out.of("start"); len(got) != 0 {
		t.Errorf("a start script ran on stop: %q", got)
	}
}

func TestLogPath(t *testing.T) {
	home, _ := os.UserHomeDir()
	r := newScriptRunner(scriptRunnerConfig{logDir: "/var/log/agent", env: execEnv{env: []string{"LOGS=/srv/logs"}}})
	for _, tc := range []struct{ id, path, want string }{
		{"4f6c", "", "/var/log/agent/coder-script-4f6c.log"},
		{"x", "app.log", "/var/log/agent/app.log"},
		{"x", "/abs/app.log", "/abs/app.log"},
		{"x", "~/app.log", filepath.Join(home, "app.log")},
		{"x", "$LOGS/app.log", "/srv/logs/app.log"},
		{"../../etc", "", "/var/log/agent/coder-script-.._.._etc.log"},
	} {
		if got := r.logPath(codersdk.AgentScript{LogSourceID: tc.id, LogPath: tc.path}); got != tc.want {
			t.Errorf("log path of %q: got %q, want %q", tc.path, got, tc.want)
		}
	}
}
