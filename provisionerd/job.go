package provisionerd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/hashicorp/terraform-exec/tfexec"

	"airgapcoder/codersdk"
	"airgapcoder/internal/clockwait"
	"airgapcoder/internal/templatetar"
)

// runJob runs one job and reports its end to coderd.
func (d *Daemon) runJob(ctx context.Context, job *codersdk.AcquiredJob) {
	log := d.log.With("job", job.JobID, "type", job.Type)
	log.Info("job started", "workspace", job.WorkspaceName, "transition", job.Transition)
	clock := d.opts.Clock
	start := clock.Now("provisionerd", "job")

	// Terraform runs under its own context: a cancel from coderd or a
	// daemon shutdown interrupts it (SIGINT, then a kill after the grace).
	jobCtx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	defer cancel(nil)
	stop := context.AfterFunc(ctx, func() { cancel(errors.New("the provisioner daemon shut down during the job")) })
	defer stop()
	logs := newJobLogs(d, job.JobID, func(reason string) { cancel(errors.New(reason)) })
	d.setJobLogs(logs)

	result, err := d.execute(jobCtx, job, logs)
	if err != nil && jobCtx.Err() != nil {
		err = fmt.Errorf("%w (%v)", context.Cause(jobCtx), err)
	}
	if err != nil {
		logs.Error(err.Error())
	}
	d.setJobLogs(nil)
	logs.Close()

	if err != nil {
		log.Warn("job failed", "err", err, "took", clock.Since(start, "provisionerd", "job"))
		if ferr := d.report(ctx, log, "failure", func(ctx context.Context) error {
			return d.opts.Client.FailJob(ctx, d.ID(), job.JobID, codersdk.FailJobRequest{Error: err.Error(), State: result.State})
		}); ferr != nil {
			log.Error("report job failure", "err", ferr)
		}
		return
	}
	if cerr := d.report(ctx, log, "completion", func(ctx context.Context) error {
		return d.opts.Client.CompleteJob(ctx, d.ID(), job.JobID, result)
	}); cerr != nil {
		log.Error("report job completion", "err", cerr)
		return
	}
	log.Info("job completed", "took", clock.Since(start, "provisionerd", "job"))
}

// reportFor bounds how long a job's end is offered to coderd: past its
// heartbeat timeout (a minute by default) coderd fails the job itself, with
// a message, and refuses the report.
const reportFor = 2 * time.Minute

// report sends a job's end to coderd, again with backoff while coderd
// cannot take it (its database restarting, a replica going away): the
// job's result, its terraform state above all, must not be lost to a
// moment's outage.
func (d *Daemon) report(ctx context.Context, log *slog.Logger, what string, send func(context.Context) error) error {
	ctx, cancel := d.withTimeout(context.WithoutCancel(ctx), reportFor, "report")
	defer cancel()
	return d.retryTransient(ctx, log, "report job "+what, reportFor, send)
}

// fetchFor bounds how long a job waits for its template's files while
// coderd cannot serve them: less than coderd's heartbeat timeout, so the
// job still ends with this daemon's message rather than coderd's.
const fetchFor = 45 * time.Second

// attemptFor bounds one request to coderd within retryTransient.
const attemptFor = 30 * time.Second

// retryTransient calls send until it succeeds, with backoff for up to
// limit while coderd answers 5xx or cannot be reached (its database
// restarting, a replica going away). A refusal (4xx: the job is no longer
// this daemon's, the file does not exist) is not tried again. The waits,
// the limit and each attempt's deadline (attemptFor) are on the daemon's
// clock; the delays are backoff's defaults (from 0.5s, ×1.5, jittered
// ±50%), so that daemons do not come back to a restarted coderd at once.
// When ctx ends it returns ctx's cause.
func (d *Daemon) retryTransient(ctx context.Context, log *slog.Logger, what string, limit time.Duration, send func(context.Context) error) error {
	clock := d.opts.Clock
	b := clockwait.Within(backoff.NewExponentialBackOff(), clock, clock.Now("provisionerd", "retryBackoff"), limit)
	_, err := clockwait.Retry(ctx, clock, b, func() (struct{}, error) {
		attempt, cancel := d.withTimeout(ctx, attemptFor, "attempt")
		err := send(attempt)
		timedOut := errors.Is(context.Cause(attempt), context.DeadlineExceeded)
		cancel()
		if err != nil && timedOut {
			err = fmt.Errorf("no answer within %s: %w", attemptFor, err)
		}
		var apiErr *codersdk.Error
		if errors.As(err, &apiErr) && apiErr.StatusCode < http.StatusInternalServerError {
			return struct{}{}, backoff.Permanent(err)
		}
		return struct{}{}, err
	}, func(err error, next time.Duration) { log.Warn(what+"; retrying", "err", err, "in", next) },
		"provisionerd", "retryBackoff")
	return err
}

