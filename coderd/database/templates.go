package database

import (
	"context"
	"time"

	"github.com/google/uuid"
)

// Template is a row of templates.
type Template struct {
	ID              string    `db:"id"`
	OrganizationID  string    `db:"organization_id"`
	Name            string    `db:"name"`
	DisplayName     string    `db:"display_name"`
	Description     string    `db:"description"`
	ActiveVersionID string    `db:"active_version_id"`
	CreatedBy       string    `db:"created_by"`
	CreatedByName   string    `db:"created_by_name"`
	CreatedAt       time.Time `db:"created_at"`
	UpdatedAt       time.Time `db:"updated_at"`
}

const templateSelect = `SELECT t.id, t.organization_id, t.name, t.display_name, t.description, t.active_version_id, t.created_by,
		u.username AS created_by_name, t.created_at, t.updated_at
	FROM templates t JOIN users u ON u.id = t.created_by`

// InsertTemplate creates a template and attaches its first version. As in
// Coder, the organization's Everyone group (whose id is the
// organization's) may use a new template.
func (db *DB) InsertTemplate(ctx context.Context, t Template) (Template, error) {
	now := db.now()
	t.ID = uuid.NewString()
	_, err := db.q().Exec(ctx, `INSERT INTO templates (id, organization_id, name, display_name, description, active_version_id, created_by, created_at, updated_at, group_acl)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $8, jsonb_build_object($2::uuid::text, 'use'))`, t.ID, t.OrganizationID, t.Name, t.DisplayName, t.Description, t.ActiveVersionID, t.CreatedBy, now)
	if err != nil {
		return Template{}, mapErr(err)
	}
	if _, err := db.q().Exec(ctx, `UPDATE template_versions SET template_id = $1, updated_at = $3 WHERE id = $2`, t.ID, t.ActiveVersionID, now); err != nil {
		return Template{}, err
	}
	return db.TemplateByID(ctx, t.ID)
}

// TemplateByID returns a template.
func (db *DB) TemplateByID(ctx context.Context, id string) (Template, error) {
	if uuid.Validate(id) != nil {
		return Template{}, ErrNotFound
	}
	return collectOne[Template](db.q().Query(ctx, templateSelect+` WHERE t.id = $1 AND NOT t.deleted`, id))
}

// TemplateByName returns the organization's template by name.
func (db *DB) TemplateByName(ctx context.Context, organizationID, name string) (Template, error) {
	return collectOne[Template](db.q().Query(ctx, templateSelect+` WHERE t.organization_id = $1 AND lower(t.name) = lower($2) AND NOT t.deleted`, organizationID, name))
}

// Templates lists the organization's templates by name.
func (db *DB) Templates(ctx context.Context, organizationID string) ([]Template, error) {
	return collectAll[Template](db.q().Query(ctx, templateSelect+` WHERE t.organization_id = $1 AND NOT t.deleted ORDER BY t.name`, organizationID))
}

// CountTemplates counts live templates.
func (db *DB) CountTemplates(ctx context.Context) (int64, error) {
	var n int64
	err := db.q().QueryRow(ctx, `SELECT count(*) FROM templates WHERE NOT deleted`).Scan(&n)
	return n, err
}

// UpdateTemplateActiveVersion promotes a version.
func (db *DB) UpdateTemplateActiveVersion(ctx context.Context, templateID, versionID string) error {
	_, err := db.q().Exec(ctx, `UPDATE templates SET active_version_id = $2, updated_at = $3 WHERE id = $1`, templateID, versionID, db.now())
	return err
}

// DeleteTemplate soft-deletes a template.
func (db *DB) DeleteTemplate(ctx context.Context, id string) error {
	_, err := db.q().Exec(ctx, `UPDATE templates SET deleted = true, updated_at = $2 WHERE id = $1`, id, db.now())
	return err
}

