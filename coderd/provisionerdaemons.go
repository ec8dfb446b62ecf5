package coderd

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/gin-gonic/gin"
	"github.com/google/uuid"

	"airgapcoder/coderd/database"
	"airgapcoder/codersdk"
)

// The server side of the provisioner protocol (see codersdk's
// provisionerdaemons.go). A daemon authenticates with the pre-shared key or a
// user's session token on every call:
//
//   - PSK: an organization daemon, with any tags but scope=user;
//   - an owner's or template admin's token: an organization daemon;
//   - any user's token with scope=user: a daemon that takes only that user's
//     scope=user jobs.

// maxAcquireWait caps how long an acquire call is held open.
const maxAcquireWait = 60 * time.Second

// daemonCaller is who is calling a daemon endpoint.
type daemonCaller struct {
	psk  bool
	user database.User
}

func (api *API) authDaemonCaller(c *gin.Context) (daemonCaller, error) {
	if psk := c.GetHeader(codersdk.ProvisionerDaemonPSKHeader); psk != "" {
		if api.opts.BuiltinProvisionerKey != "" && subtle.ConstantTimeCompare([]byte(psk), []byte(api.opts.BuiltinProvisionerKey)) == 1 {
			return daemonCaller{psk: true}, nil
		}
		if api.opts.ProvisionerPSK == "" {
			return daemonCaller{}, errorf(http.StatusUnauthorized, "", "This deployment accepts no provisioner PSK: start coder server with --provisioner-daemon-psk (CODER_PROVISIONER_DAEMON_PSK), or authenticate the daemon with a session token")
		}
		if subtle.ConstantTimeCompare([]byte(psk), []byte(api.opts.ProvisionerPSK)) != 1 {
			return daemonCaller{}, errorf(http.StatusUnauthorized, "", "Invalid provisioner PSK: it does not match the server's CODER_PROVISIONER_DAEMON_PSK")
		}
		return daemonCaller{psk: true}, nil
	}
	user, _, err := api.authenticate(c.Request.Context(), tokenFromRequest(c.Request))
	if err != nil {
		return daemonCaller{}, err
	}
	return daemonCaller{user: user}, nil
}

// mayServe reports whether the caller may run a daemon with these
// (normalized) tags.
func (dc daemonCaller) mayServe(tags map[string]string) error {
	userScope := tags[codersdk.TagScope] == codersdk.ProvisionerScopeUser
	switch {
	case dc.psk && userScope:
		return badRequest("A scope=user provisioner must authenticate with the user's session token, not the PSK")
	case dc.psk:
		return nil
	case userScope && tags[codersdk.TagOwner] == dc.user.ID:
		return nil
	case userScope:
		return forbidden()
	case can(dc.user, resProvisionerd, actCreate, ""):
		return nil
	}
	return errorf(http.StatusForbidden, "", "Only owners and template admins may run organization provisioners; add --tag scope=user to run one for yourself")
}

func convertDaemon(d database.ProvisionerDaemon, now time.Time) codersdk.ProvisionerDaemon {
	status := codersdk.ProvisionerDaemonIdle
	switch {
	case now.Sub(d.LastSeenAt) > daemonStaleAfter:
		status = codersdk.ProvisionerDaemonOffline
	case d.CurrentJobID != nil:
		status = codersdk.ProvisionerDaemonBusy
	}
	seen := d.LastSeenAt
	return codersdk.ProvisionerDaemon{
		ID: d.ID, OrganizationID: d.OrganizationID, CreatedAt: d.CreatedAt, LastSeenAt: &seen, Name: d.Name,
		Version: d.Version, Tags: displayTags(d.Tags), Provisioners: []string{"terraform"}, Status: status, CurrentJobID: d.CurrentJobID,
	}
}

