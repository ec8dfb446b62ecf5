package coderd

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"

	"github.com/gin-gonic/gin"
	"golang.org/x/sync/errgroup"

	"airgapcoder/coderd/database"
	"airgapcoder/codersdk"
)

var workspaceNameRe = regexp.MustCompile(`^[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,30}[a-zA-Z0-9])?$`)

// workspaceStatus derives a workspace's status from its latest build, as
// Coder does.
func workspaceStatus(transition, jobStatus string) codersdk.WorkspaceStatus {
	switch jobStatus {
	case database.JobPending:
		return codersdk.WorkspaceStatusPending
	case database.JobCanceling:
		return codersdk.WorkspaceStatusCanceling
	case database.JobCanceled:
		return codersdk.WorkspaceStatusCanceled
	case database.JobFailed:
		return codersdk.WorkspaceStatusFailed
	case database.JobRunning:
		switch transition {
		case "stop":
			return codersdk.WorkspaceStatusStopping
		case "delete":
			return codersdk.WorkspaceStatusDeleting
		}
		return codersdk.WorkspaceStatusStarting
	}
	switch transition {
	case "stop":
		return codersdk.WorkspaceStatusStopped
	case "delete":
		return codersdk.WorkspaceStatusDeleted
	}
	return codersdk.WorkspaceStatusRunning
}

// convertResources is resources' API shape. A sensitive metadata item's
// value never leaves coderd.
func (api *API) convertResources(rs []database.Resource, live map[string]agentLive) ([]codersdk.WorkspaceResource, error) {
	out := []codersdk.WorkspaceResource{}
	for _, r := range rs {
		cr := codersdk.WorkspaceResource{
			ID: r.ID, CreatedAt: r.CreatedAt, JobID: r.JobID, Transition: r.Transition, Type: r.Type, Name: r.Name,
			Hide: r.Hide, Icon: r.Icon, DailyCost: r.DailyCost,
		}
		if err := unmarshalList(r.Metadata, &cr.Metadata); err != nil {
			return nil, fmt.Errorf("decode metadata of resource %s: %w", r.ID, err)
		}
		for i := range cr.Metadata {
			if cr.Metadata[i].Sensitive {
				cr.Metadata[i].Value = ""
			}
		}
		for _, a := range r.Agents {
			ca, err := api.convertAgent(a, r.ID, live[a.ID])
			if err != nil {
				return nil, err
			}
			cr.Agents = append(cr.Agents, ca)
		}
		out = append(out, cr)
	}
	return out, nil
}

// resourcesOf loads the resources (with their agents' live state) of the
// given jobs, converted, keyed by job id.
func (api *API) resourcesOf(ctx context.Context, jobIDs []string) (func(jobID string) []codersdk.WorkspaceResource, error) {
	resources, err := api.db.ResourcesByJobIDs(ctx, jobIDs)
	if err != nil {
		return nil, err
	}
	live, err := api.agentLiveState(ctx, resources)
	if err != nil {
		return nil, err
	}
	converted := make(map[string][]codersdk.WorkspaceResource, len(jobIDs))
	for _, id := range jobIDs {
		if converted[id], err = api.convertResources(resources[id], live); err != nil {
			return nil, err
		}
	}
	return func(jobID string) []codersdk.WorkspaceResource { return converted[jobID] }, nil
}

// convertBuild is one build of w in its API shape.
func (api *API) convertBuild(c *gin.Context, w database.Workspace, b database.WorkspaceBuild, resources func(string) []codersdk.WorkspaceResource) (codersdk.WorkspaceBuild, error) {
	job, err := api.convertJob(c, b.Job)
	if err != nil {
		return codersdk.WorkspaceBuild{}, err
	}
	var params []codersdk.WorkspaceBuildParameter
	if err := unmarshalList(b.RichParameterValues, &params); err != nil {
		return codersdk.WorkspaceBuild{}, fmt.Errorf("decode parameters of build %s: %w", b.ID, err)
	}
	for _, r := range resources(b.Job.ID) {
		api.setSubdomainNames(r.Agents, w.OwnerName, w.Name)
	}
	return codersdk.WorkspaceBuild{
		ID: b.ID, CreatedAt: b.CreatedAt, UpdatedAt: b.UpdatedAt, WorkspaceID: w.ID, WorkspaceName: w.Name,
		WorkspaceOwnerID: w.OwnerID, WorkspaceOwnerName: w.OwnerName, TemplateVersionID: b.TemplateVersionID,
		TemplateVersionName: b.TemplateVersionName, BuildNumber: b.BuildNumber, Transition: codersdk.WorkspaceTransition(b.Transition),
		InitiatorID: b.InitiatorID, InitiatorUsername: b.InitiatorName, Job: job, Reason: b.Reason,
		Resources: resources(b.Job.ID), Status: workspaceStatus(b.Transition, b.Job.Status()), RichParameterValues: params,
	}, nil
}