// TemplateVersion is a row of template_versions with its creator's name.
type TemplateVersion struct {
	ID             string  `db:"id"`
	TemplateID     *string `db:"template_id"`
	OrganizationID string  `db:"organization_id"`
	Name           string  `db:"name"`
	Message        string  `db:"message"`
	JobID          string  `db:"job_id"`
	CreatedBy      string  `db:"created_by"`
	CreatedByName  string  `db:"created_by_name"`
	Parameters     []byte  `db:"parameters"` // JSON array of codersdk.TemplateVersionParameter
	// UserVariableValues are the variable values given at creation (JSON
	// array of codersdk.VariableValue); Variables the variables the import
	// found, each with the value builds use (codersdk.TemplateVersionVariable);
	// WorkspaceTags the coder_workspace_tags entries
	// (codersdk.WorkspaceTagExpression).
	UserVariableValues []byte    `db:"user_variable_values"`
	Variables          []byte    `db:"variables"`
	WorkspaceTags      []byte    `db:"workspace_tags"`
	CreatedAt          time.Time `db:"created_at"`
	UpdatedAt          time.Time `db:"updated_at"`
	// Archived versions leave the version list and are never promoted.
	Archived bool `db:"archived"`
}

const templateVersionSelect = `SELECT v.id, v.template_id, v.organization_id, v.name, v.message, v.job_id, v.created_by,
		u.username AS created_by_name, v.parameters, v.user_variable_values, v.variables, v.workspace_tags, v.created_at, v.updated_at, v.archived
	FROM template_versions v JOIN users u ON u.id = v.created_by`

// InsertTemplateVersion records a version; its import job must exist.
func (db *DB) InsertTemplateVersion(ctx context.Context, v TemplateVersion) (TemplateVersion, error) {
	now := db.now()
	if v.ID == "" {
		v.ID = uuid.NewString()
	}
	if v.UserVariableValues == nil {
		v.UserVariableValues = []byte("[]")
	}
	_, err := db.q().Exec(ctx, `INSERT INTO template_versions (id, template_id, organization_id, name, message, job_id, created_by, user_variable_values, created_at, updated_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $9)`, v.ID, v.TemplateID, v.OrganizationID, v.Name, v.Message, v.JobID, v.CreatedBy, v.UserVariableValues, now)
	if err != nil {
		return TemplateVersion{}, mapErr(err)
	}
	return db.TemplateVersionByID(ctx, v.ID)
}

// TemplateVersionByID returns a version.
func (db *DB) TemplateVersionByID(ctx context.Context, id string) (TemplateVersion, error) {
	if uuid.Validate(id) != nil {
		return TemplateVersion{}, ErrNotFound
	}
	return collectOne[TemplateVersion](db.q().Query(ctx, templateVersionSelect+` WHERE v.id = $1`, id))
}

// TemplateVersionByJobID returns the version a job imports.
func (db *DB) TemplateVersionByJobID(ctx context.Context, jobID string) (TemplateVersion, error) {
	return collectOne[TemplateVersion](db.q().Query(ctx, templateVersionSelect+` WHERE v.job_id = $1`, jobID))
}

// TemplateVersionsByTemplate lists a template's versions, newest first.
func (db *DB) TemplateVersionsByTemplate(ctx context.Context, templateID string) ([]TemplateVersion, error) {
	return collectAll[TemplateVersion](db.q().Query(ctx, templateVersionSelect+` WHERE v.template_id = $1 ORDER BY v.created_at DESC`, templateID))
}

// SetTemplateVersionImport records what an import found: the parameters,
// the variables (with their values) and the workspace tags, each a JSON
// array.
func (db *DB) SetTemplateVersionImport(ctx context.Context, id string, params, variables, workspaceTags []byte) error {
	_, err := db.q().Exec(ctx, `UPDATE template_versions SET parameters = $2, variables = $3, workspace_tags = $4, updated_at = $5 WHERE id = $1`,
		id, params, variables, workspaceTags, db.now())
	return err
}

// AttachTemplateVersion links an unattached version to a template.
func (db *DB) AttachTemplateVersion(ctx context.Context, versionID, templateID string) error {
	_, err := db.q().Exec(ctx, `UPDATE template_versions SET template_id = $2, updated_at = $3 WHERE id = $1 AND (template_id IS NULL OR template_id = $2)`,
		versionID, templateID, db.now())
	return err
}