func (api *API) registerProvisionerDaemon(c *gin.Context) error {
	dc, err := api.authDaemonCaller(c)
	if err != nil {
		return err
	}
	var req codersdk.RegisterProvisionerDaemonRequest
	if err := decode(c, &req); err != nil {
		return err
	}
	if req.Name == "" {
		return validation("name", "is required")
	}
	tags, err := normalizeTags(req.Tags, dc.user.ID)
	if err != nil {
		return validation("tags", err.Error())
	}
	if err := dc.mayServe(tags); err != nil {
		return err
	}
	d, err := api.db.UpsertProvisionerDaemon(c.Request.Context(), database.ProvisionerDaemon{
		OrganizationID: api.org.ID, Name: req.Name, Version: req.Version, Tags: tags,
	})
	if err != nil {
		return err
	}
	api.log.Info("provisioner daemon registered", "name", d.Name, "id", d.ID, "tags", displayTags(tags), "psk", dc.psk, "user", dc.user.Username)
	out := convertDaemon(d, api.now())
	out.JobHeartbeatTimeoutMillis = api.opts.JobHeartbeatTimeout.Milliseconds()
	c.JSON(http.StatusCreated, out)
	return nil
}

// daemonParam authenticates the caller and loads the :daemon it speaks for.
func (api *API) daemonParam(c *gin.Context) (database.ProvisionerDaemon, error) {
	dc, err := api.authDaemonCaller(c)
	if err != nil {
		return database.ProvisionerDaemon{}, err
	}
	d, err := api.db.ProvisionerDaemonByID(c.Request.Context(), c.Param("daemon"))
	if err != nil {
		return d, notFoundAs("Provisioner daemon (register again)", err)
	}
	return d, dc.mayServe(d.Tags)
}

// acquireJob hands the daemon the oldest job its tags match, waiting up to
// ?wait= (default and maximum 60s) for one to be posted. Waiters are woken by
// NOTIFY, so a new job reaches an idle daemon at once.
func (api *API) acquireJob(c *gin.Context) error {
	d, err := api.daemonParam(c)
	if err != nil {
		return err
	}
	wait := maxAcquireWait
	if s := c.Query("wait"); s != "" {
		if wait, err = time.ParseDuration(s); err != nil || wait < 0 {
			return validation("wait", "must be a duration like 30s")
		}
		wait = min(wait, maxAcquireWait)
	}
	ctx := c.Request.Context()
	wake := make(chan struct{}, 1)
	cancel := api.ps.Subscribe(database.ChannelJobPosted, func(string) {
		select {
		case wake <- struct{}{}:
		default:
		}
	})
	defer cancel()
	timer := api.opts.Clock.NewTimer(wait, "coderd", "acquireJob")
	defer timer.Stop()
	// Seen once per call, not per wake-up: every waiter wakes on every new
	// job, and a write per waiter per job would crowd the pool.
	if err := api.db.TouchProvisionerDaemon(ctx, d.ID); err != nil {
		return err
	}
	waiting := false // counted in the acquires_waiting gauge
	for {
		job, err := api.db.AcquireJob(ctx, d.OrganizationID, d.ID, d.Tags)
		if err == nil {
			out, err := api.acquiredJob(c, job)
			if err != nil {
				if database.Unavailable(err) || ctx.Err() != nil {
					// The daemon is not handed the job: put it back in the
					// queue once the database answers again, for this
					// daemon's next acquire or another's.
					api.releaseJob(job.ID, d.ID, err)
				} else {
					// Something about the job itself: fail it with the reason.
					_, _ = api.db.FinishJob(ctx, job.ID, d.ID, "prepare job for the provisioner: "+err.Error(), "")
				}
				return err
			}
			api.metrics.jobsAcquired.Inc()
			api.metrics.jobQueueWait.Observe(job.StartedAt.Sub(job.CreatedAt).Seconds())
			api.log.Info("provisioner job acquired", "job", job.ID, "type", job.Type, "daemon", d.Name)
			c.JSON(http.StatusOK, out)
			return nil
		}
		if !errors.Is(err, database.ErrNotFound) {
			return err
		}
		if !waiting {
			waiting = true
			api.metrics.jobsAwaited.Inc()
			defer api.metrics.jobsAwaited.Dec()
		}
		select {
		case <-wake:
		case <-timer.C:
			c.Status(http.StatusNoContent)
			return nil
		case <-api.closing:
			c.Status(http.StatusNoContent)
			return nil
		case <-ctx.Done():
			return nil
		}
	}
}

