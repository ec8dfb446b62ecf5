package coderd

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"
	"golang.org/x/sync/errgroup"

	"airgapcoder/coderd/database"
	"airgapcoder/coderd/schedule"
	"airgapcoder/codersdk"
)

// Workspace schedules (issue 35; docs/schedules.md): the TTL, the autostart
// schedule and the deadline, as Coder's API has them. The scheduler that
// acts on them is lifecycle.go; activity that moves deadlines is
// schedules_activity.go.

// scheduleRoutes adds the schedule endpoints to the authenticated group.
func (api *API) scheduleRoutes(a *gin.RouterGroup) {
	a.PUT("/workspaces/:workspace/ttl", api.handle(api.putWorkspaceTTL))
	a.PUT("/workspaces/:workspace/autostart", api.handle(api.putWorkspaceAutostart))
	a.PUT("/workspaces/:workspace/extend", api.handle(api.putExtendWorkspace))
}

// workspaceSettingWrite begins a PUT of one of a workspace's schedule
// settings: it opens the write audit entry, decodes the body into req and
// then loads the path's workspace for update, naming it on the entry (so a
// refused update is recorded against the workspace too).
func (api *API) workspaceSettingWrite(c *gin.Context, req any) (*auditEntry, database.Workspace, error) {
	e := api.audit(c, codersdk.AuditActionWrite, codersdk.AuditResourceWorkspace)
	if err := decode(c, req); err != nil {
		return e, database.Workspace{}, err
	}
	w, err := api.workspaceParam(c, actUpdate)
	e.workspaceOf(w)
	return e, w, err
}

// validTTL checks a requested TTL: nil (none) or between the minimum and
// 30 days.
func (api *API) validTTL(ttlMillis *int64) error {
	if ttlMillis == nil {
		return nil
	}
	ttl := time.Duration(*ttlMillis) * time.Millisecond
	if minTTL := api.opts.Lifecycle.MinTTL; ttl < minTTL {
		return validation("ttl_ms", fmt.Sprintf("must be at least %s (%d ms), or null for no autostop", minTTL, minTTL.Milliseconds()))
	}
	if ttl > maxTTL {
		return validation("ttl_ms", fmt.Sprintf("must be at most %s (30 days)", maxTTL))
	}
	return nil
}

// validAutostart parses a requested schedule: "" for none (nil too), else
// its canonical cron line.
func validAutostart(field string, s *string) (string, error) {
	if s == nil || *s == "" {
		return "", nil
	}
	sched, err := schedule.Weekly(*s)
	if err != nil {
		return "", validation(field, err.Error()+`; want e.g. "CRON_TZ=Europe/Berlin 30 9 * * 1-5"`)
	}
	return sched.String(), nil
}

// setCreateSchedule stores a new workspace's schedule from its create
// request, already validated, inside the create's transaction.
func (api *API) setCreateSchedule(ctx context.Context, tx *database.DB, workspaceID string, req codersdk.CreateWorkspaceRequest) error {
	if req.TTLMillis != nil {
		if err := tx.SetWorkspaceTTL(ctx, workspaceID, req.TTLMillis); err != nil {
			return err
		}
	}
	autostart, err := validAutostart("autostart_schedule", req.AutostartSchedule)
	if err != nil || autostart == "" {
		return err
	}
	return tx.SetWorkspaceAutostart(ctx, workspaceID, autostart, api.now())
}

// validCreateSchedule checks a create request's schedule.
func (api *API) validCreateSchedule(req codersdk.CreateWorkspaceRequest) error {
	if err := api.validTTL(req.TTLMillis); err != nil {
		return err
	}
	_, err := validAutostart("autostart_schedule", req.AutostartSchedule)
	return err
}

// running reports whether w's latest build is a start build that ended
// well.
func running(w database.Workspace) bool {
	return w.LatestBuild.Transition == string(codersdk.WorkspaceTransitionStart) && w.LatestBuild.Job.Status() == database.JobSucceeded
}

