package coderd

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strconv"

	"github.com/gin-gonic/gin"
	"github.com/google/uuid"

	"airgapcoder/coderd/database"
	"airgapcoder/coderd/parameters"
	"airgapcoder/codersdk"
)

var templateNameRe = regexp.MustCompile(`^[a-zA-Z0-9](?:[a-zA-Z0-9_-]{0,30}[a-zA-Z0-9])?$`)

func (api *API) convertTemplate(t database.Template) codersdk.Template {
	return codersdk.Template{
		ID: t.ID, CreatedAt: t.CreatedAt, UpdatedAt: t.UpdatedAt, OrganizationID: t.OrganizationID, OrganizationName: api.org.Name,
		Name: t.Name, DisplayName: t.DisplayName, Description: t.Description, Provisioner: "terraform",
		ActiveVersionID: t.ActiveVersionID, CreatedByID: t.CreatedBy, CreatedByName: t.CreatedByName,
	}
}

func (api *API) convertTemplateVersion(c *gin.Context, v database.TemplateVersion) (codersdk.TemplateVersion, error) {
	job, err := api.db.JobByID(c.Request.Context(), v.JobID)
	if err != nil {
		return codersdk.TemplateVersion{}, err
	}
	cj, err := api.convertJob(c, job)
	if err != nil {
		return codersdk.TemplateVersion{}, err
	}
	params := []codersdk.TemplateVersionParameter{}
	if err := unmarshalList(v.Parameters, &params); err != nil {
		return codersdk.TemplateVersion{}, fmt.Errorf("decode parameters of version %s: %w", v.ID, err)
	}
	parameters.Sort(params)
	vars := []codersdk.TemplateVersionVariable{}
	if err := unmarshalList(v.Variables, &vars); err != nil {
		return codersdk.TemplateVersion{}, fmt.Errorf("decode variables of version %s: %w", v.ID, err)
	}
	for i := range vars {
		if vars[i].Sensitive {
			vars[i].Value, vars[i].DefaultValue = "", ""
		}
	}
	var tags []codersdk.WorkspaceTagExpression
	if err := unmarshalList(v.WorkspaceTags, &tags); err != nil {
		return codersdk.TemplateVersion{}, fmt.Errorf("decode workspace tags of version %s: %w", v.ID, err)
	}
	return codersdk.TemplateVersion{
		ID: v.ID, TemplateID: v.TemplateID, OrganizationID: v.OrganizationID, CreatedAt: v.CreatedAt, UpdatedAt: v.UpdatedAt,
		Name: v.Name, Message: v.Message, Job: cj, CreatedBy: codersdk.MinimalUser{ID: v.CreatedBy, Username: v.CreatedByName},
		Parameters: params, Variables: vars, WorkspaceTags: tags, Archived: v.Archived,
	}, nil
}