// convertBuilds turns builds into their API shape.
func (api *API) convertBuilds(c *gin.Context, w database.Workspace, bs []database.WorkspaceBuild) ([]codersdk.WorkspaceBuild, error) {
	jobIDs := make([]string, len(bs))
	buildIDs := make([]string, len(bs))
	for i, b := range bs {
		jobIDs[i], buildIDs[i] = b.Job.ID, b.ID
	}
	var resources func(string) []codersdk.WorkspaceResource
	var deadlines func(*codersdk.WorkspaceBuild)
	g, gctx := errgroup.WithContext(c.Request.Context())
	g.Go(func() (err error) {
		resources, err = api.resourcesOf(gctx, jobIDs)
		return err
	})
	g.Go(func() (err error) {
		deadlines, err = api.deadlinesOf(gctx, buildIDs)
		return err
	})
	if err := g.Wait(); err != nil {
		return nil, err
	}
	out := make([]codersdk.WorkspaceBuild, 0, len(bs))
	for _, b := range bs {
		cb, err := api.convertBuild(c, w, b, resources)
		if err != nil {
			return nil, err
		}
		deadlines(&cb)
		out = append(out, cb)
	}
	return out, nil
}

// convertWorkspaces turns workspaces into their API shape. What it reads
// besides them (resources and agents, dormancy, schedules and deadlines)
// is read at once: a dashboard's list costs the longest of those round
// trips, not their sum.
func (api *API) convertWorkspaces(c *gin.Context, ws []database.Workspace) ([]codersdk.Workspace, error) {
	ids := make([]string, len(ws))
	jobIDs := make([]string, len(ws))
	buildIDs := make([]string, len(ws))
	for i, w := range ws {
		ids[i], jobIDs[i], buildIDs[i] = w.ID, w.LatestBuild.Job.ID, w.LatestBuild.ID
	}
	var resources func(string) []codersdk.WorkspaceResource
	var dormancy, schedules func([]codersdk.Workspace)
	g, gctx := errgroup.WithContext(c.Request.Context())
	g.Go(func() (err error) {
		resources, err = api.resourcesOf(gctx, jobIDs)
		return err
	})
	g.Go(func() (err error) {
		dormancy, err = api.dormancyOf(gctx, ids) // templateschedules.go
		return err
	})
	g.Go(func() (err error) {
		schedules, err = api.schedulesOf(gctx, ids, buildIDs) // schedules.go
		return err
	})
	if err := g.Wait(); err != nil {
		return nil, err
	}
	// Pending builds read the job queue once for the whole list.
	api.viewJobQueue(c)
	out := make([]codersdk.Workspace, 0, len(ws))
	for _, w := range ws {
		latest, err := api.convertBuild(c, w, w.LatestBuild, resources)
		if err != nil {
			return nil, err
		}
		out = append(out, codersdk.Workspace{
			ID: w.ID, CreatedAt: w.CreatedAt, UpdatedAt: w.UpdatedAt, OwnerID: w.OwnerID, OwnerName: w.OwnerName,
			OrganizationID: w.OrganizationID, TemplateID: w.TemplateID, TemplateName: w.TemplateName,
			TemplateActiveVersionID: w.TemplateActiveVersionID, Name: w.Name, Outdated: w.LatestBuild.TemplateVersionID != w.TemplateActiveVersionID,
			LatestBuild: latest,
		})
	}
	dormancy(out)
	schedules(out)
	return out, nil
}

func (api *API) writeWorkspace(c *gin.Context, status int, w database.Workspace) error {
	out, err := api.convertWorkspaces(c, []database.Workspace{w})
	if err != nil {
		return err
	}
	c.JSON(status, out[0])
	return nil
}