// putWorkspaceTTL is PUT /api/v2/workspaces/{id}/ttl. A null TTL also
// removes the running build's deadline (as Coder does); a TTL given to a
// running workspace without a deadline gives it one, counted from now. A
// running workspace with a deadline keeps it: the new TTL counts from the
// next start or activity bump.
func (api *API) putWorkspaceTTL(c *gin.Context) error {
	var req codersdk.UpdateWorkspaceTTLRequest
	e, w, err := api.workspaceSettingWrite(c, &req)
	if err != nil {
		return err
	}
	if err := api.validTTL(req.TTLMillis); err != nil {
		return err
	}
	ctx := c.Request.Context()
	maxTTL, err := api.templateMaxTTL(ctx, w.TemplateID)
	if err != nil {
		return err
	}
	if err := checkMaxTTL(req.TTLMillis, maxTTL); err != nil { // templateschedules.go
		return err
	}
	e.field("ttl_ms", req.TTLMillis)
	deadlines, err := api.db.BuildDeadlines(ctx, []string{w.LatestBuild.ID})
	if err != nil {
		return err
	}
	maxDeadlines, err := api.db.BuildMaxDeadlines(ctx, []string{w.LatestBuild.ID})
	if err != nil {
		return err
	}
	maxDeadline := maxDeadlines[w.LatestBuild.ID]
	err = e.inTx(ctx, http.StatusNoContent, func(tx *database.DB) error {
		if err := tx.SetWorkspaceTTL(ctx, w.ID, req.TTLMillis); err != nil {
			return err
		}
		switch {
		case req.TTLMillis == nil && !deadlines[w.LatestBuild.ID].IsZero():
			// Without a TTL the build still stops at its max_deadline.
			return tx.SetBuildDeadline(ctx, w.LatestBuild.ID, maxDeadline)
		case req.TTLMillis != nil && running(w) && deadlines[w.LatestBuild.ID].IsZero():
			deadline := api.now().Add(time.Duration(*req.TTLMillis) * time.Millisecond)
			if !maxDeadline.IsZero() && deadline.After(maxDeadline) {
				deadline = maxDeadline
			}
			return tx.SetBuildDeadline(ctx, w.LatestBuild.ID, deadline)
		}
		return nil
	})
	if err != nil {
		return err
	}
	c.Status(http.StatusNoContent)
	return nil
}

// putWorkspaceAutostart is PUT /api/v2/workspaces/{id}/autostart.
func (api *API) putWorkspaceAutostart(c *gin.Context) error {
	var req codersdk.UpdateWorkspaceAutostartRequest
	e, w, err := api.workspaceSettingWrite(c, &req)
	if err != nil {
		return err
	}
	sched, err := validAutostart("schedule", req.Schedule)
	if err != nil {
		return err
	}
	e.field("autostart_schedule", sched)
	ctx := c.Request.Context()
	err = e.inTx(ctx, http.StatusNoContent, func(tx *database.DB) error {
		return tx.SetWorkspaceAutostart(ctx, w.ID, sched, api.now())
	})
	if err != nil {
		return err
	}
	c.Status(http.StatusNoContent)
	return nil
}