// releaseJob puts the job daemonID acquired back in the queue, in the
// background and again with backoff while the database does not answer
// (it is restarting), for up to half the job heartbeat timeout: after
// that the stale-job reaper fails the job, as it would have without this.
func (api *API) releaseJob(jobID, daemonID string, cause error) {
	log := api.log.With("job", jobID, "daemon", daemonID)
	log.Warn("could not hand the acquired job to the daemon; putting it back in the queue", "err", cause)
	api.hooks.Add(1)
	go func() {
		defer api.hooks.Done()
		ctx, cancel := context.WithTimeout(api.hooksCtx, api.opts.JobHeartbeatTimeout/2)
		defer cancel()
		_, err := backoff.Retry(ctx, func() (struct{}, error) {
			err := api.db.ReleaseJob(ctx, jobID, daemonID)
			if errors.Is(err, database.ErrNotFound) {
				return struct{}{}, backoff.Permanent(err) // ended or reaped meanwhile
			}
			return struct{}{}, err
		}, backoff.WithMaxElapsedTime(0))
		if err != nil {
			log.Warn("put the job back in the queue", "err", err)
			return
		}
		log.Info("job back in the queue")
	}()
}

// acquiredJob gathers what a daemon needs to run job.
func (api *API) acquiredJob(c *gin.Context, job database.ProvisionerJob) (codersdk.AcquiredJob, error) {
	ctx := c.Request.Context()
	out := codersdk.AcquiredJob{
		JobID: job.ID, CreatedAt: job.CreatedAt, Type: codersdk.ProvisionerJobType(job.Type), FileID: job.FileID, Tags: displayTags(job.Tags),
	}
	switch job.Type {
	case database.JobTypeTemplateVersionImport:
		v, err := api.db.TemplateVersionByID(ctx, job.Input.TemplateVersionID)
		if err != nil {
			return out, fmt.Errorf("load template version of job %s: %w", job.ID, err)
		}
		out.TemplateVersionID, out.TemplateID, out.TemplateVersionName = v.ID, deref(v.TemplateID), v.Name
		if err := unmarshalList(v.UserVariableValues, &out.VariableValues); err != nil {
			return out, fmt.Errorf("decode variable values of version %s: %w", v.ID, err)
		}
	case database.JobTypeWorkspaceBuild:
		b, err := api.db.WorkspaceBuildByJobID(ctx, job.ID)
		if err != nil {
			return out, fmt.Errorf("load build of job %s: %w", job.ID, err)
		}
		w, err := api.db.WorkspaceByID(ctx, b.WorkspaceID)
		if err != nil {
			return out, err
		}
		state, err := api.db.LatestStateBefore(ctx, w.ID, b.BuildNumber)
		if err != nil {
			return out, err
		}
		out.TemplateVersionID = b.TemplateVersionID
		out.TemplateName = w.TemplateName
		out.WorkspaceBuildID, out.WorkspaceID, out.WorkspaceName = b.ID, w.ID, w.Name
		out.WorkspaceOwnerID, out.WorkspaceOwner = w.OwnerID, w.OwnerName
		out.Transition, out.BuildNumber, out.State = codersdk.WorkspaceTransition(b.Transition), b.BuildNumber, state
		if err := api.buildJobContext(ctx, &out, job, w, b); err != nil {
			return out, err
		}
	default:
		return out, fmt.Errorf("unknown job type %q", job.Type)
	}
	return out, nil
}