func (api *API) postWorkspace(c *gin.Context) error {
	e := api.audit(c, codersdk.AuditActionCreate, codersdk.AuditResourceWorkspace)
	owner, err := api.userParamFor(c, resWorkspace, actCreate)
	if err != nil {
		return err
	}
	var req codersdk.CreateWorkspaceRequest
	if err := decode(c, &req); err != nil {
		return err
	}
	e.workspace(owner.Username, req.Name).resource("", req.Name)
	if !workspaceNameRe.MatchString(req.Name) {
		return validation("name", "must be 1-32 letters, digits or inner hyphens")
	}
	if err := api.validCreateSchedule(req); err != nil { // schedules.go
		return err
	}
	ctx := c.Request.Context()
	var versionID string
	var template database.Template
	switch {
	case req.TemplateVersionID != "":
		v, err := api.db.TemplateVersionByID(ctx, req.TemplateVersionID)
		if errors.Is(err, database.ErrNotFound) || (err == nil && v.TemplateID == nil) {
			return validation("template_version_id", "no such template version (or it belongs to no template)")
		}
		if err != nil {
			return err
		}
		if template, err = api.db.TemplateByID(ctx, *v.TemplateID); err != nil {
			return err
		}
		versionID = v.ID
	case req.TemplateID != "":
		template, err = api.db.TemplateByID(ctx, req.TemplateID)
		if errors.Is(err, database.ErrNotFound) {
			return validation("template_id", "no such template")
		}
		if err != nil {
			return err
		}
		versionID = template.ActiveVersionID
	default:
		return validation("template_id", "is required")
	}
	e.field("template", template.Name)
	if err := api.requireTemplateRole(c, template, codersdk.TemplateRoleUse); err != nil {
		return err
	}
	if err := api.applyTemplateDefaults(ctx, &req, template.ID); err != nil { // templateschedules.go
		return err
	}
	v, err := api.importedVersion(c, "template_version_id", versionID, template.ID)
	if err != nil {
		return err
	}
	build, err := api.prepareBuild(ctx, v, owner.ID, nil, req.RichParameterValues)
	if err != nil {
		return err
	}
	if err := api.requireExternalAuth(c, v, owner); err != nil {
		return err
	}
	var wsID string
	e.field("template", template.Name).field("template_version", v.Name).field("transition", codersdk.WorkspaceTransitionStart)
	err = e.inTx(ctx, http.StatusCreated, func(tx *database.DB) error {
		wsID, err = tx.InsertWorkspace(ctx, api.org.ID, owner.ID, template.ID, req.Name)
		if errors.Is(err, database.ErrConflict) {
			return conflict("Workspace %q already exists for %s", req.Name, owner.Username)
		}
		if err != nil {
			return err
		}
		e.resource(wsID, "")
		if err := api.setCreateSchedule(ctx, tx, wsID, req); err != nil {
			return err
		}
		if err := api.checkQuota(ctx, tx, owner.ID, wsID, v.ID); err != nil { // quotas.go
			return err
		}
		buildID, err := api.insertBuild(c, tx, wsID, "start", build)
		e.field("build_id", buildID)
		return err
	})
	if err != nil {
		return err
	}
	w, err := api.db.WorkspaceByID(ctx, wsID)
	if err != nil {
		return err
	}
	return api.writeWorkspace(c, http.StatusCreated, w)
}

// insertBuild queues a build and its job inside tx and returns the build's
// id. The build stores its non-ephemeral values; ephemeral ones ride in the
// job's input until a daemon takes the job.
func (api *API) insertBuild(c *gin.Context, tx *database.DB, workspaceID, transition string, b preparedBuild) (string, error) {
	return api.queueBuild(c.Request.Context(), tx, actor(c).ID, workspaceID, transition, b) // lifecycle.go
}

// workspaceParam loads the :workspace parameter and checks the caller may
// act on it. A workspace the caller may not read is reported as missing.
func (api *API) workspaceParam(c *gin.Context, act action) (database.Workspace, error) {
	w, err := api.db.WorkspaceByID(c.Request.Context(), c.Param("workspace"))
	if err != nil {
		return w, notFoundAs("Workspace", err)
	}
	if !can(actor(c), resWorkspace, actRead, w.OwnerID) {
		return w, notFound("Workspace")
	}
	return w, authorize(c, resWorkspace, act, w.OwnerID)
}

