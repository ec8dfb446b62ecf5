package provisionerd

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/hashicorp/terraform-config-inspect/tfconfig"
	"github.com/hashicorp/terraform-exec/tfexec"

	"airgapcoder/coderd/codersdk"
	"airgapcoder/internal/templatetar"
)

// runJob runs one job and reports its end to coderd.
func (d *Daemon) runJob(ctx context.Context, job *codersdk.AcquiredJob) {
	log := d.log.With("job", job.JobID, "type", job.Type)
	log.Info("job started", "workspace", job.WorkspaceName, "transition", job.Transition)
	start := time.Now()

	// Terraform runs under its own context: a cancel from coderd or a
	// daemon shutdown interrupts it (SIGINT, then a kill after the grace).
	jobCtx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	defer cancel(nil)
	stop := context.AfterFunc(ctx, func() { cancel(errors.New("the provisioner daemon shut down during the job")) })
	defer stop()
	logs := newJobLogs(d, job.JobID, func(reason string) { cancel(errors.New(reason)) })

	result, err := d.execute(jobCtx, job, logs)
	if err != nil && jobCtx.Err() != nil {
		err = fmt.Errorf("%w (%v)", context.Cause(jobCtx), err)
	}
	if err != nil {
		logs.Error(err.Error())
	}
	logs.Close()

	reportCtx, cancelReport := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancelReport()
	if err != nil {
		log.Warn("job failed", "err", err, "took", time.Since(start))
		if ferr := d.opts.Client.FailJob(reportCtx, d.ID(), job.JobID, codersdk.FailJobRequest{Error: err.Error(), State: result.State}); ferr != nil {
			log.Error("report job failure", "err", ferr)
		}
		return
	}
	if cerr := d.opts.Client.CompleteJob(reportCtx, d.ID(), job.JobID, result); cerr != nil {
		log.Error("report job completion", "err", cerr)
		return
	}
	log.Info("job completed", "took", time.Since(start))
}

// execute prepares the work dir and runs terraform for the job.
func (d *Daemon) execute(ctx context.Context, job *codersdk.AcquiredJob, logs *jobLogs) (codersdk.CompleteJobRequest, error) {
	var result codersdk.CompleteJobRequest
	logs.Stage("Setting up")
	archive, err := d.opts.Client.DaemonFile(ctx, d.ID(), job.FileID)
	if err != nil {
		return result, fmt.Errorf("download template: %w", err)
	}
	dir, err := os.MkdirTemp(d.opts.WorkDir, "job-")
	if err != nil {
		return result, fmt.Errorf("create work dir: %w", err)
	}
	defer os.RemoveAll(dir)
	src := filepath.Join(dir, "template")
	if err := os.Mkdir(src, 0o700); err != nil {
		return result, err
	}
	if err := templatetar.Extract(bytes.NewReader(archive), src, 0); err != nil {
		return result, fmt.Errorf("unpack template: %w", err)
	}
	cache := filepath.Join(d.opts.WorkDir, "plugin-cache-"+sanitize(d.opts.Name))
	if err := os.MkdirAll(cache, 0o700); err != nil {
		return result, err
	}
	rc := filepath.Join(dir, "terraformrc")
	if err := os.WriteFile(rc, []byte(cliConfig(d.opts.ProviderMirror, cache)), 0o600); err != nil {
		return result, err
	}
	env := d.environment(job, dir, rc, cache)
	tf := func(level string) (*tfexec.Terraform, *lineWriter, *lineWriter, error) {
		t, err := tfexec.NewTerraform(src, d.opts.TerraformPath)
		if err != nil {
			return nil, nil, nil, err
		}
		if err := t.SetEnv(env); err != nil {
			return nil, nil, nil, err
		}
		out, errw := logs.Writer(codersdk.LogLevelInfo), logs.Writer(codersdk.LogLevelError)
		t.SetStdout(out)
		t.SetStderr(errw)
		_ = t.SetWaitDelay(d.opts.CancelGrace)
		return t, out, errw, nil
	}
	// run runs one terraform command with a fresh *Terraform (its writers
	// stay attached otherwise) and flushes partial lines.
	run := func(stage string, fn func(*tfexec.Terraform) error) error {
		logs.Stage(stage)
		t, out, errw, err := tf(codersdk.LogLevelInfo)
		if err != nil {
			return err
		}
		err = fn(t)
		out.Flush()
		errw.Flush()
		return err
	}

	var initOut bytes.Buffer
	err = run("Initializing terraform", func(t *tfexec.Terraform) error {
		t.SetStderr(multiWriter(logs.Writer(codersdk.LogLevelError), &initOut))
		return t.Init(ctx)
	})
	if err != nil {
		return result, d.explainInit(err, initOut.String())
	}

	switch job.Type {
	case codersdk.ProvisionerJobTypeTemplateVersionImport:
		return d.importTemplate(ctx, src, run)
	case codersdk.ProvisionerJobTypeWorkspaceBuild:
		return d.build(ctx, job, src, run, logs)
	}
	return result, fmt.Errorf("unknown job type %q", job.Type)
}

