package bench

import (
	"context"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"testing"
	"time"

	"airgapcoder/coderd/coderdtest"
	"airgapcoder/codersdk"
	"airgapcoder/internal/testprovider"
	"airgapcoder/provisionerd"
	"airgapcoder/terraform"
)

// provisionerFleet is a deployment with n real provisioner daemons waiting.
func provisionerFleet(b *testing.B, n int) (owner *codersdk.Client, stop func()) {
	b.Helper()
	d := coderdtest.New(b, coderdtest.Options{ProvisionerPSK: "psk", AgentBinariesDir: testprovider.FakeAgentDir(b)})
	owner, _ = d.CreateFirstUser(b)
	tf, err := terraform.Find(context.Background(), terraform.Options{})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{}, n)
	for i := range n {
		c := d.Client()
		c.ProvisionerPSK = "psk"
		daemon, err := provisionerd.New(provisionerd.Options{
			Client: c, Name: "bench-" + string(rune('a'+i)), TerraformPath: tf, ProviderMirror: testprovider.Mirror(b),
			WorkDir: b.TempDir(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		})
		if err != nil {
			b.Fatal(err)
		}
		go func() { _ = daemon.Run(ctx); done <- struct{}{} }()
	}
	return owner, func() {
		cancel()
		for range n {
			<-done
		}
	}
}

func waitBuild(b *testing.B, c *codersdk.Client, id string) codersdk.WorkspaceBuild {
	for {
		wb, err := c.WorkspaceBuild(context.Background(), id)
		if err != nil {
			b.Fatal(err)
		}
		if !wb.Job.Status.Active() {
			if wb.Job.Status != codersdk.ProvisionerJobSucceeded {
				b.Fatalf("build %s: %s", wb.Job.Status, wb.Job.Error)
			}
			return wb
		}
		// Not testwait: the build's time is measured at a steady 20 ms
		// resolution; testwait's interval grows to 250 ms with the wait.
		time.Sleep(20 * time.Millisecond)
	}
}

// BenchmarkProcessWorkspaceBuild measures a `process` workspace start build
// end to end (API call to succeeded: queue, template download, terraform
// init + plan + apply with our provider, state upload) against the obvious
// alternative: `terraform init && terraform apply` of the same template in a
// fresh folder by hand, with the same mirror.
func BenchmarkProcessWorkspaceBuild(b *testing.B) {
	owner, stop := provisionerFleet(b, 1)
	defer stop()
	ctx := context.Background()
	base := b.TempDir()
	files := coderdtest.TemplateFiles(b, "../examples/templates/process")
	v := coderdtest.UploadVersionRequest(b, owner, files,
		codersdk.CreateTemplateVersionRequest{UserVariableValues: []codersdk.VariableValue{{Name: "base_dir", Value: base}}})
	waitVersion(b, owner, v.ID)
	tpl, err := owner.CreateTemplate(ctx, "default", codersdk.CreateTemplateRequest{Name: "process", TemplateVersionID: v.ID})
	if err != nil {
		b.Fatal(err)
	}
	tf, _ := terraform.Find(ctx, terraform.Options{})
	rc := filepath.Join(b.TempDir(), "terraformrc")
	if err := os.WriteFile(rc, []byte(`provider_installation {
  filesystem_mirror {
    path = "`+testprovider.Mirror(b)+`"
  }
}
`), 0o600); err != nil {
		b.Fatal(err)
	}

	var ours, raw []time.Duration
	b.ResetTimer()
	for i := range b.N {
		start := time.Now()
		w, err := owner.CreateWorkspace(ctx, codersdk.Me, codersdk.CreateWorkspaceRequest{TemplateID: tpl.ID, Name: "ws" + strconv.Itoa(i)})
		if err != nil {
			b.Fatal(err)
		}
		waitBuild(b, owner, w.LatestBuild.ID)
		ours = append(ours, time.Since(start))

		b.StopTimer()
		// Stop it so the agent stand-in goes away (not measured).
		sb, err := owner.CreateWorkspaceBuild(ctx, w.ID, codersdk.CreateWorkspaceBuildRequest{Transition: codersdk.WorkspaceTransitionStop})
		if err != nil {
			b.Fatal(err)
		}
		waitBuild(b, owner, sb.ID)
		dir := b.TempDir()
		for name, content := range files {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
				b.Fatal(err)
			}
		}
		env := append(os.Environ(), "TF_CLI_CONFIG_FILE="+rc, "CHECKPOINT_DISABLE=1", "TF_IN_AUTOMATION=1",
			"CODER_AGENT_URL=http://127.0.0.1:1", "CODER_WORKSPACE_NAME=raw"+strconv.Itoa(i), "TF_VAR_base_dir="+base)
		b.StartTimer()
		start = time.Now()
		for _, args := range [][]string{{"init", "-input=false"}, {"apply", "-auto-approve", "-input=false"}} {
			cmd := exec.Command(tf, args...)
			cmd.Dir, cmd.Env = dir, env
			if out, err := cmd.CombinedOutput(); err != nil {
				b.Fatalf("terraform %v: %v\n%s", args, err, out)
			}
		}
		raw = append(raw, time.Since(start))
		b.StopTimer()
		cmd := exec.Command(tf, "destroy", "-auto-approve", "-input=false")
		cmd.Dir, cmd.Env = dir, env
		_ = cmd.Run()
		b.StartTimer()
	}
	b.StopTimer()
	ms := func(d []time.Duration) float64 { return float64(median(d).Microseconds()) / 1000 }
	b.ReportMetric(ms(ours), "build_p50_ms")
	b.ReportMetric(ms(raw), "raw_terraform_p50_ms")
	b.ReportMetric(ms(ours)/ms(raw), "build_vs_raw_terraform_ratio")
}

// BenchmarkEnqueueToProvisionerStart measures, with N real daemons waiting,
// the time from a build being queued to a daemon starting it (the job's own
// created_at and started_at, so the clocks agree).
func BenchmarkEnqueueToProvisionerStart(b *testing.B) {
	for _, n := range []int{1, 4} {
		b.Run("daemons="+strconv.Itoa(n), func(b *testing.B) {
			owner, stop := provisionerFleet(b, n)
			defer stop()
			ctx := context.Background()
			v := coderdtest.UploadVersion(b, owner, "", coderdtest.MinimalTemplate, nil)
			waitVersion(b, owner, v.ID)
			tpl, err := owner.CreateTemplate(ctx, "default", codersdk.CreateTemplateRequest{Name: "min", TemplateVersionID: v.ID})
			if err != nil {
				b.Fatal(err)
			}
			var lat []time.Duration
			b.ResetTimer()
			for i := range b.N {
				w, err := owner.CreateWorkspace(ctx, codersdk.Me, codersdk.CreateWorkspaceRequest{TemplateID: tpl.ID, Name: "w" + strconv.Itoa(i)})
				if err != nil {
					b.Fatal(err)
				}
				wb := waitBuild(b, owner, w.LatestBuild.ID)
				lat = append(lat, wb.Job.StartedAt.Sub(wb.Job.CreatedAt))
			}
			b.StopTimer()
			b.ReportMetric(float64(median(lat).Microseconds())/1000, "enqueue_to_start_p50_ms")
		})
	}
}

func median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}