// putExtendWorkspace is PUT /api/v2/workspaces/{id}/extend: a running
// workspace with a deadline gets a new one, at least the minimum TTL and
// at most 30 days from now.
func (api *API) putExtendWorkspace(c *gin.Context) error {
	var req codersdk.PutExtendWorkspaceRequest
	e, w, err := api.workspaceSettingWrite(c, &req)
	if err != nil {
		return err
	}
	if !running(w) {
		return badRequest("Workspace %s is not running (its latest build is a %s that is %s); only a running workspace has a deadline",
			w.Name, w.LatestBuild.Transition, w.LatestBuild.Job.Status())
	}
	ctx := c.Request.Context()
	deadlines, err := api.db.BuildDeadlines(ctx, []string{w.LatestBuild.ID})
	if err != nil {
		return err
	}
	if deadlines[w.LatestBuild.ID].IsZero() {
		return badRequest("Workspace %s has no deadline: it stops only by hand. Set a TTL with `coder schedule stop %s DURATION` first", w.Name, w.Name)
	}
	now := api.now()
	minTTL := api.opts.Lifecycle.MinTTL
	switch {
	case req.Deadline.Before(now.Add(minTTL)):
		return validation("deadline", fmt.Sprintf("must be at least %s from now", minTTL))
	case req.Deadline.After(now.Add(maxTTL)):
		return validation("deadline", "must be at most 30 days from now")
	}
	maxDeadlines, err := api.db.BuildMaxDeadlines(ctx, []string{w.LatestBuild.ID})
	if err != nil {
		return err
	}
	if md := maxDeadlines[w.LatestBuild.ID]; !md.IsZero() && req.Deadline.After(md) {
		return validation("deadline", fmt.Sprintf("must be at most the build's max deadline %s (the template's maximum TTL after the start); stop and start the workspace to run longer",
			md.UTC().Format(time.RFC3339)))
	}
	deadline := req.Deadline.UTC().Truncate(time.Microsecond)
	e.field("deadline", deadline)
	err = e.inTx(ctx, http.StatusOK, func(tx *database.DB) error {
		return tx.SetBuildDeadline(ctx, w.LatestBuild.ID, deadline)
	})
	if err != nil {
		return notFoundAs("Workspace build", err)
	}
	c.JSON(http.StatusOK, codersdk.Response{Message: "Deadline updated to " + deadline.Format(time.RFC3339) + "."})
	return nil
}

// schedulesOf reads the schedule fields of workspaces ids and the
// deadlines of their latest builds buildIDs, at once; apply sets them on
// the workspaces in their API shape.
func (api *API) schedulesOf(ctx context.Context, ids, buildIDs []string) (apply func(out []codersdk.Workspace), err error) {
	var scheds map[string]database.WorkspaceSchedule
	var deadlines func(*codersdk.WorkspaceBuild)
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() (err error) {
		scheds, err = api.db.WorkspaceSchedules(gctx, ids)
		return err
	})
	g.Go(func() (err error) {
		deadlines, err = api.deadlinesOf(gctx, buildIDs)
		return err
	})
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return func(out []codersdk.Workspace) {
		for i := range out {
			s := scheds[out[i].ID]
			out[i].TTLMillis, out[i].LastUsedAt = s.TTLMillis, s.LastUsedAt
			if s.LastUsedAt.Year() <= 1 {
				out[i].LastUsedAt = time.Time{}
			}
			if s.AutostartSchedule != "" {
				out[i].AutostartSchedule = &s.AutostartSchedule
			}
			deadlines(&out[i].LatestBuild)
		}
	}, nil
}

// deadlinesOf reads the deadline and max_deadline of builds buildIDs, both
// at once; apply sets them on a build in its API shape.
func (api *API) deadlinesOf(ctx context.Context, buildIDs []string) (apply func(*codersdk.WorkspaceBuild), err error) {
	var deadlines, maxDeadlines map[string]time.Time
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() (err error) {
		deadlines, err = api.db.BuildDeadlines(gctx, buildIDs)
		return err
	})
	g.Go(func() (err error) {
		maxDeadlines, err = api.db.BuildMaxDeadlines(gctx, buildIDs)
		return err
	})
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return func(b *codersdk.WorkspaceBuild) {
		if d := deadlines[b.ID]; !d.IsZero() {
			d = d.UTC()
			b.Deadline = &d
		}
		if d := maxDeadlines[b.ID]; !d.IsZero() {
			d = d.UTC()
			b.MaxDeadline = &d
		}
	}, nil
}