func (api *API) postTemplateVersion(c *gin.Context) error {
	e := api.audit(c, codersdk.AuditActionCreate, codersdk.AuditResourceTemplateVersion)
	if err := api.orgParam(c); err != nil {
		return err
	}
	var req codersdk.CreateTemplateVersionRequest
	if err := decode(c, &req); err != nil {
		return err
	}
	// A new version of an existing template needs "admin" on it (its ACL
	// may grant that to a member); anything else needs template creation.
	if req.TemplateID == "" {
		if err := authorize(c, resTemplate, actCreate, ""); err != nil {
			return err
		}
	}
	if req.StorageMethod != "" && req.StorageMethod != "file" {
		return validation("storage_method", `must be "file"`)
	}
	if req.Provisioner != "" && req.Provisioner != "terraform" {
		return validation("provisioner", `must be "terraform"`)
	}
	if req.FileID == "" {
		return validation("file_id", "is required: upload the template tar to /api/v2/files first")
	}
	ctx := c.Request.Context()
	me := actor(c)
	file, err := api.db.FileByID(ctx, req.FileID)
	if errors.Is(err, database.ErrNotFound) {
		return validation("file_id", "no such file")
	}
	if err != nil {
		return err
	}
	var templateID *string
	if req.TemplateID != "" {
		t, err := api.db.TemplateByID(ctx, req.TemplateID)
		if errors.Is(err, database.ErrNotFound) {
			return validation("template_id", "no such template")
		}
		if err != nil {
			return err
		}
		if err := api.requireTemplateRole(c, t, codersdk.TemplateRoleAdmin); err != nil {
			return err
		}
		templateID = &t.ID
		e.field("template", t.Name)
	}
	tags, err := normalizeTags(req.Tags, me.ID)
	if err != nil {
		return validation("tags", err.Error())
	}
	seen := map[string]bool{}
	for _, vv := range req.UserVariableValues {
		if vv.Name == "" {
			return validation("user_variable_values", "every value needs the variable's name")
		}
		if seen[vv.Name] {
			return validation("user_variable_values", fmt.Sprintf("variable %q is given more than once", vv.Name))
		}
		seen[vv.Name] = true
	}
	userVars := req.UserVariableValues
	if userVars == nil {
		userVars = []codersdk.VariableValue{}
	}
	userVarsJSON, err := json.Marshal(userVars)
	if err != nil {
		return err
	}
	name := req.Name
	if name == "" {
		name = petName()
	}
	versionID := uuid.NewString()
	e.resource(versionID, name).field("file_id", file.ID).field("tags", tags)
	var v database.TemplateVersion
	err = e.inTx(ctx, http.StatusCreated, func(tx *database.DB) error {
		job, err := tx.InsertJob(ctx, database.InsertJobParams{
			OrganizationID: api.org.ID, InitiatorID: me.ID, Type: database.JobTypeTemplateVersionImport,
			Input: database.JobInput{TemplateVersionID: versionID}, Tags: tags, FileID: file.ID,
		})
		if err != nil {
			return err
		}
		v, err = tx.InsertTemplateVersion(ctx, database.TemplateVersion{
			ID: versionID, TemplateID: templateID, OrganizationID: api.org.ID, Name: name, Message: req.Message, JobID: job.ID, CreatedBy: me.ID,
			UserVariableValues: userVarsJSON,
		})
		return err
	})
	if err != nil {
		return err
	}
	out, err := api.convertTemplateVersion(c, v)
	if err != nil {
		return err
	}
	c.JSON(http.StatusCreated, out)
	return nil
}

func (api *API) versionParam(c *gin.Context) (database.TemplateVersion, error) {
	v, err := api.db.TemplateVersionByID(c.Request.Context(), c.Param("version"))
	if err != nil {
		return v, notFoundAs("Template version", err)
	}
	return v, authorize(c, resTemplate, actRead, "")
}

func (api *API) templateVersion(c *gin.Context) error {
	v, err := api.versionParam(c)
	if err != nil {
		return err
	}
	out, err := api.convertTemplateVersion(c, v)
	if err != nil {
		return err
	}
	c.JSON(http.StatusOK, out)
	return nil
}

func (api *API) templateVersionLogs(c *gin.Context) error {
	v, err := api.versionParam(c)
	if err != nil {
		return err
	}
	return api.streamJobLogs(c, v.JobID)
}

func (api *API) cancelTemplateVersion(c *gin.Context) error {
	v, err := api.versionParam(c)
	if err != nil {
		return err
	}
	if err := authorize(c, resTemplate, actUpdate, ""); err != nil {
		return err
	}
	j, err := api.jobOrNotFound(c, v.JobID, "Job")
	if err != nil {
		return err
	}
	return api.cancelJob(c, j)
}

