package provisionerd_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"airgapcoder/coderd/coderdtest"
	"airgapcoder/codersdk"
	"airgapcoder/internal/testprovider"
	"airgapcoder/internal/testrun"
	"airgapcoder/internal/testwait"
	"airgapcoder/provisionerd"
)

func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	// A zombie is gone for our purposes.
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	return err == nil && !strings.Contains(string(b), ") Z ")
}

// TestProcessTemplate runs examples/templates/process with real terraform
// and the official coder/coder provider, offline (the CLI config allows only the mirror): the
// agent process starts on start, is gone on stop, and delete destroys the
// state. The agent binary served to the workspace is a stand-in that stays
// up like an agent would.
func TestProcessTemplate(t *testing.T) {
	d := coderdtest.New(t, coderdtest.Options{ProvisionerPSK: "psk", AgentBinariesDir: testprovider.FakeAgentDir(t)})
	owner, _ := d.CreateFirstUser(t)
	member, _ := d.CreateUser(t, owner, "member")
	h := &harness{deployment: d, owner: owner, member: member}
	c := d.Client()
	c.ProvisionerPSK = "psk"
	daemon, err := provisionerd.New(provisionerd.Options{
		Client: c, Name: "process", TerraformPath: terraformPath(t), ProviderMirror: testprovider.Mirror(t), WorkDir: t.TempDir(),
		AcquireWait: 2 * time.Second, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	testrun.Start(t, "provisioner daemon", daemon.Run, nil)

	// base_dir is the template admin's variable, set with the version.
	base := t.TempDir()
	_, tpl := importTemplateWith(t, h, "process", coderdtest.TemplateFiles(t, "../examples/templates/process"),
		codersdk.CreateTemplateVersionRequest{UserVariableValues: []codersdk.VariableValue{{Name: "base_dir", Value: base}}})
	w, err := member.CreateWorkspace(context.Background(), codersdk.Me, codersdk.CreateWorkspaceRequest{TemplateID: tpl.ID, Name: "dev"})
	if err != nil {
		t.Fatal(err)
	}
	b := buildAndWait(t, member, w.LatestBuild)
	if b.Status != codersdk.WorkspaceStatusRunning {
		t.Fatalf("start: %s (%s)", b.Status, b.Job.Error)
	}
	if len(b.Resources) != 1 || b.Resources[0].Type != "terraform_data" || len(b.Resources[0].Agents) != 1 {
		t.Fatalf("resources: got %+v, want terraform_data.agent[0] with the agent", b.Resources)
	}
	agent := b.Resources[0].Agents[0]
	if agent.Name != "main" || agent.OperatingSystem != runtime.GOOS || agent.Architecture != runtime.GOARCH ||
		len(agent.Apps) != 1 || agent.Apps[0].Slug != "web" || agent.Apps[0].URL != "http://localhost:8080" {
		t.Fatalf("agent: got %+v", agent)
	}

	pidFile := filepath.Join(base, "member", "dev", ".coder-agent.pid")
	readPid := func() int {
		b, err := os.ReadFile(pidFile)
		if err != nil {
			t.Fatalf("pid file: %v", err)
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			t.Fatal(err)
		}
		return pid
	}
	pid := readPid()
	testwait.For(t, 30*time.Second, "the agent process to run the served agent binary", testwait.Bool(func() bool {
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		return alive(pid) && strings.Contains(string(cmdline), "sleep")
	}))

	transition := func(tr codersdk.WorkspaceTransition) codersdk.WorkspaceBuild {
		t.Helper()
		nb, err := member.CreateWorkspaceBuild(context.Background(), w.ID, codersdk.CreateWorkspaceBuildRequest{Transition: tr})
		if err != nil {
			t.Fatal(err)
		}
		nb = buildAndWait(t, member, nb)
		if nb.Job.Status != codersdk.ProvisionerJobSucceeded {
			t.Fatalf("%s: %s (%s)", tr, nb.Status, nb.Job.Error)
		}
		return nb
	}
	stopped := transition(codersdk.WorkspaceTransitionStop)
	if alive(pid) {
		t.Fatalf("agent process %d still runs after stop", pid)
	}
	if len(stopped.Resources) != 0 {
		t.Fatalf("stop build resources: got %+v, want none", stopped.Resources)
	}
	transition(codersdk.WorkspaceTransitionStart)
	pid = readPid()
	testwait.For(t, 30*time.Second, "the agent process after start", testwait.Bool(func() bool { return alive(pid) }))
	deleted := transition(codersdk.WorkspaceTransitionDelete)
	if alive(pid) {
		t.Fatalf("agent process %d still runs after delete", pid)
	}
	state, err := member.WorkspaceBuildState(context.Background(), deleted.ID)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(state), `"type": "coder_agent"`) || strings.Contains(string(state), `"terraform_data"`) {
		t.Fatalf("state after delete still has resources:\n%s", state)
	}
}