func (api *API) workspace(c *gin.Context) error {
	w, err := api.workspaceParam(c, actRead)
	if err != nil {
		return err
	}
	return api.writeWorkspace(c, http.StatusOK, w)
}

func (api *API) workspaceByOwnerAndName(c *gin.Context) error {
	owner, err := api.userParam(c)
	if err != nil {
		return err
	}
	if !can(actor(c), resWorkspace, actRead, owner.ID) {
		return notFound("Workspace")
	}
	w, err := api.db.WorkspaceByOwnerAndName(c.Request.Context(), owner.ID, c.Param("name"))
	if err != nil {
		return notFoundAs(fmt.Sprintf("Workspace %q of %s", c.Param("name"), owner.Username), err)
	}
	return api.writeWorkspace(c, http.StatusOK, w)
}

// workspaces answers GET /api/v2/workspaces?q=owner:NAME name:NAME&limit=&offset=.
// Members see their own; owners and template admins see everyone's.
func (api *API) workspaces(c *gin.Context) error {
	ctx := c.Request.Context()
	me := actor(c)
	var f database.WorkspaceFilter
	for _, term := range strings.Fields(c.Query("q")) {
		key, val, ok := strings.Cut(term, ":")
		if !ok {
			f.Name = term
			continue
		}
		switch key {
		case "owner":
			if val == codersdk.Me {
				f.OwnerID = me.ID
				continue
			}
			u, err := api.db.UserByEmailOrUsername(ctx, "", val)
			if errors.Is(err, database.ErrNotFound) {
				c.JSON(http.StatusOK, codersdk.WorkspacesResponse{Workspaces: []codersdk.Workspace{}})
				return nil
			}
			if err != nil {
				return err
			}
			f.OwnerID = u.ID
		case "name":
			f.Name = val
		case "template":
			t, err := api.db.TemplateByName(ctx, api.org.ID, val)
			if errors.Is(err, database.ErrNotFound) {
				c.JSON(http.StatusOK, codersdk.WorkspacesResponse{Workspaces: []codersdk.Workspace{}})
				return nil
			}
			if err != nil {
				return err
			}
			f.TemplateID = t.ID
		default:
			return validation("q", fmt.Sprintf("unknown filter %q; use owner:, name: or template:", key))
		}
	}
	if !can(me, resWorkspace, actRead, "") {
		if f.OwnerID != "" && f.OwnerID != me.ID {
			c.JSON(http.StatusOK, codersdk.WorkspacesResponse{Workspaces: []codersdk.Workspace{}})
			return nil
		}
		f.OwnerID = me.ID
	}
	if err := pageQuery(c, &f.Limit, &f.Offset); err != nil {
		return err
	}
	ws, count, err := api.db.Workspaces(ctx, f)
	if err != nil {
		return err
	}
	out, err := api.convertWorkspaces(c, ws)
	if err != nil {
		return err
	}
	c.JSON(http.StatusOK, codersdk.WorkspacesResponse{Workspaces: out, Count: count})
	return nil
}