// daemonJob loads the :job the :daemon holds.
func (api *API) daemonJob(c *gin.Context) (database.ProvisionerDaemon, database.ProvisionerJob, error) {
	d, err := api.daemonParam(c)
	if err != nil {
		return d, database.ProvisionerJob{}, err
	}
	j, err := api.jobOrNotFound(c, c.Param("job"), "Job")
	if err != nil {
		return d, j, err
	}
	if j.WorkerID == nil || *j.WorkerID != d.ID {
		return d, j, conflict("Job %s is not held by this daemon", j.ID)
	}
	if j.CompletedAt != nil {
		return d, j, conflict("Job %s already ended (%s): %s", j.ID, j.Status(), j.Error)
	}
	return d, j, nil
}

func (api *API) updateJob(c *gin.Context) error {
	d, j, err := api.daemonJob(c)
	if err != nil {
		return err
	}
	var req codersdk.UpdateJobRequest
	if err := decode(c, &req); err != nil {
		return err
	}
	ctx := c.Request.Context()
	logs := make([]database.JobLog, 0, len(req.Logs))
	for _, l := range req.Logs {
		logs = append(logs, database.JobLog{CreatedAt: l.CreatedAt.UTC(), Source: l.Source, Level: l.Level, Stage: l.Stage, Output: l.Output})
	}
	var canceled bool
	err = api.db.InTx(ctx, func(tx *database.DB) error {
		var err error
		if canceled, err = tx.HeartbeatJob(ctx, j.ID, d.ID); err != nil {
			return err
		}
		return tx.InsertJobLogs(ctx, j.ID, logs)
	})
	if errors.Is(err, database.ErrNotFound) {
		return conflict("Job %s is no longer held by this daemon", j.ID)
	}
	if err != nil {
		return err
	}
	_ = api.db.TouchProvisionerDaemon(ctx, d.ID)
	c.JSON(http.StatusOK, codersdk.UpdateJobResponse{Canceled: canceled})
	return nil
}

func (api *API) completeJob(c *gin.Context) error {
	d, j, err := api.daemonJob(c)
	if err != nil {
		return err
	}
	var req codersdk.CompleteJobRequest
	if err := decode(c, &req); err != nil {
		return err
	}
	for _, r := range req.Resources {
		for _, a := range r.Agents {
			if uuid.Validate(a.Token) != nil {
				return validation("resources.agents.token", fmt.Sprintf("agent %s: token must be a UUID", a.Name))
			}
		}
	}
	resources, err := convertProvisionedResources(req.Resources)
	if err != nil {
		return err
	}
	ctx := c.Request.Context()
	// importErr is why an import that ran fine cannot back a template (a
	// required variable without a value, a workspace tag that does not
	// parse): the job ends failed with it.
	var importErr string
	err = api.db.InTx(ctx, func(tx *database.DB) error {
		transition := "start"
		switch j.Type {
		case database.JobTypeTemplateVersionImport:
			imp, err := importResult(ctx, tx, j.Input.TemplateVersionID, req)
			if err != nil {
				return err
			}
			if importErr = imp.failure; importErr != "" {
				_, err := tx.FinishJob(ctx, j.ID, d.ID, importErr, "")
				return err
			}
			if err := tx.SetTemplateVersionImport(ctx, j.Input.TemplateVersionID, imp.parameters, imp.variables, imp.workspaceTags); err != nil {
				return err
			}
			if err := setImportExternalAuth(ctx, tx, j.Input.TemplateVersionID, req.ExternalAuthProviders); err != nil {
				return err
			}
		case database.JobTypeWorkspaceBuild:
			b, err := tx.WorkspaceBuildByJobID(ctx, j.ID)
			if err != nil {
				return err
			}
			transition = b.Transition
			if err := tx.SetWorkspaceBuildState(ctx, b.ID, req.State); err != nil {
				return err
			}
			if err := tx.ArmBuildDeadline(ctx, b.ID); err != nil { // autostop (schedules.go)
				return err
			}
			if b.Transition == string(codersdk.WorkspaceTransitionDelete) {
				if err := tx.MarkWorkspaceDeleted(ctx, b.WorkspaceID); err != nil {
					return err
				}
			}
		}
		for _, res := range resources {
			res.JobID, res.Transition = j.ID, transition
			if err := tx.InsertResource(ctx, res); err != nil {
				return err
			}
		}
		_, err := tx.FinishJob(ctx, j.ID, d.ID, "", "")
		return err
	})
	if errors.Is(err, database.ErrNotFound) {
		return conflict("Job %s is no longer held by this daemon (it may have been failed for missing heartbeats)", j.ID)
	}
	if err != nil {
		return err
	}
	if importErr != "" {
		api.metrics.jobsFinished.WithLabelValues(database.JobFailed).Inc()
		api.log.Info("provisioner job failed: the import's result is unusable", "job", j.ID, "daemon", d.Name, "error", importErr)
		c.JSON(http.StatusOK, codersdk.Response{Message: "Job failed", Detail: importErr})
		return nil
	}
	api.metrics.jobsFinished.WithLabelValues(database.JobSucceeded).Inc()
	api.log.Info("provisioner job completed", "job", j.ID, "type", j.Type, "daemon", d.Name)
	c.JSON(http.StatusOK, codersdk.Response{Message: "Job completed"})
	return nil
}