// environment is everything terraform and our provider see: nothing from
// the daemon's own environment but PATH.
func (d *Daemon) environment(job *codersdk.AcquiredJob, dir, rc, cache string) map[string]string {
	transition := string(job.Transition)
	if job.Type == codersdk.ProvisionerJobTypeTemplateVersionImport || transition == "" {
		transition = string(codersdk.WorkspaceTransitionStart)
	}
	if transition == string(codersdk.WorkspaceTransitionDelete) {
		transition = string(codersdk.WorkspaceTransitionStop)
	}
	tags, _ := json.Marshal(job.Tags)
	env := map[string]string{
		"PATH":                          os.Getenv("PATH"),
		"HOME":                          dir,
		"TF_CLI_CONFIG_FILE":            rc,
		"TF_PLUGIN_CACHE_DIR":           cache,
		"CHECKPOINT_DISABLE":            "1",
		"CODER_URL":                     d.opts.AccessURL,
		"CODER_WORKSPACE_ID":            job.WorkspaceID,
		"CODER_WORKSPACE_NAME":          job.WorkspaceName,
		"CODER_WORKSPACE_OWNER":         job.WorkspaceOwner,
		"CODER_WORKSPACE_OWNER_ID":      job.WorkspaceOwnerID,
		"CODER_WORKSPACE_TRANSITION":    transition,
		"CODER_WORKSPACE_TEMPLATE_NAME": job.TemplateName,
		"CODER_PROVISIONER_TAGS":        string(tags),
	}
	if d.opts.CACertFile != "" {
		env["SSL_CERT_FILE"] = d.opts.CACertFile
		env["CODER_CA_CERT_FILE"] = d.opts.CACertFile
	}
	if d.opts.AgentCACertFile != "" {
		env["CODER_CA_CERT_FILE"] = d.opts.AgentCACertFile
	}
	return env
}

var providerNotFoundRe = regexp.MustCompile(`(?s)(?:Failed to query available provider packages|Failed to install provider).*?provider ([\w.\-]+/[\w.\-]+/[\w.\-]+)`)

// explainInit adds one line to terraform's own message when a provider is
// missing from the mirror, the usual cause of an offline init failure.
func (d *Daemon) explainInit(err error, stderr string) error {
	m := providerNotFoundRe.FindStringSubmatch(stderr)
	if m == nil {
		return fmt.Errorf("terraform init: %w", err)
	}
	where := d.opts.ProviderMirror
	if where == "" {
		where = "(no mirror configured: set --provider-mirror)"
	}
	return fmt.Errorf("terraform init: %w\nprovider %s is not in the provider mirror %s: add it to the bundle's providers (or the mirror folder) and try again", err, m[1], where)
}

