package cli_test

import (
	"fmt"
	"io"
	"os/exec"
	"strings"
	"testing"
	"time"

	"airgapcoder/coderd"
	"airgapcoder/coderd/coderdtest"
	"airgapcoder/codersdk"
	"airgapcoder/internal/syncbuf"
	"airgapcoder/internal/testwait"
)

// TestScheduleCLI is issue 35's acceptance through the built binary, on
// real workspaces (the process template, real agents) and a coderd whose
// scheduler ticks every second:
//
//   - `coder create --stop-after 1m` with no activity stops by itself
//     within its deadline plus one tick;
//   - one with an open `coder ssh` session that types keeps running past
//     its first deadline;
//   - `coder schedule start` a minute ahead starts a stopped workspace;
//   - `coder schedule stop|extend|show`, `coder list` and `coder show`
//     show and change the schedule.
//
// Two replicas starting a workspace once is TestAutostartTwoReplicasBinary
// (two `coder server` processes, schedule_replicas_test.go) and, in
// process, TestAutostartTwoReplicas in package coderd.
func TestScheduleCLI(t *testing.T) {
	t.Parallel()
	const tick = time.Second
	d := coderdtest.NewWithProvisionersOptions(t, coderBinary(t), coderdtest.Options{Lifecycle: coderd.LifecycleOptions{Tick: tick}},
		coderdtest.RealDaemon{Name: "a"}, coderdtest.RealDaemon{Name: "b"}, coderdtest.RealDaemon{Name: "c"})
	admin, _ := d.CreateFirstUser(t)
	env := signedInEnv(t, admin)
	base := t.TempDir()
	mustRun(t, env, "templates", "create", "process", "--directory", "../examples/templates/process", "-y", "--variable", "base_dir="+base)

	t.Run("idle workspace stops", func(t *testing.T) {
		t.Parallel()
		mustRun(t, env, "create", "idle", "--template", "process", "-y", "--stop-after", "1m")
		t.Cleanup(func() { _, _, _ = run(t, env, "stop", "idle", "-y") })
		w := showWorkspace(t, env, "idle")
		if w.TTLMillis == nil || *w.TTLMillis != time.Minute.Milliseconds() || w.LatestBuild.Deadline == nil {
			t.Fatalf("after create --stop-after 1m: ttl_ms %v, deadline %v", w.TTLMillis, w.LatestBuild.Deadline)
		}
		deadline := *w.LatestBuild.Deadline
		if list := mustRun(t, env, "list"); !strings.Contains(list, "STOPS AFTER") || !strings.Contains(list, "1m") {
			t.Errorf("coder list shows no autostop:\n%s", list)
		}
		if show := mustRun(t, env, "show", "idle"); !strings.Contains(show, "stops 1m after start or last use (deadline ") {
			t.Errorf("coder show shows no deadline:\n%s", show)
		}
		stop := waitBuild(t, env, "idle", time.Until(deadline)+30*time.Second, func(b codersdk.WorkspaceBuild) bool {
			return b.Transition == codersdk.WorkspaceTransitionStop
		})
		if stop.Reason != codersdk.BuildReasonAutostop || stop.CreatedAt.After(deadline.Add(tick+2*time.Second)) || stop.CreatedAt.Before(deadline) {
			t.Errorf("stop build: reason %s, queued %s; want autostop within a tick after the deadline %s", stop.Reason, stop.CreatedAt, deadline)
		}
		waitBuild(t, env, "idle", time.Minute, func(b codersdk.WorkspaceBuild) bool { return b.Status == codersdk.WorkspaceStatusStopped })
	})

	t.Run("typing in ssh keeps it running", func(t *testing.T) {
		t.Parallel()
		mustRun(t, env, "create", "busy", "--template", "process", "-y", "--stop-after", "1m", "--start-at", "09:00 Mon-Fri Europe/Berlin")
		t.Cleanup(func() { _, _, _ = run(t, env, "stop", "busy", "-y") })
		w := showWorkspace(t, env, "busy")
		if w.AutostartSchedule == nil || *w.AutostartSchedule != "CRON_TZ=Europe/Berlin 0 9 * * Mon-Fri" {
			t.Errorf("create --start-at: autostart_schedule %v", w.AutostartSchedule)
		}
		first := *w.LatestBuild.Deadline
		cmd := exec.Command(coderBinary(t), "ssh", "busy", "--", "sh", "-c", `while read l; do echo "got $l"; done`)
		cmd.Env = env
		var out, errOut syncbuf.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		ended := make(chan error, 1)
		go func() { ended <- cmd.Wait() }()
		t.Cleanup(func() {
			_ = stdin.Close()
			select {
			case <-ended:
			case <-time.After(10 * time.Second):
				_ = cmd.Process.Kill()
				<-ended
			}
		})
		until := first.Add(15 * time.Second)
		for i := 0; time.Now().Before(until); i++ {
			if _, err := io.WriteString(stdin, fmt.Sprintf("line %d\n", i)); err != nil {
				t.Fatalf("write to coder ssh: %v\nstderr: %s", err, errOut.String())
			}
			time.Sleep(5 * time.Second) //nolint:forbidigo // paces the client: a person typing past a deadline the real server's wall clock keeps
		}
		w = showWorkspace(t, env, "busy")
		if w.LatestBuild.Transition != codersdk.WorkspaceTransitionStart || w.LatestBuild.Deadline == nil || !w.LatestBuild.Deadline.After(first) {
			t.Fatalf("15s past the first deadline %s with ssh open: latest build %s (%s), deadline %v; want running with a later deadline",
				first, w.LatestBuild.Transition, w.LatestBuild.Status, w.LatestBuild.Deadline)
		}
		if !strings.Contains(out.String(), "got line 1") {
			t.Errorf("the ssh session did not echo what was typed: %q (stderr %q)", out.String(), errOut.String())
		}
	})

	t.Run("schedule start a minute ahead", func(t *testing.T) {
		t.Parallel()
		mustRun(t, env, "create", "morning", "--template", "process", "-y")
		t.Cleanup(func() { _, _, _ = run(t, env, "stop", "morning", "-y") })
		mustRun(t, env, "stop", "morning", "-y")
		at := time.Now().UTC().Add(10 * time.Second).Truncate(time.Minute).Add(time.Minute)
		out := mustRun(t, env, "schedule", "start", "morning", at.Format("15:04"), "UTC")
		if !strings.Contains(out, "starts at "+at.Format("15:04")+" daily (UTC)") {
			t.Errorf("coder schedule start: %q", out)
		}
		var rows []map[string]any
		decodeJSON(t, "schedule show", mustRun(t, env, "schedule", "show", "morning", "-o", "json"), &rows)
		if len(rows) != 1 || rows[0]["starts_at"] != at.Format("15:04")+" daily (UTC)" {
			t.Errorf("coder schedule show -o json: %v", rows)
		}
		start := waitBuild(t, env, "morning", time.Until(at)+60*time.Second, func(b codersdk.WorkspaceBuild) bool {
			return b.Transition == codersdk.WorkspaceTransitionStart && b.BuildNumber == 3
		})
		if start.Reason != codersdk.BuildReasonAutostart || start.CreatedAt.Before(at) || start.CreatedAt.After(at.Add(tick+2*time.Second)) {
			t.Errorf("start build: reason %s, queued %s; want autostart within a tick after %s", start.Reason, start.CreatedAt, at)
		}
		waitBuild(t, env, "morning", time.Minute, func(b codersdk.WorkspaceBuild) bool { return b.Status == codersdk.WorkspaceStatusRunning })

		// Autostop set on the running workspace, extended, then removed.
		mustRun(t, env, "schedule", "stop", "morning", "2h")
		if w := showWorkspace(t, env, "morning"); w.LatestBuild.Deadline == nil || time.Until(*w.LatestBuild.Deadline) < 119*time.Minute {
			t.Errorf("after schedule stop 2h: deadline %v, want 2h from now", w.LatestBuild.Deadline)
		}
		mustRun(t, env, "schedule", "extend", "morning", "5h")
		if w := showWorkspace(t, env, "morning"); w.LatestBuild.Deadline == nil || time.Until(*w.LatestBuild.Deadline) < 299*time.Minute {
			t.Errorf("after schedule extend 5h: deadline %v, want 5h from now", w.LatestBuild.Deadline)
		}
		mustRun(t, env, "schedule", "stop", "morning", "manual")
		mustRun(t, env, "schedule", "start", "morning", "manual")
		if w := showWorkspace(t, env, "morning"); w.LatestBuild.Deadline != nil || w.TTLMillis != nil || w.AutostartSchedule != nil {
			t.Errorf("after manual: deadline %v, ttl %v, autostart %v; want none", w.LatestBuild.Deadline, w.TTLMillis, w.AutostartSchedule)
		}
	})

	t.Run("usage errors", func(t *testing.T) {
		t.Parallel()
		for _, args := range [][]string{
			{"schedule", "start", "nope", "25:00"},
			{"schedule", "stop", "nope", "soon"},
			{"schedule", "extend", "nope"},
			{"create", "x", "--template", "process", "--stop-after", "forever"},
		} {
			_, stderr, code := run(t, env, args...)
			if code != 2 || stderr == "" {
				t.Errorf("coder %s: exit %d, stderr %q; want 2 with a message", strings.Join(args, " "), code, stderr)
			}
		}
	})
}

// waitBuild polls the workspace until its latest build satisfies ok and
// returns that build.
func waitBuild(t *testing.T, env []string, name string, timeout time.Duration, ok func(codersdk.WorkspaceBuild) bool) codersdk.WorkspaceBuild {
	t.Helper()
	var b codersdk.WorkspaceBuild
	testwait.For(t, timeout, "workspace "+name+": the build awaited", func() (bool, string) {
		b = showWorkspace(t, env, name).LatestBuild
		return ok(b), fmt.Sprintf("latest build #%d %s %s (reason %s)", b.BuildNumber, b.Transition, b.Status, b.Reason)
	})
	return b
}
