package codersdk

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"
)

// PushTemplateRequest uploads a template folder (as a tar) as a new version
// and makes it the template's active version, creating the template when it
// does not exist yet. It is what `coder templates create/push` and the
// appliance's first-boot template import do.
type PushTemplateRequest struct {
	// Organization defaults to "default".
	Organization string
	Name         string
	// Tar is the template folder, packed (see internal/templatetar).
	Tar         io.Reader
	VersionName string
	Message     string
	Tags        map[string]string
	// VariableValues set the template's Terraform variables.
	VariableValues []VariableValue
	// MustBeNew fails when the template already exists.
	MustBeNew bool
	// Logs receives the import job's log lines as they arrive (optional).
	Logs func(ProvisionerJobLog)
	// Pending is called once when the job is still pending after
	// PendingAfter (default 2s), so a caller can say why (optional).
	Pending      func(ProvisionerJob)
	PendingAfter time.Duration
}

// PushTemplateResult is the template and the version that is now active.
type PushTemplateResult struct {
	Template Template
	Version  TemplateVersion
	Created  bool
}

// ErrTemplateExists is returned by PushTemplate with MustBeNew.
var ErrTemplateExists = errors.New("template already exists")

// PushTemplate uploads, imports (following the job's logs) and activates a
// template version. It returns an error when the import fails.
func (c *Client) PushTemplate(ctx context.Context, req PushTemplateRequest) (PushTemplateResult, error) {
	org := req.Organization
	if org == "" {
		org = "default"
	}
	var res PushTemplateResult
	existing, err := c.TemplateByName(ctx, org, req.Name)
	switch {
	case err == nil && req.MustBeNew:
		return res, fmt.Errorf("%w: %q", ErrTemplateExists, req.Name)
	case err != nil && !IsStatus(err, http.StatusNotFound):
		return res, err
	}
	up, err := c.Upload(ctx, req.Tar)
	if err != nil {
		return res, fmt.Errorf("upload template %s: %w", req.Name, err)
	}
	version, err := c.CreateTemplateVersion(ctx, org, CreateTemplateVersionRequest{
		Name: req.VersionName, Message: req.Message, TemplateID: existing.ID, StorageMethod: "file", FileID: up.ID,
		Provisioner: "terraform", Tags: req.Tags, UserVariableValues: req.VariableValues,
	})
	if err != nil {
		return res, err
	}
	res.Version = version
	job, err := c.WaitJob(ctx, version.Job, func(ctx context.Context, after int64, fn func(ProvisionerJobLog) error) error {
		return c.TemplateVersionLogs(ctx, version.ID, after, true, fn)
	}, func(ctx context.Context) (ProvisionerJob, error) {
		v, err := c.TemplateVersion(ctx, version.ID)
		return v.Job, err
	}, req.Logs, req.Pending, req.PendingAfter)
	if err != nil {
		return res, fmt.Errorf("import template version %s: %w", version.Name, err)
	}
	res.Version.Job = job
	if existing.ID == "" {
		t, err := c.CreateTemplate(ctx, org, CreateTemplateRequest{Name: req.Name, TemplateVersionID: version.ID})
		if err != nil {
			return res, err
		}
		res.Template, res.Created = t, true
		return res, nil
	}
	if err := c.UpdateActiveTemplateVersion(ctx, existing.ID, UpdateActiveTemplateVersion{ID: version.ID}); err != nil {
		return res, err
	}
	res.Template = existing
	res.Template.ActiveVersionID = version.ID
	return res, nil
}

// jobReconnectFor is how long WaitJob keeps trying to reach coderd again
// after a broken connection.
const jobReconnectFor = 30 * time.Second

// retryable reports whether a call that failed with err should be made
// again: a transport error (not coderd's answer), within jobReconnectFor of
// the first failure in a row (*since, set here), after a short pause.
func retryable(ctx context.Context, err error, since *time.Time) bool {
	var apiErr *Error
	if errors.As(err, &apiErr) || ctx.Err() != nil {
		return false
	}
	if since.IsZero() {
		*since = time.Now()
	}
	if time.Since(*since) > jobReconnectFor {
		return false
	}
	select {
	case <-ctx.Done():
		return false
	case <-time.After(500 * time.Millisecond):
		return true
	}
}

// WaitJob follows a job's logs until it ends and returns it; an error when
// it did not succeed. pending is called once if the job still waits after
// pendingAfter.
func (c *Client) WaitJob(ctx context.Context, job ProvisionerJob,
	follow func(ctx context.Context, after int64, fn func(ProvisionerJobLog) error) error,
	refresh func(ctx context.Context) (ProvisionerJob, error),
	logs func(ProvisionerJobLog), pending func(ProvisionerJob), pendingAfter time.Duration) (ProvisionerJob, error) {
	if pending != nil && job.Status == ProvisionerJobPending {
		if pendingAfter <= 0 {
			pendingAfter = 2 * time.Second
		}
		// The watch is cancelled and waited for on return, so pending is
		// never called after WaitJob has returned.
		watchCtx, stop := context.WithCancel(ctx)
		watched := make(chan struct{})
		defer func() { stop(); <-watched }()
		go func() {
			defer close(watched)
			select {
			case <-watchCtx.Done():
				return
			case <-time.After(pendingAfter):
			}
			if j, err := refresh(watchCtx); err == nil && j.Status == ProvisionerJobPending {
				pending(j)
			}
		}()
	}
	// A broken connection (the replica behind a load balancer went away)
	// is followed again from the last line seen, for up to
	// jobReconnectFor without progress; coderd's own refusals end the wait.
	// A follow that ends while the job is still running (a replica shutting
	// down answers its long requests) is followed again too.
	var after int64
	var failingSince time.Time
	var j ProvisionerJob
	for {
		err := follow(ctx, after, func(l ProvisionerJobLog) error {
			after, failingSince = l.ID, time.Time{}
			if logs != nil {
				logs(l)
			}
			return nil
		})
		if err != nil {
			if !retryable(ctx, err, &failingSince) {
				return job, fmt.Errorf("follow job logs: %w", err)
			}
			continue
		}
		for {
			if j, err = refresh(ctx); err == nil {
				break
			}
			if !retryable(ctx, err, &failingSince) {
				return j, err
			}
		}
		if !j.Status.Active() {
			break
		}
		select {
		case <-ctx.Done():
			return j, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	switch j.Status {
	case ProvisionerJobSucceeded:
		return j, nil
	case ProvisionerJobCanceled:
		return j, errors.New("the job was canceled")
	}
	return j, fmt.Errorf("the job %s: %s", j.Status, j.Error)
}