// execute prepares the work dir and runs terraform for the job.
func (d *Daemon) execute(ctx context.Context, job *codersdk.AcquiredJob, logs *jobLogs) (codersdk.CompleteJobRequest, error) {
	var result codersdk.CompleteJobRequest
	logs.Stage("Setting up")
	var archive []byte
	err := d.retryTransient(ctx, d.log.With("job", job.JobID), "download template", fetchFor, func(ctx context.Context) (err error) {
		archive, err = d.opts.Client.DaemonFile(ctx, d.ID(), job.FileID)
		return err
	})
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
	if err := checkRetiredProvider(src); err != nil {
		return result, err
	}
	cache := filepath.Join(d.opts.WorkDir, "plugin-cache-"+sanitize(d.opts.Name))
	if err := os.MkdirAll(cache, 0o700); err != nil {
		return result, err
	}
	hosts, err := d.moduleHosts(ctx)
	if err != nil {
		return result, err
	}
	if d.opts.ModuleMirror != "" {
		hosts = moduleHostsFor(hosts)
	}
	rc := filepath.Join(dir, "terraformrc")
	if err := os.WriteFile(rc, []byte(cliConfig(d.opts.ProviderMirror, cache, d.opts.ModuleMirror, hosts)), 0o600); err != nil {
		return result, err
	}
	r := &tfRun{d: d, ctx: ctx, job: job, dir: dir, src: src, env: d.environment(job, dir, rc, cache), logs: logs}

	switch job.Type {
	case codersdk.ProvisionerJobTypeTemplateVersionImport:
		return r.importTemplate()
	case codersdk.ProvisionerJobTypeWorkspaceBuild:
		return r.build()
	}
	return result, fmt.Errorf("unknown job type %q", job.Type)
}

// tfRun runs the terraform commands of one job.
type tfRun struct {
	d    *Daemon
	ctx  context.Context
	job  *codersdk.AcquiredJob
	dir  string // the job's folder
	src  string // the template, terraform's working dir
	env  map[string]string
	logs *jobLogs
}

// run runs one terraform command as a stage of the job, with a fresh
// *Terraform (its writers stay attached otherwise), and flushes partial
// lines.
func (r *tfRun) run(stage string, fn func(*tfexec.Terraform) error) error {
	r.logs.Stage(stage)
	t, err := tfexec.NewTerraform(r.src, r.d.opts.TerraformPath)
	if err != nil {
		return err
	}
	if err := t.SetEnv(r.env); err != nil {
		return err
	}
	out, errw := r.logs.Writer(codersdk.LogLevelInfo), r.logs.Writer(codersdk.LogLevelError)
	t.SetStdout(out)
	t.SetStderr(errw)
	_ = t.SetWaitDelay(r.d.opts.CancelGrace)
	err = fn(t)
	out.Flush()
	errw.Flush()
	return err
}

// init runs terraform init.
func (r *tfRun) init() error {
	var initOut bytes.Buffer
	err := r.run("Initializing terraform", func(t *tfexec.Terraform) error {
		t.SetStderr(io.MultiWriter(r.logs.Writer(codersdk.LogLevelError), &initOut))
		return t.Init(r.ctx)
	})
	if err != nil {
		return r.d.explainInit(err, initOut.String())
	}
	return nil
}

// vars are the template variables' values as -var arguments.
func (r *tfRun) vars() []string {
	vars := make([]string, 0, len(r.job.VariableValues))
	for _, v := range r.job.VariableValues {
		vars = append(vars, v.Name+"="+v.Value)
	}
	return vars
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

// build applies (or destroys) the workspace with the previous state.
func (r *tfRun) build() (codersdk.CompleteJobRequest, error) {
	var result codersdk.CompleteJobRequest
	ctx, job := r.ctx, r.job
	statePath := filepath.Join(r.src, "terraform.tfstate")
	if len(job.State) > 0 {
		if err := os.WriteFile(statePath, job.State, 0o600); err != nil {
			return result, err
		}
	}
	if err := r.init(); err != nil {
		return result, err
	}
	readState := func() {
		if b, err := os.ReadFile(statePath); err == nil {
			result.State = b
		}
	}
	if job.Transition == codersdk.WorkspaceTransitionDelete {
		var opts []tfexec.DestroyOption
		for _, v := range r.vars() {
			opts = append(opts, tfexec.Var(v))
		}
		err := r.run("Destroying", func(t *tfexec.Terraform) error { return t.Destroy(ctx, opts...) })
		readState()
		if err != nil {
			return result, fmt.Errorf("terraform destroy: %w", err)
		}
		return result, nil
	}
	planFile := filepath.Join(r.dir, "build.tfplan")
	planOpts := []tfexec.PlanOption{tfexec.Out(planFile)}
	for _, v := range r.vars() {
		planOpts = append(planOpts, tfexec.Var(v))
	}
	if err := r.run("Planning", func(t *tfexec.Terraform) error {
		_, err := t.Plan(ctx, planOpts...)
		return err
	}); err != nil {
		return result, fmt.Errorf("terraform plan: %w", err)
	}
	err := r.run("Applying", func(t *tfexec.Terraform) error { return t.Apply(ctx, tfexec.DirOrPlan(planFile)) })
	readState()
	if err != nil {
		return result, fmt.Errorf("terraform apply: %w", err)
	}
	err = r.run("Reading state", func(t *tfexec.Terraform) error {
		t.SetStdout(io.Discard) // the state holds tokens: it is not a log
		state, err := t.ShowStateFile(ctx, statePath)
		if err != nil {
			return err
		}
		if state.Values != nil {
			result.Resources, err = convertResources(state.Values.RootModule, nil, job.Transition == codersdk.WorkspaceTransitionStart)
		}
		return err
	})
	if err != nil {
		return result, fmt.Errorf("read state: %w", err)
	}
	for _, res := range result.Resources {
		for _, a := range res.Agents {
			r.logs.Info(fmt.Sprintf("agent %s (%s/%s) on %s.%s", a.Name, a.OperatingSystem, a.Architecture, res.Type, res.Name))
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
