package coderd

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"airgapcoder/coderd/database"
	"airgapcoder/codersdk"
)

// Template schedule defaults and dormancy (issue 35; docs/schedules.md),
// as Coder's template fields: default_ttl_ms for workspaces created
// without a TTL, activity_bump_ms for the activity bump, and dormancy:
// each lifecycle tick marks a stopped workspace unused for the template's
// time_til_dormant dormant, and deletes a dormant one whose
// time_til_dormant_autodelete has passed. A dormant workspace does not
// start until it is marked active (PUT /workspaces/{id}/dormant). A
// template's max_ttl_ms (Coder's max_ttl) caps workspace TTLs and gives
// each start build a max_deadline its deadline never passes (schedules.go,
// database.ArmBuildDeadline).

// BuildReasonAutodelete is the reason of a dormant workspace's delete
// build, as Coder's.
const BuildReasonAutodelete = "autodelete"

// templateScheduleRoutes adds the endpoints to the authenticated group.
func (api *API) templateScheduleRoutes(a *gin.RouterGroup) {
	a.PATCH("/templates/:template", api.handle(api.patchTemplateMeta))
	a.PUT("/workspaces/:workspace/dormant", api.handle(api.putWorkspaceDormant))
}

// fillTemplateSchedules adds each template's schedule fields.
func (api *API) fillTemplateSchedules(ctx context.Context, out []codersdk.Template) error {
	ids := make([]string, len(out))
	for i, t := range out {
		ids[i] = t.ID
	}
	scheds, err := api.db.TemplateSchedules(ctx, ids)
	if err != nil {
		return err
	}
	for i := range out {
		out[i].TemplateScheduleFields = sdkTemplateSchedule(scheds[out[i].ID])
	}
	return nil
}

func sdkTemplateSchedule(s database.TemplateSchedule) codersdk.TemplateScheduleFields {
	return codersdk.TemplateScheduleFields{
		DefaultTTLMillis: s.DefaultTTLMillis, ActivityBumpMillis: s.ActivityBumpMillis,
		TimeTilDormantMillis: s.TimeTilDormantMillis, TimeTilDormantAutoDeleteMillis: s.TimeTilDormantAutodeleteMillis,
		MaxTTLMillis: s.MaxTTLMillis,
	}
}

// writeTemplate answers with t and its schedule fields.
func (api *API) writeTemplate(c *gin.Context, status int, t database.Template) error {
	out := []codersdk.Template{api.convertTemplate(t)}
	if err := api.fillTemplateSchedules(c.Request.Context(), out); err != nil {
		return err
	}
	c.JSON(status, out[0])
	return nil
}

// patchTemplateMeta is PATCH /api/v2/templates/{id}: template admins
// change the schedule fields given; the others keep their value.
func (api *API) patchTemplateMeta(c *gin.Context) error {
	e, t, err := api.auditTemplate(c, codersdk.AuditActionWrite, api.templateAdminParam)
	if err != nil {
		return err
	}
	var req codersdk.UpdateTemplateMeta
	if err := decode(c, &req); err != nil {
		return err
	}
	ctx := c.Request.Context()
	scheds, err := api.db.TemplateSchedules(ctx, []string{t.ID})
	if err != nil {
		return err
	}
	s := scheds[t.ID]
	s.TemplateID = t.ID
	minTTL := api.opts.Lifecycle.MinTTL
	for _, f := range []struct {
		name string
		in   *int64
		out  *int64
		max  time.Duration
	}{
		{"default_ttl_ms", req.DefaultTTLMillis, &s.DefaultTTLMillis, maxTTL},
		{"activity_bump_ms", req.ActivityBumpMillis, &s.ActivityBumpMillis, maxTTL},
		{"time_til_dormant_ms", req.TimeTilDormantMillis, &s.TimeTilDormantMillis, 0},
		{"time_til_dormant_autodelete_ms", req.TimeTilDormantAutoDeleteMillis, &s.TimeTilDormantAutodeleteMillis, 0},
		{"max_ttl_ms", req.MaxTTLMillis, &s.MaxTTLMillis, maxTTL},
	} {
		if f.in == nil {
			continue
		}
		d := time.Duration(*f.in) * time.Millisecond
		switch {
		case *f.in < 0 || (*f.in > 0 && d < minTTL):
			return validation(f.name, fmt.Sprintf("must be 0 (off) or at least %s (%d ms)", minTTL, minTTL.Milliseconds()))
		case f.max > 0 && d > f.max:
			return validation(f.name, fmt.Sprintf("must be at most %s (30 days)", f.max))
		}
		*f.out = *f.in
		e.field(f.name, *f.in)
	}
	if s.MaxTTLMillis > 0 && s.DefaultTTLMillis > s.MaxTTLMillis {
		return validation("default_ttl_ms", fmt.Sprintf("must be at most the template's max_ttl_ms (%s); lower the default TTL or raise the maximum",
			time.Duration(s.MaxTTLMillis)*time.Millisecond))
	}
	err = e.inTx(ctx, http.StatusOK, func(tx *database.DB) error { return tx.SetTemplateSchedule(ctx, s) })
	if err != nil {
		return err
	}
	t, err = api.db.TemplateByID(ctx, t.ID)
	if err != nil {
		return err
	}
	return api.writeTemplate(c, http.StatusOK, t)
}

