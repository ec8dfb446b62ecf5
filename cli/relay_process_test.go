package cli_test

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"airgapcoder/coderd/coderdtest"
	"airgapcoder/codersdk"
	"airgapcoder/internal/testwait"
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

	env := signedInEnv(t, admin)
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
	testwait.For(t, 30*time.Second, "the startup script's output in coder show", func() (bool, string) {
		show := mustRun(t, env, "show", "dev")
		return strings.Contains(show, "real agent here"), show
	})

	mustRun(t, env, "stop", "dev", "-y")
	testwait.For(t, 30*time.Second, "after stop: agent lifecycle off", func() (bool, string) {
		got, err := admin.WorkspaceAgent(context.Background(), a.ID)
		return err == nil && got.LifecycleState == codersdk.AgentLifecycleOff, fmt.Sprintf("lifecycle %q (%v)", got.LifecycleState, err)
	})
	_, stderr, code := run(t, env, "ssh", "dev", "--", "true")
	if code != 1 || !strings.Contains(stderr, "stopped") {
		t.Errorf("coder ssh into a stopped workspace: exit %d, %q", code, stderr)
	}
}