func (api *API) postWorkspaceBuild(c *gin.Context) error {
	// The body is read first, so that the audit record of a refused build
	// names the transition asked for.
	var req codersdk.CreateWorkspaceBuildRequest
	if err := decode(c, &req); err != nil {
		return err
	}
	switch req.Transition {
	case codersdk.WorkspaceTransitionStart, codersdk.WorkspaceTransitionStop, codersdk.WorkspaceTransitionDelete:
	default:
		return validation("transition", "must be start, stop or delete")
	}
	e := api.audit(c, codersdk.AuditAction(req.Transition), codersdk.AuditResourceWorkspaceBuild).field("transition", req.Transition)
	w, err := api.workspaceParam(c, actUpdate)
	e.workspaceOf(w)
	if err != nil {
		return err
	}
	if w.Deleted {
		return badRequest("Workspace %s is deleted", w.Name)
	}
	latest := w.LatestBuild
	if codersdk.ProvisionerJobStatus(latest.Job.Status()).Active() {
		return conflict("Build #%d of workspace %s is still %s; wait for it or cancel it", latest.BuildNumber, w.Name, latest.Job.Status())
	}
	ctx := c.Request.Context()
	if req.Transition == codersdk.WorkspaceTransitionStart {
		// Starting builds with the template; stopping and deleting stay
		// possible for a user the template is no longer shared with.
		t, err := api.db.TemplateByID(ctx, w.TemplateID)
		if err != nil {
			return err
		}
		if err := api.requireTemplateRole(c, t, codersdk.TemplateRoleUse); err != nil {
			return err
		}
		if err := api.refuseDormant(ctx, w); err != nil { // templateschedules.go
			return err
		}
	}
	versionID := latest.TemplateVersionID
	if req.TemplateVersionID != "" {
		versionID = req.TemplateVersionID
	}
	v, err := api.importedVersion(c, "template_version_id", versionID, w.TemplateID)
	if err != nil {
		return err
	}
	var previous []codersdk.WorkspaceBuildParameter
	if err := unmarshalList(latest.RichParameterValues, &previous); err != nil {
		return fmt.Errorf("decode parameters of build %s: %w", latest.ID, err)
	}
	build, err := api.prepareBuild(ctx, v, w.OwnerID, previous, req.RichParameterValues)
	if err != nil {
		return err
	}
	if req.Transition == codersdk.WorkspaceTransitionStart {
		owner, err := api.db.UserByID(ctx, w.OwnerID)
		if err != nil {
			return err
		}
		if err := api.requireExternalAuth(c, v, owner); err != nil {
			return err
		}
	}
	e.field("template_version", v.Name)
	err = e.inTx(ctx, http.StatusCreated, func(tx *database.DB) error {
		if req.Transition == codersdk.WorkspaceTransitionStart {
			if err := api.checkQuota(ctx, tx, w.OwnerID, w.ID, v.ID); err != nil { // quotas.go
				return err
			}
		}
		buildID, err := api.insertBuild(c, tx, w.ID, string(req.Transition), build)
		e.resource(buildID, "")
		return err
	})
	if err != nil {
		return err
	}
	w, err = api.db.WorkspaceByID(ctx, w.ID)
	if err != nil {
		return err
	}
	bs, err := api.convertBuilds(c, w, []database.WorkspaceBuild{w.LatestBuild})
	if err != nil {
		return err
	}
	c.JSON(http.StatusCreated, bs[0])
	return nil
}

func (api *API) workspaceBuilds(c *gin.Context) error {
	w, err := api.workspaceParam(c, actRead)
	if err != nil {
		return err
	}
	bs, err := api.db.WorkspaceBuilds(c.Request.Context(), w.ID)
	if err != nil {
		return err
	}
	out, err := api.convertBuilds(c, w, bs)
	if err != nil {
		return err
	}
	c.JSON(http.StatusOK, out)
	return nil
}

// buildParam loads the :build parameter and its workspace, checking access.
func (api *API) buildParam(c *gin.Context, act action) (database.Workspace, database.WorkspaceBuild, error) {
	ctx := c.Request.Context()
	b, err := api.db.WorkspaceBuildByID(ctx, c.Param("build"))
	if err != nil {
		return database.Workspace{}, b, notFoundAs("Workspace build", err)
	}
	w, err := api.db.WorkspaceByID(ctx, b.WorkspaceID)
	if err != nil {
		return w, b, err
	}
	if !can(actor(c), resWorkspace, actRead, w.OwnerID) {
		return w, b, notFound("Workspace build")
	}
	return w, b, authorize(c, resWorkspace, act, w.OwnerID)
}

func (api *API) workspaceBuild(c *gin.Context) error {
	w, b, err := api.buildParam(c, actRead)
	if err != nil {
		return err
	}
	out, err := api.convertBuilds(c, w, []database.WorkspaceBuild{b})
	if err != nil {
		return err
	}
	c.JSON(http.StatusOK, out[0])
	return nil
}

func (api *API) workspaceBuildLogs(c *gin.Context) error {
	_, b, err := api.buildParam(c, actRead)
	if err != nil {
		return err
	}
	return api.streamJobLogs(c, b.Job.ID)
}

func (api *API) workspaceBuildState(c *gin.Context) error {
	_, b, err := api.buildParam(c, actUpdate)
	if err != nil {
		return err
	}
	state, err := api.db.WorkspaceBuildState(c.Request.Context(), b.ID)
	if err != nil {
		return err
	}
	c.Data(http.StatusOK, "application/json", state)
	return nil
}

func (api *API) cancelWorkspaceBuild(c *gin.Context) error {
	_, b, err := api.buildParam(c, actUpdate)
	if err != nil {
		return err
	}
	return api.cancelJob(c, b.Job)
}