func (api *API) failJob(c *gin.Context) error {
	d, j, err := api.daemonJob(c)
	if err != nil {
		return err
	}
	var req codersdk.FailJobRequest
	if err := decode(c, &req); err != nil {
		return err
	}
	if req.Error == "" {
		return validation("error", "is required")
	}
	ctx := c.Request.Context()
	var finished database.ProvisionerJob
	err = api.db.InTx(ctx, func(tx *database.DB) error {
		var err error
		if finished, err = tx.FinishJob(ctx, j.ID, d.ID, req.Error, req.ErrorCode); err != nil {
			return err
		}
		if j.Type == database.JobTypeWorkspaceBuild && req.State != nil {
			b, err := tx.WorkspaceBuildByJobID(ctx, j.ID)
			if err != nil {
				return err
			}
			return tx.SetWorkspaceBuildState(ctx, b.ID, req.State)
		}
		return nil
	})
	if errors.Is(err, database.ErrNotFound) {
		return conflict("Job %s is no longer held by this daemon", j.ID)
	}
	if err != nil {
		return err
	}
	api.metrics.jobsFinished.WithLabelValues(finished.Status()).Inc()
	api.log.Info("provisioner job failed", "job", j.ID, "daemon", d.Name, "error", req.Error)
	c.JSON(http.StatusOK, codersdk.Response{Message: "Job " + finished.Status()})
	return nil
}

// daemonFile serves the template tar of a job the daemon holds.
func (api *API) daemonFile(c *gin.Context) error {
	d, err := api.daemonParam(c)
	if err != nil {
		return err
	}
	ctx := c.Request.Context()
	f, err := api.db.FileByID(ctx, c.Param("file"))
	if errors.Is(err, database.ErrNotFound) {
		return notFound("File")
	}
	if err != nil {
		return err
	}
	if ok, err := api.db.DaemonHoldsFile(ctx, d.ID, f.ID); err != nil {
		return err
	} else if !ok {
		return errorf(http.StatusForbidden, "", "This daemon holds no job that uses file %s", f.ID)
	}
	serveFile(c, f)
	return nil
}

func (api *API) provisionerDaemons(c *gin.Context) error {
	if c.Param("org") != "" {
		if err := api.orgParam(c); err != nil {
			return err
		}
	}
	if err := authorize(c, resProvisionerd, actRead, ""); err != nil {
		return err
	}
	ds, err := api.db.ProvisionerDaemons(c.Request.Context(), api.org.ID)
	if err != nil {
		return err
	}
	out := []codersdk.ProvisionerDaemon{}
	for _, d := range ds {
		out = append(out, convertDaemon(d, api.now()))
	}
	c.JSON(http.StatusOK, out)
	return nil
}
