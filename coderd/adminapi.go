package coderd

import (
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/gin-gonic/gin"

	"airgapcoder/coderd/database"
	"airgapcoder/codersdk"
)

// The endpoints admins script that Coder's API has and the rest of coderd
// lacked: deleting a user, archiving template versions (hidden from the
// version list, as Coder's archive) and replacing a build's Terraform
// state (coder state push).

// deleteUser is DELETE /api/v2/users/{user} (owners). As Coder, it refuses
// the caller itself and a user who still owns workspaces; the user's
// sessions and tokens end with it.
func (api *API) deleteUser(c *gin.Context) error {
	e, u, err := api.auditUser(c, codersdk.AuditActionDelete)
	if err != nil {
		return err
	}
	if err := authorize(c, resUser, actDelete, ""); err != nil {
		return err
	}
	if u.ID == actor(c).ID {
		return badRequest("You cannot delete yourself")
	}
	ctx := c.Request.Context()
	e.field("email", u.Email).field("roles", u.Roles)
	err = e.inTx(ctx, http.StatusOK, func(tx *database.DB) error {
		n, err := tx.CountWorkspacesByOwner(ctx, u.ID)
		if err != nil {
			return err
		}
		if n > 0 {
			return errorf(http.StatusConflict, "Delete them first (`coder list --all` shows them), or ask their owner to.",
				"User %s owns %d workspace(s)", u.Username, n)
		}
		return tx.DeleteUser(ctx, u.ID)
	})
	api.authChanged() // here at once; other replicas hear the trigger's notification
	if err != nil {
		return err
	}
	c.JSON(http.StatusOK, codersdk.Response{Message: "User " + u.Username + " deleted"})
	return nil
}

// archiveTemplateVersions is POST /api/v2/templates/{template}/versions/archive
// (template admins): it archives the versions that are neither active nor
// used by a workspace's latest build and whose import failed, or with
// {"all": true} every such version, and names them.
func (api *API) archiveTemplateVersions(c *gin.Context) error {
	e, t, err := api.auditTemplate(c, codersdk.AuditActionWrite, api.templateAdminParam)
	if err != nil {
		return err
	}
	var req codersdk.ArchiveTemplateVersionsRequest
	if c.Request.ContentLength != 0 {
		if err := decode(c, &req); err != nil {
			return err
		}
	}
	ctx := c.Request.Context()
	resp := codersdk.ArchiveTemplateVersionsResponse{TemplateID: t.ID, ArchivedIDs: []string{}}
	e.field("all", req.All)
	err = e.inTx(ctx, http.StatusOK, func(tx *database.DB) error {
		vs, err := tx.TemplateVersionsByTemplate(ctx, t.ID)
		if err != nil {
			return err
		}
		inUse, err := tx.TemplateVersionsInUse(ctx, t.ID)
		if err != nil {
			return err
		}
		for _, v := range vs {
			if v.ID == t.ActiveVersionID || inUse[v.ID] || v.Archived {
				continue
			}
			job, err := tx.JobByID(ctx, v.JobID)
			if err != nil {
				return err
			}
			switch job.Status() {
			case database.JobFailed:
			case database.JobSucceeded, database.JobCanceled:
				if !req.All {
					continue
				}
			default: // pending or running: not unused yet
				continue
			}
			if err := tx.SetTemplateVersionArchived(ctx, v.ID, true); err != nil {
				return err
			}
			resp.ArchivedIDs = append(resp.ArchivedIDs, v.ID)
		}
		e.field("archived_ids", resp.ArchivedIDs)
		return nil
	})
	if err != nil {
		return err
	}
	c.JSON(http.StatusOK, resp)
	return nil
}

// setArchiveTemplateVersion is POST /api/v2/templateversions/{version}/archive
// and .../unarchive (template admins). The active version and a version a
// workspace's latest build uses cannot be archived.
func (api *API) setArchiveTemplateVersion(archive bool) func(c *gin.Context) error {
	return func(c *gin.Context) error {
		e := api.audit(c, codersdk.AuditActionWrite, codersdk.AuditResourceTemplateVersion).resource(c.Param("version"), "").field("archived", archive)
		ctx := c.Request.Context()
		v, err := api.db.TemplateVersionByID(ctx, c.Param("version"))
		if err != nil {
			return notFoundAs("Template version", err)
		}
		e.resource(v.ID, v.Name)
		if v.TemplateID == nil {
			return badRequest("Template version %s belongs to no template", v.Name)
		}
		t, err := api.db.TemplateByID(ctx, *v.TemplateID)
		if err != nil {
			return notFoundAs("Template", err)
		}
		if ok, err := api.canSeeTemplate(c, t); err != nil || !ok {
			if err == nil {
				err = notFound("Template version")
			}
			return err
		}
		if err := api.requireTemplateRole(c, t, codersdk.TemplateRoleAdmin); err != nil {
			return err
		}
		e.field("template", t.Name)
		if archive {
			if v.ID == t.ActiveVersionID {
				return badRequest("Version %s is the active version of template %s: promote another first", v.Name, t.Name)
			}
			inUse, err := api.db.TemplateVersionsInUse(ctx, t.ID)
			if err != nil {
				return err
			}
			if inUse[v.ID] {
				return badRequest("Version %s is used by workspaces of template %s: update them first", v.Name, t.Name)
			}
		}
		err = e.inTx(ctx, http.StatusOK, func(tx *database.DB) error {
			return tx.SetTemplateVersionArchived(ctx, v.ID, archive)
		})
		if err != nil {
			return err
		}
		verb := "unarchived"
		if archive {
			verb = "archived"
		}
		c.JSON(http.StatusOK, codersdk.Response{Message: "Template version " + v.Name + " " + verb})
		return nil
	}
}

// putWorkspaceBuildState is PUT /api/v2/workspacebuilds/{build}/state
// (owners): it replaces the Terraform state a build recorded, which the
// workspace's next build starts from (coder state push). The build's job
// must be over, so that it cannot write its own state over the new one.
func (api *API) putWorkspaceBuildState(c *gin.Context) error {
	e := api.audit(c, codersdk.AuditActionWrite, codersdk.AuditResourceWorkspaceBuild).resource(c.Param("build"), "").field("state", true)
	w, b, err := api.buildParam(c, actRead)
	e.workspaceOf(w).resource(b.ID, "")
	if err != nil {
		return err
	}
	// Anyone's workspace: an owner's, not the workspace owner's, power.
	if err := authorize(c, resWorkspace, actUpdate, ""); err != nil {
		return err
	}
	var req codersdk.UpdateWorkspaceBuildStateRequest
	if err := decode(c, &req); err != nil {
		return err
	}
	if len(req.State) == 0 || !json.Valid(req.State) {
		return validation("state", "must be Terraform state: a JSON document")
	}
	if codersdk.ProvisionerJobStatus(b.Job.Status()).Active() {
		return conflict("Build #%d of workspace %s is still %s; wait for it or cancel it", b.BuildNumber, w.Name, b.Job.Status())
	}
	ctx := c.Request.Context()
	e.field("build_number", b.BuildNumber).field("bytes", len(req.State))
	err = e.inTx(ctx, http.StatusOK, func(tx *database.DB) error {
		return tx.SetWorkspaceBuildState(ctx, b.ID, req.State)
	})
	if err != nil {
		return err
	}
	c.JSON(http.StatusOK, codersdk.Response{Message: "Updated the state of build #" + strconv.Itoa(int(b.BuildNumber))})
	return nil
}