// applyTemplateDefaults gives a create request without a TTL the
// template's default TTL, if it has one, and refuses a TTL above the
// template's maximum.
func (api *API) applyTemplateDefaults(ctx context.Context, req *codersdk.CreateWorkspaceRequest, templateID string) error {
	scheds, err := api.db.TemplateSchedules(ctx, []string{templateID})
	if err != nil {
		return err
	}
	s := scheds[templateID]
	if ttl := s.DefaultTTLMillis; req.TTLMillis == nil && ttl > 0 {
		req.TTLMillis = &ttl
	}
	return checkMaxTTL(req.TTLMillis, s.MaxTTLMillis)
}

// checkMaxTTL refuses a TTL longer than a template's max_ttl_ms (0: no
// maximum). No TTL is fine: such a workspace stops at its build's
// max_deadline.
func checkMaxTTL(ttlMillis *int64, maxMillis int64) error {
	if ttlMillis == nil || maxMillis <= 0 || *ttlMillis <= maxMillis {
		return nil
	}
	return validation("ttl_ms", fmt.Sprintf("must be at most the template's maximum TTL, %s (max_ttl_ms %d); ask a template admin to raise it (coder templates edit --max-ttl)",
		time.Duration(maxMillis)*time.Millisecond, maxMillis))
}

// templateMaxTTL is the max_ttl_ms of a template (0: none).
func (api *API) templateMaxTTL(ctx context.Context, templateID string) (int64, error) {
	scheds, err := api.db.TemplateSchedules(ctx, []string{templateID})
	if err != nil {
		return 0, err
	}
	return scheds[templateID].MaxTTLMillis, nil
}

// dormancyOf reads the dormant_at and deleting_at of workspaces ids; apply
// sets them on the workspaces in their API shape.
func (api *API) dormancyOf(ctx context.Context, ids []string) (apply func(out []codersdk.Workspace), err error) {
	ds, err := api.db.WorkspaceDormancies(ctx, ids)
	if err != nil {
		return nil, err
	}
	return func(out []codersdk.Workspace) {
		for i := range out {
			d, ok := ds[out[i].ID]
			if !ok {
				continue
			}
			at := d.DormantAt.UTC()
			out[i].DormantAt = &at
			if !d.DeletingAt.IsZero() {
				del := d.DeletingAt.UTC()
				out[i].DeletingAt = &del
			}
		}
	}, nil
}

// refuseDormant refuses to start a dormant workspace, saying how to make
// it active.
func (api *API) refuseDormant(ctx context.Context, w database.Workspace) error {
	ds, err := api.db.WorkspaceDormancies(ctx, []string{w.ID})
	if err != nil {
		return err
	}
	if _, dormant := ds[w.ID]; dormant {
		return badRequest("Workspace %s is dormant (unused for too long) and does not start; make it active first with "+
			"`coder dormant off %s` (or PUT /api/v2/workspaces/%s/dormant {\"dormant\": false})", w.Name, w.Name, w.ID)
	}
	return nil
}