// importedVersion loads a version that can back a template: imported
// successfully, and not attached to another template.
func (api *API) importedVersion(c *gin.Context, field, id, templateID string) (database.TemplateVersion, error) {
	ctx := c.Request.Context()
	v, err := api.db.TemplateVersionByID(ctx, id)
	if errors.Is(err, database.ErrNotFound) {
		return v, validation(field, "no such template version")
	}
	if err != nil {
		return v, err
	}
	if v.TemplateID != nil && *v.TemplateID != templateID {
		return v, validation(field, "the version belongs to another template")
	}
	if v.Archived {
		return v, errorf(http.StatusBadRequest, "Unarchive it first (coder templates versions unarchive).", "Template version %s is archived", v.Name)
	}
	job, err := api.db.JobByID(ctx, v.JobID)
	if err != nil {
		return v, err
	}
	if s := job.Status(); s != database.JobSucceeded {
		return v, errorf(http.StatusBadRequest, job.Error, "Template version %s has not been imported successfully (its job is %s)", v.Name, s)
	}
	return v, nil
}

func (api *API) postTemplate(c *gin.Context) error {
	e := api.audit(c, codersdk.AuditActionCreate, codersdk.AuditResourceTemplate)
	if err := api.orgParam(c); err != nil {
		return err
	}
	if err := authorize(c, resTemplate, actCreate, ""); err != nil {
		return err
	}
	var req codersdk.CreateTemplateRequest
	if err := decode(c, &req); err != nil {
		return err
	}
	if !templateNameRe.MatchString(req.Name) {
		return validation("name", "must be 1-32 letters, digits, '_' or inner '-'")
	}
	if req.TemplateVersionID == "" {
		return validation("template_version_id", "is required")
	}
	v, err := api.importedVersion(c, "template_version_id", req.TemplateVersionID, "")
	if err != nil {
		return err
	}
	e.resource("", req.Name).field("active_version_id", v.ID).field("active_version", v.Name)
	var t database.Template
	err = e.inTx(c.Request.Context(), http.StatusCreated, func(tx *database.DB) error {
		var err error
		t, err = tx.InsertTemplate(c.Request.Context(), database.Template{
			OrganizationID: api.org.ID, Name: req.Name, DisplayName: req.DisplayName, Description: req.Description,
			ActiveVersionID: v.ID, CreatedBy: actor(c).ID,
		})
		e.resource(t.ID, "")
		return err
	})
	if errors.Is(err, database.ErrConflict) {
		return conflict("A template named %q already exists", req.Name)
	}
	if err != nil {
		return err
	}
	return api.writeTemplate(c, http.StatusCreated, t) // templateschedules.go
}

func (api *API) templates(c *gin.Context) error {
	if err := api.orgParam(c); err != nil {
		return err
	}
	if err := authorize(c, resTemplate, actRead, ""); err != nil {
		return err
	}
	ts, err := api.db.Templates(c.Request.Context(), api.org.ID)
	if err != nil {
		return err
	}
	out := []codersdk.Template{}
	for _, t := range ts {
		ok, err := api.canSeeTemplate(c, t)
		if err != nil {
			return err
		}
		if ok {
			out = append(out, api.convertTemplate(t))
		}
	}
	if err := api.fillTemplateSchedules(c.Request.Context(), out); err != nil { // templateschedules.go
		return err
	}
	c.JSON(http.StatusOK, out)
	return nil
}

func (api *API) templateByName(c *gin.Context) error {
	if err := api.orgParam(c); err != nil {
		return err
	}
	if err := authorize(c, resTemplate, actRead, ""); err != nil {
		return err
	}
	t, err := api.db.TemplateByName(c.Request.Context(), api.org.ID, c.Param("name"))
	if err == nil {
		var ok bool
		if ok, err = api.canSeeTemplate(c, t); err == nil && !ok {
			err = database.ErrNotFound
		}
	}
	if err != nil {
		return notFoundAs(fmt.Sprintf("Template %q", c.Param("name")), err)
	}
	return api.writeTemplate(c, http.StatusOK, t) // templateschedules.go
}