// importTemplate plans the template with default values and records its
// variables as parameters and its resources.
func (d *Daemon) importTemplate(ctx context.Context, src string, run func(string, func(*tfexec.Terraform) error) error) (codersdk.CompleteJobRequest, error) {
	var result codersdk.CompleteJobRequest
	module, diags := tfconfig.LoadModule(src)
	if diags.HasErrors() {
		return result, fmt.Errorf("parse template: %w", diags.Err())
	}
	var planOpts []tfexec.PlanOption
	for _, name := range sortedVariableNames(module) {
		v := module.Variables[name]
		result.Parameters = append(result.Parameters, parameterOf(v))
		if v.Required {
			planOpts = append(planOpts, tfexec.Var(name+"="+placeholder(v.Type)))
		}
	}
	planFile := filepath.Join(filepath.Dir(src), "import.tfplan")
	planOpts = append(planOpts, tfexec.Out(planFile), tfexec.Refresh(false))
	if err := run("Planning", func(t *tfexec.Terraform) error {
		_, err := t.Plan(ctx, planOpts...)
		return err
	}); err != nil {
		return result, fmt.Errorf("terraform plan: %w", err)
	}
	var resources []codersdk.ProvisionedResource
	err := run("Reading plan", func(t *tfexec.Terraform) error {
		t.SetStdout(io.Discard) // the plan JSON is not a log
		plan, err := t.ShowPlanFile(ctx, planFile)
		if err != nil {
			return err
		}
		if plan.PlannedValues != nil {
			resources = resourcesOf(plan.PlannedValues.RootModule, false)
		}
		return nil
	})
	if err != nil {
		return result, fmt.Errorf("read plan: %w", err)
	}
	result.Resources = resources
	return result, nil
}

// build applies (or destroys) the workspace with the previous state.
func (d *Daemon) build(ctx context.Context, job *codersdk.AcquiredJob, src string, run func(string, func(*tfexec.Terraform) error) error, logs *jobLogs) (codersdk.CompleteJobRequest, error) {
	var result codersdk.CompleteJobRequest
	statePath := filepath.Join(src, "terraform.tfstate")
	if len(job.State) > 0 {
		if err := os.WriteFile(statePath, job.State, 0o600); err != nil {
			return result, err
		}
	}
	var vars []string
	for _, p := range job.RichParameterValues {
		vars = append(vars, p.Name+"="+p.Value)
	}
	readState := func() {
		if b, err := os.ReadFile(statePath); err == nil {
			result.State = b
		}
	}
	if job.Transition == codersdk.WorkspaceTransitionDelete {
		opts := []tfexec.DestroyOption{}
		for _, v := range vars {
			opts = append(opts, tfexec.Var(v))
		}
		err := run("Destroying", func(t *tfexec.Terraform) error { return t.Destroy(ctx, opts...) })
		readState()
		if err != nil {
			return result, fmt.Errorf("terraform destroy: %w", err)
		}
		return result, nil
	}
	planFile := filepath.Join(filepath.Dir(src), "build.tfplan")
	planOpts := []tfexec.PlanOption{tfexec.Out(planFile)}
	for _, v := range vars {
		planOpts = append(planOpts, tfexec.Var(v))
	}
	if err := run("Planning", func(t *tfexec.Terraform) error {
		_, err := t.Plan(ctx, planOpts...)
		return err
	}); err != nil {
		return result, fmt.Errorf("terraform plan: %w", err)
	}
	err := run("Applying", func(t *tfexec.Terraform) error { return t.Apply(ctx, tfexec.DirOrPlan(planFile)) })
	readState()
	if err != nil {
		return result, fmt.Errorf("terraform apply: %w", err)
	}
	err = run("Reading state", func(t *tfexec.Terraform) error {
		t.SetStdout(io.Discard)
		state, err := t.ShowStateFile(ctx, statePath)
		if err != nil {
			return err
		}
		if state.Values != nil {
			result.Resources = resourcesOf(state.Values.RootModule, job.Transition == codersdk.WorkspaceTransitionStart)
		}
		return nil
	})
	if err != nil {
		return result, fmt.Errorf("read state: %w", err)
	}
	for _, r := range result.Resources {
		for _, a := range r.Agents {
			logs.Info(fmt.Sprintf("agent %s (%s/%s) on %s.%s", a.Name, a.OperatingSystem, a.Architecture, r.Type, r.Name))
		}
	}
	return result, nil
}

func sanitize(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '/' || r == os.PathSeparator || r == ' ' {
			return '_'
		}
		return r
	}, s)
}