// putWorkspaceDormant is PUT /api/v2/workspaces/{id}/dormant: the owner
// (or an admin) marks a workspace dormant or active again.
func (api *API) putWorkspaceDormant(c *gin.Context) error {
	e := api.audit(c, codersdk.AuditActionWrite, codersdk.AuditResourceWorkspace)
	w, err := api.workspaceParam(c, actUpdate)
	e.workspaceOf(w)
	if err != nil {
		return err
	}
	var req codersdk.UpdateWorkspaceDormancy
	if err := decode(c, &req); err != nil {
		return err
	}
	if w.Deleted {
		return badRequest("Workspace %s is deleted", w.Name)
	}
	e.field("dormant", req.Dormant)
	ctx := c.Request.Context()
	err = e.inTx(ctx, http.StatusNoContent, func(tx *database.DB) error {
		_, err := tx.SetWorkspaceDormant(ctx, w.ID, req.Dormant, api.now(), "")
		return err
	})
	if err != nil {
		return err
	}
	c.Status(http.StatusNoContent)
	return nil
}

// isDormant reports whether a workspace is dormant (false when that cannot
// be read: the caller then goes on as before dormancy existed).
func (api *API) isDormant(ctx context.Context, workspaceID string) bool {
	ds, err := api.db.WorkspaceDormancies(ctx, []string{workspaceID})
	_, dormant := ds[workspaceID]
	return err == nil && dormant
}

// dormancyTick marks unused workspaces dormant and deletes dormant ones
// whose time has come; LifecycleTick calls it under the scheduler's lock.
func (api *API) dormancyTick(ctx context.Context, now time.Time, res *LifecycleResult) error {
	cands, err := api.db.DormancyCandidates(ctx, now)
	if err != nil {
		return err
	}
	for _, c := range cands {
		if c.Delete {
			lc := database.LifecycleCandidate{WorkspaceID: c.WorkspaceID, LatestBuildID: c.LatestBuildID}
			if err := api.autobuild(ctx, lc, codersdk.WorkspaceTransitionDelete, BuildReasonAutodelete); err != nil {
				if ctx.Err() == nil {
					api.log.Warn("lifecycle: queue dormant workspace's delete", "workspace", c.WorkspaceID, "err", err)
				}
				continue
			}
			res.Deleted = append(res.Deleted, c.WorkspaceID)
			continue
		}
		marked, err := api.markDormant(ctx, c, now)
		if err != nil {
			if ctx.Err() == nil {
				api.log.Warn("lifecycle: mark workspace dormant", "workspace", c.WorkspaceID, "err", err)
			}
			continue
		}
		if marked {
			res.Dormant = append(res.Dormant, c.WorkspaceID)
		}
	}
	return nil
}

// markDormant marks a workspace dormant at now and audits it as its
// owner's write with automatic_actor "coder".
func (api *API) markDormant(ctx context.Context, c database.DormancyCandidate, now time.Time) (bool, error) {
	w, err := api.db.WorkspaceByID(ctx, c.WorkspaceID)
	if err != nil {
		return false, err
	}
	fields, _ := json.Marshal(map[string]any{
		"automatic_actor": "coder", "automatic_subsystem": "lifecycle", "dormant": true, "workspace_id": w.ID,
	})
	var marked bool
	err = api.db.InTx(ctx, func(tx *database.DB) error {
		if marked, err = tx.SetWorkspaceDormant(ctx, w.ID, true, now, c.LatestBuildID); err != nil || !marked {
			return err
		}
		_, err := tx.InsertAuditLog(ctx, database.AuditLog{
			UserID: w.OwnerID, Username: w.OwnerName, Action: string(codersdk.AuditActionWrite), ResourceType: string(codersdk.AuditResourceWorkspace),
			ResourceID: w.ID, ResourceTarget: w.Name, WorkspaceOwner: w.OwnerName, WorkspaceName: w.Name, StatusCode: http.StatusOK, Success: true,
			AdditionalFields: fields, Description: fmt.Sprintf("workspace %s marked dormant (unused)", w.Name),
		})
		return err
	})
	if marked && err == nil {
		api.log.Info("lifecycle: workspace marked dormant", "workspace", w.OwnerName+"/"+w.Name)
	}
	return marked && err == nil, err
}
