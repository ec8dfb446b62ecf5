package provisionerd_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"airgapcoder/coderd/coderdtest"
	"airgapcoder/codersdk"
	"airgapcoder/internal/testprovider"
	"airgapcoder/internal/testwait"
	"airgapcoder/provisionerd"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(coderdtest.Main(m), coderdtest.LeakOptions()...) }

type harness struct {
	deployment *coderdtest.Deployment
	owner      *codersdk.Client
	member     *codersdk.Client
}

func newHarness(t *testing.T) *harness {
	d := coderdtest.New(t, coderdtest.Options{ProvisionerPSK: "psk", JobHeartbeatTimeout: 3 * time.Second})
	owner, _ := d.CreateFirstUser(t)
	member, _ := d.CreateUser(t, owner, "member")
	return &harness{deployment: d, owner: owner, member: member}
}

// startDaemon runs a real daemon in this process until the test ends.
func (h *harness) startDaemon(t *testing.T, name string, tags map[string]string, mirror string) *provisionerd.Daemon {
	t.Helper()
	return h.startDaemonIn(t, t.TempDir(), name, tags, mirror)
}

// startDaemonIn runs a daemon whose work dir is workDir; an empty mirror
// means the official provider's test mirror.
func (h *harness) startDaemonIn(t *testing.T, workDir, name string, tags map[string]string, mirror string) *provisionerd.Daemon {
	t.Helper()
	if mirror == "" {
		mirror = testprovider.Mirror(t)
	}
	c := h.deployment.Client()
	c.ProvisionerPSK = "psk"
	d, err := provisionerd.New(provisionerd.Options{
		Client: c, Name: name, Tags: tags, Version: "test", TerraformPath: terraformPath(t), ProviderMirror: mirror,
		WorkDir: workDir, AcquireWait: 2 * time.Second, HeartbeatInterval: 500 * time.Millisecond, CancelGrace: 5 * time.Second,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Register(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = d.Run(ctx) }()
	t.Cleanup(func() { cancel(); wg.Wait() })
	return d
}

func waitJob(t *testing.T, get func() (codersdk.ProvisionerJob, error), timeout time.Duration) codersdk.ProvisionerJob {
	t.Helper()
	var j codersdk.ProvisionerJob
	testwait.For(t, timeout, "the job to end", func() (bool, string) {
		var err error
		j, err = get()
		if err != nil {
			t.Fatal(err)
		}
		return !j.Status.Active(), fmt.Sprintf("job %s still %s", j.ID, j.Status)
	})
	return j
}

func importTemplate(t *testing.T, h *harness, name string, files map[string]string, tags map[string]string) (codersdk.TemplateVersion, codersdk.Template) {
	t.Helper()
	return importTemplateWith(t, h, name, files, codersdk.CreateTemplateVersionRequest{Tags: tags})
}

// importTemplateWith is importTemplate with the version's request (its
// tags and Terraform variable values).
func importTemplateWith(t *testing.T, h *harness, name string, files map[string]string, req codersdk.CreateTemplateVersionRequest) (codersdk.TemplateVersion, codersdk.Template) {
	t.Helper()
	ctx := context.Background()
	v := coderdtest.UploadVersionRequest(t, h.owner, files, req)
	j := waitJob(t, func() (codersdk.ProvisionerJob, error) {
		v, err := h.owner.TemplateVersion(ctx, v.ID)
		return v.Job, err
	}, 60*time.Second)
	if j.Status != codersdk.ProvisionerJobSucceeded {
		t.Fatalf("import: got %s (%s), want succeeded", j.Status, j.Error)
	}
	tpl, err := h.owner.CreateTemplate(ctx, "default", codersdk.CreateTemplateRequest{Name: name, TemplateVersionID: v.ID})
	if err != nil {
		t.Fatal(err)
	}
	v, _ = h.owner.TemplateVersion(ctx, v.ID)
	return v, tpl
}

func buildAndWait(t *testing.T, c *codersdk.Client, b codersdk.WorkspaceBuild) codersdk.WorkspaceBuild {
	t.Helper()
	ctx := context.Background()
	waitJob(t, func() (codersdk.ProvisionerJob, error) {
		nb, err := c.WorkspaceBuild(ctx, b.ID)
		return nb.Job, err
	}, 90*time.Second)
	nb, err := c.WorkspaceBuild(ctx, b.ID)
	if err != nil {
		t.Fatal(err)
	}
	return nb
}

const dataTemplate = coderTF + `
data "coder_parameter" "greeting" {
  name        = "greeting"
  type        = "string"
  default     = "hello"
  description = "What the workspace says."
  mutable     = true
}

data "coder_parameter" "size" {
  name = "size"
  type = "number"
}

resource "terraform_data" "home" {
  input = "${data.coder_parameter.greeting.value} ${data.coder_parameter.size.value}"
  provisioner "local-exec" {
    command = "echo provisioning $GREETING"
    environment = { GREETING = data.coder_parameter.greeting.value }
  }
}

output "said" {
  value = terraform_data.home.output
}
`

// TestWorkspaceLifecycle runs real terraform and the official provider
// through the whole lifecycle: import records the coder_parameters, builds
// apply with the previous state and the parameter values, stop and delete
// destroy what start created.
func TestWorkspaceLifecycle(t *testing.T) {
	h := newHarness(t)
	workDir := t.TempDir()
	h.startDaemonIn(t, workDir, "d1", nil, "")
	ctx := context.Background()
	v, tpl := importTemplate(t, h, "data", map[string]string{"main.tf": dataTemplate}, nil)
	if len(v.Parameters) != 2 || v.Parameters[0].Name != "greeting" || v.Parameters[0].DefaultValue != "hello" || v.Parameters[1].Name != "size" || !v.Parameters[1].Required || v.Parameters[1].Type != "number" {
		t.Fatalf("parameters: got %+v", v.Parameters)
	}

	if _, err := h.member.CreateWorkspace(ctx, codersdk.Me, codersdk.CreateWorkspaceRequest{TemplateID: tpl.ID, Name: "nosize"}); !codersdk.IsStatus(err, 400) {
		t.Fatalf("workspace without a required parameter: got %v, want 400", err)
	}
	w, err := h.member.CreateWorkspace(ctx, codersdk.Me, codersdk.CreateWorkspaceRequest{TemplateID: tpl.ID, Name: "ws",
		RichParameterValues: []codersdk.WorkspaceBuildParameter{{Name: "size", Value: "3"}, {Name: "greeting", Value: "hi-there"}}})
	if err != nil {
		t.Fatal(err)
	}
	b := buildAndWait(t, h.member, w.LatestBuild)
	if b.Status != codersdk.WorkspaceStatusRunning {
		t.Fatalf("start: got %s (%s)", b.Status, b.Job.Error)
	}
	var logs []string
	if err := h.member.WorkspaceBuildLogs(ctx, b.ID, 0, false, func(l codersdk.ProvisionerJobLog) error {
		logs = append(logs, l.Stage+": "+l.Output)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	all := strings.Join(logs, "\n")
	for _, want := range []string{"Initializing terraform", "Applying: ", "provisioning hi-there", "Apply complete!"} {
		if !strings.Contains(all, want) {
			t.Errorf("build logs lack %q:\n%s", want, all)
		}
	}
	if len(b.Resources) != 1 || b.Resources[0].Type != "terraform_data" || b.Resources[0].Name != "home" {
		t.Fatalf("resources: got %+v", b.Resources)
	}
	state, err := h.member.WorkspaceBuildState(ctx, b.ID)
	if err != nil || !strings.Contains(string(state), `"hi-there 3"`) {
		t.Fatalf("state: got %s, %v", state, err)
	}

	for _, tr := range []codersdk.WorkspaceTransition{codersdk.WorkspaceTransitionStop, codersdk.WorkspaceTransitionStart, codersdk.WorkspaceTransitionDelete} {
		nb, err := h.member.CreateWorkspaceBuild(ctx, w.ID, codersdk.CreateWorkspaceBuildRequest{Transition: tr})
		if err != nil {
			t.Fatal(err)
		}
		nb = buildAndWait(t, h.member, nb)
		if nb.Job.Status != codersdk.ProvisionerJobSucceeded {
			t.Fatalf("%s: got %s (%s)", tr, nb.Status, nb.Job.Error)
		}
		if tr == codersdk.WorkspaceTransitionDelete {
			st, _ := h.member.WorkspaceBuildState(ctx, nb.ID)
			if strings.Contains(string(st), "terraform_data") {
				t.Fatalf("state after delete still holds resources: %s", st)
			}
		}
	}
	w, err = h.member.Workspace(ctx, w.ID)
	if err != nil || w.LatestBuild.Status != codersdk.WorkspaceStatusDeleted {
		t.Fatalf("after delete: got %s, %v", w.LatestBuild.Status, err)
	}
	// Work dirs are removed after each job; only the plugin cache stays.
	entries, err := os.ReadDir(workDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), "plugin-cache-") {
			t.Errorf("left behind in the daemon's work dir: %s", e.Name())
		}
	}
	daemons, _ := h.owner.ProvisionerDaemons(ctx)
	if len(daemons) != 1 || daemons[0].Name != "d1" || daemons[0].LastSeenAt == nil {
		t.Fatalf("daemons: got %+v", daemons)
	}
}

// TestProviderNotInMirror: an import that needs a provider the mirror
// lacks is refused by the preflight, naming the provider, the mirror and the
// bundle.yaml lines.
func TestProviderNotInMirror(t *testing.T) {
	h := newHarness(t)
	mirror := t.TempDir()
	h.startDaemon(t, "d1", nil, mirror)
	v := coderdtest.UploadVersion(t, h.owner, "", map[string]string{"main.tf": `
terraform {
  required_providers {
    null = { source = "hashicorp/null" }
  }
}
resource "null_resource" "x" {}
`}, nil)
	j := waitJob(t, func() (codersdk.ProvisionerJob, error) {
		v, err := h.owner.TemplateVersion(context.Background(), v.ID)
		return v.Job, err
	}, 60*time.Second)
	if j.Status != codersdk.ProvisionerJobFailed {
		t.Fatalf("got %s, want failed", j.Status)
	}
	// The import's preflight refuses it before terraform init, naming the
	// mirror and what to add.
	for _, want := range []string{"provider registry.terraform.io/hashicorp/null (main.tf:7)", "does not hold", "the provider mirror " + mirror,
		"providers:\n  - source: registry.terraform.io/hashicorp/null"} {
		if !strings.Contains(j.Error, want) {
			t.Errorf("error %q does not say %q", j.Error, want)
		}
	}
}

// TestCancelRunningBuild: cancel sends SIGINT to terraform and the build
// ends canceled, long before the sleep it was running would have.
func TestCancelRunningBuild(t *testing.T) {
	h := newHarness(t)
	h.startDaemon(t, "d1", nil, "")
	ctx := context.Background()
	_, tpl := importTemplate(t, h, "slow", map[string]string{"main.tf": coderTF + `
data "coder_parameter" "sleep" {
  name    = "sleep"
  type    = "number"
  default = 0
}
resource "terraform_data" "slow" {
  provisioner "local-exec" {
    command = "echo sleeping; sleep ${data.coder_parameter.sleep.value}"
  }
}
`}, nil)
	w, err := h.member.CreateWorkspace(ctx, codersdk.Me, codersdk.CreateWorkspaceRequest{TemplateID: tpl.ID, Name: "ws",
		RichParameterValues: []codersdk.WorkspaceBuildParameter{{Name: "sleep", Value: "120"}}})
	if err != nil {
		t.Fatal(err)
	}
	// Wait until the sleep runs.
	testwait.For(t, 60*time.Second, "the build reaching its sleep", testwait.Bool(func() bool {
		var seen bool
		_ = h.member.WorkspaceBuildLogs(ctx, w.LatestBuild.ID, 0, false, func(l codersdk.ProvisionerJobLog) error {
			seen = seen || strings.Contains(l.Output, "sleeping")
			return nil
		})
		return seen
	}))
	start := time.Now()
	if err := h.member.CancelWorkspaceBuild(ctx, w.LatestBuild.ID); err != nil {
		t.Fatal(err)
	}
	b := buildAndWait(t, h.member, w.LatestBuild)
	if b.Status != codersdk.WorkspaceStatusCanceled {
		t.Fatalf("got %s (%s), want canceled", b.Status, b.Job.Error)
	}
	t.Logf("canceled in %s", time.Since(start))
	if time.Since(start) > 60*time.Second {
		t.Fatalf("cancel took %s", time.Since(start))
	}
}