func (api *API) templateParam(c *gin.Context, act action) (database.Template, error) {
	t, err := api.db.TemplateByID(c.Request.Context(), c.Param("template"))
	if err != nil {
		return t, notFoundAs("Template", err)
	}
	if err := authorize(c, resTemplate, act, ""); err != nil {
		return t, err
	}
	ok, err := api.canSeeTemplate(c, t)
	if err == nil && !ok {
		err = notFound("Template")
	}
	return t, err
}

func (api *API) template(c *gin.Context) error {
	t, err := api.templateParam(c, actRead)
	if err != nil {
		return err
	}
	return api.writeTemplate(c, http.StatusOK, t) // templateschedules.go
}

func (api *API) deleteTemplate(c *gin.Context) error {
	e, t, err := api.auditTemplate(c, codersdk.AuditActionDelete, func(c *gin.Context) (database.Template, error) {
		return api.templateParam(c, actDelete)
	})
	if err != nil {
		return err
	}
	ctx := c.Request.Context()
	err = e.inTx(ctx, http.StatusOK, func(tx *database.DB) error {
		n, err := tx.CountWorkspacesByTemplate(ctx, t.ID)
		if err != nil {
			return err
		}
		if n > 0 {
			return badRequest("Template %s is used by %d workspace(s); delete them first", t.Name, n)
		}
		return tx.DeleteTemplate(ctx, t.ID)
	})
	if err != nil {
		return err
	}
	c.JSON(http.StatusOK, codersdk.Response{Message: "Template deleted"})
	return nil
}

// templateVersions lists a template's versions, newest first; archived
// ones only with ?include_archived=true (as Coder).
func (api *API) templateVersions(c *gin.Context) error {
	t, err := api.templateParam(c, actRead)
	if err != nil {
		return err
	}
	includeArchived := false
	if s := c.Query("include_archived"); s != "" {
		if includeArchived, err = strconv.ParseBool(s); err != nil {
			return validation("include_archived", "must be true or false")
		}
	}
	vs, err := api.db.TemplateVersionsByTemplate(c.Request.Context(), t.ID)
	if err != nil {
		return err
	}
	out := []codersdk.TemplateVersion{}
	for _, v := range vs {
		if v.Archived && !includeArchived {
			continue
		}
		cv, err := api.convertTemplateVersion(c, v)
		if err != nil {
			return err
		}
		out = append(out, cv)
	}
	c.JSON(http.StatusOK, out)
	return nil
}

func (api *API) patchActiveVersion(c *gin.Context) error {
	e, t, err := api.auditTemplate(c, codersdk.AuditActionWrite, api.templateAdminParam)
	if err != nil {
		return err
	}
	var req codersdk.UpdateActiveTemplateVersion
	if err := decode(c, &req); err != nil {
		return err
	}
	v, err := api.importedVersion(c, "id", req.ID, t.ID)
	if err != nil {
		return err
	}
	ctx := c.Request.Context()
	e.field("active_version_id", v.ID).field("active_version", v.Name).field("previous_active_version_id", t.ActiveVersionID)
	err = e.inTx(ctx, http.StatusOK, func(tx *database.DB) error {
		if err := tx.AttachTemplateVersion(ctx, v.ID, t.ID); err != nil {
			return err
		}
		return tx.UpdateTemplateActiveVersion(ctx, t.ID, v.ID)
	})
	if err != nil {
		return err
	}
	c.JSON(http.StatusOK, codersdk.Response{Message: "Updated the active version"})
	return nil
}

var (
	petAdjectives = []string{"brave", "calm", "eager", "fair", "gentle", "happy", "jolly", "keen", "lucid", "merry", "nimble", "proud", "quiet", "swift", "witty"}
	petNouns      = []string{"otter", "falcon", "badger", "heron", "lynx", "marten", "osprey", "puffin", "raven", "stoat", "tern", "vole", "wren", "yak", "zebu"}
)

// petName names a version that the uploader did not name.
func petName() string {
	r := randomString(4)
	return fmt.Sprintf("%s_%s%s", petAdjectives[int(r[0])%len(petAdjectives)], petNouns[int(r[1])%len(petNouns)], r[2:])
}
