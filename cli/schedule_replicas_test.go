package cli_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"airgapcoder/coderd/coderdtest"
	"airgapcoder/codersdk"
)

// TestAutostartTwoReplicasBinary is issue 35's "two replicas on one
// PostgreSQL start it once (one build, not two)" through the built binary:
// two `coder server` processes on one database, each with a provisioner
// daemon and a scheduler ticking every second (the hidden
// --autobuild-poll-interval), and a stopped workspace whose autostart
// schedule falls on the next minute. Both replicas tick around that
// minute; exactly one start build is queued (build #3 after create and
// stop, reason autostart, logged by one replica only) and the workspace
// runs.
func TestAutostartTwoReplicasBinary(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const tick = time.Second
	replicas := startReplicas(t, 2, coderdtest.NewDatabase(t), "--autobuild-poll-interval", tick.String())
	client := createOwner(t, replicas[0].url)
	envFor := func(r *replicaProc) []string {
		return baseEnv(t, "CODER_URL="+r.url, "CODER_SESSION_TOKEN="+client.SessionToken)
	}
	r1, r2 := envFor(replicas[0]), envFor(replicas[1])
	if out := mustRun(t, r2, "replicas"); strings.Count(out, "http://127.0.0.1:") != 2 {
		t.Fatalf("coder replicas lists %d replicas, want 2:\n%s", strings.Count(out, "http://127.0.0.1:"), out)
	}

	mustRun(t, r1, "templates", "create", "process", "--directory", "../examples/templates/process", "-y", "--variable", "base_dir="+t.TempDir())
	mustRun(t, r1, "create", "dev", "--template", "process", "-y")
	t.Cleanup(func() { _, _, _ = run(t, r1, "stop", "dev", "-y") })
	mustRun(t, r2, "stop", "dev", "-y")

	// The next whole minute at least 10 s away: the test waits at most 70 s
	// for it (schedules are minute-granular).
	at := time.Now().UTC().Add(10 * time.Second).Truncate(time.Minute).Add(time.Minute)
	mustRun(t, r2, "schedule", "start", "dev", at.Format("15:04"), "UTC")
	started := time.Now()
	running := waitBuild(t, r1, "dev", time.Until(at)+90*time.Second, func(b codersdk.WorkspaceBuild) bool {
		return b.BuildNumber >= 3 && b.Status == codersdk.WorkspaceStatusRunning
	})
	t.Logf("the workspace ran %s after the schedule was set (%s after the occurrence at %s)",
		time.Since(started).Round(time.Millisecond), running.Job.CompletedAt.Sub(at).Round(time.Millisecond), at.Format("15:04:05"))

	// Every tick of both replicas after the occurrence has seen the
	// running workspace (not a candidate any more) by now; a second start
	// would have been queued before the first one's build ended.
	w := showWorkspace(t, r1, "dev")
	builds, err := client.WorkspaceBuilds(ctx, w.ID)
	if err != nil {
		t.Fatalf("list the builds of dev: %v", err)
	}
	var autostarts []codersdk.WorkspaceBuild
	for _, b := range builds {
		if b.Reason == codersdk.BuildReasonAutostart {
			autostarts = append(autostarts, b)
		}
	}
	if len(autostarts) != 1 || len(builds) != 3 || w.LatestBuild.BuildNumber != 3 {
		var desc []string
		for _, b := range builds {
			desc = append(desc, fmt.Sprintf("#%d %s %s (%s)", b.BuildNumber, b.Transition, b.Status, b.Reason))
		}
		t.Fatalf("two replicas: %d autostart builds of %d builds, latest #%d; want 1 of 3, latest #3: %s",
			len(autostarts), len(builds), w.LatestBuild.BuildNumber, strings.Join(desc, ", "))
	}
	if b := autostarts[0]; b.BuildNumber != 3 || b.Transition != codersdk.WorkspaceTransitionStart || b.CreatedAt.Before(at) || b.CreatedAt.After(at.Add(tick+2*time.Second)) {
		t.Errorf("autostart build: #%d %s queued %s; want #3 start within a tick after %s", b.BuildNumber, b.Transition, b.CreatedAt, at)
	}
	logged := 0
	for _, r := range replicas {
		n := strings.Count(r.proc.stderr.String(), "lifecycle: queued build")
		t.Logf("%s logged %d queued builds", r.name, n)
		logged += n
	}
	if logged != 1 {
		t.Errorf("the replicas logged %d queued autostart builds, want 1", logged)
	}
	if w.LatestBuild.Status != codersdk.WorkspaceStatusRunning {
		t.Errorf("workspace dev: %s, want running", w.LatestBuild.Status)
	}
}
