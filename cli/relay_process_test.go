package cli_test

import (
	"context"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"airgapcoder/coderd/coderdtest"
	"airgapcoder/codersdk"
)

// TestProcessTemplateRealAgent is the whole path with nothing stubbed:
// examples/templates/process applied by real terraform with our provider,
// its init script downloading the agent (this coder binary) from coderd and
// starting it, and coder ssh reaching the workspace through the relay; stop
// ends the agent, which reports off on its way out.
func TestProcessTemplateRealAgent(t *testing.T) {
	t.Parallel()
	d := coderdtest.NewWithProvisioners(t, coderBinary(t))
	admin, _ := d.CreateFirstUser(t)

	env := baseEnv(t, "CODER_URL="+d.URL.String(), "CODER_SESSION_TOKEN="+admin.SessionToken)
	base := t.TempDir()
	mustRun(t, env, "templates", "create", "process", "--directory", "../examples/templates/process", "-y", "--variable", "base_dir="+base)
	mustRun(t, env, "create", "dev", "--template", "process", "-y", "--parameter", "startup_script=echo real agent here")
	home := filepath.Join(base, "admin", "dev")
	t.Cleanup(func() {
		// Should a step fail, the agent process must not outlive the test.
		_, _, _ = run(t, env, "stop", "dev", "-y")
	})

	out := mustRun(t, env, "ssh", "dev", "--", `echo "$HOME"; pwd`)
	if out != home+"\n"+home+"\n" {
		t.Errorf("coder ssh into the process workspace: got %q, want its home %s twice", out, home)
	}
	w := showWorkspace(t, env, "dev")
	a := w.LatestBuild.Resources[0].Agents[0]
	if a.Status != codersdk.AgentStatusConnected || a.Version != testVersion || a.OperatingSystem != runtime.GOOS {
		t.Errorf("agent: status %s, version %q, os %s", a.Status, a.Version, a.OperatingSystem)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if show := mustRun(t, env, "show", "dev"); strings.Contains(show, "real agent here") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the startup script's output is not in coder show:\n%s", mustRun(t, env, "show", "dev"))
		}
		time.Sleep(200 * time.Millisecond)
	}

	mustRun(t, env, "stop", "dev", "-y")
	deadline = time.Now().Add(30 * time.Second)
	for {
		got, err := admin.WorkspaceAgent(context.Background(), a.ID)
		if err == nil && got.LifecycleState == codersdk.AgentLifecycleOff {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after stop: agent lifecycle %q (%v), want off", got.LifecycleState, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	_, stderr, code := run(t, env, "ssh", "dev", "--", "true")
	if code != 1 || !strings.Contains(stderr, "stopped") {
		t.Errorf("coder ssh into a stopped workspace: exit %d, %q", code, stderr)
	}
}
