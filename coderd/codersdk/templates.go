package codersdk

import (
	"context"
	"fmt"
	"net/http"
	"time"
)

// Template is a named, versioned workspace definition.
type Template struct {
	ID               string    `json:"id"`
	CreatedAt        time.Time `json:"created_at"`
	UpdatedAt        time.Time `json:"updated_at"`
	OrganizationID   string    `json:"organization_id"`
	OrganizationName string    `json:"organization_name"`
	Name             string    `json:"name"`
	DisplayName      string    `json:"display_name"`
	Description      string    `json:"description"`
	Provisioner      string    `json:"provisioner"`
	ActiveVersionID  string    `json:"active_version_id"`
	CreatedByID      string    `json:"created_by_id"`
	CreatedByName    string    `json:"created_by_name"`
}

// CreateTemplateRequest creates a template from an imported version.
type CreateTemplateRequest struct {
	Name              string `json:"name"`
	DisplayName       string `json:"display_name,omitempty"`
	Description       string `json:"description,omitempty"`
	TemplateVersionID string `json:"template_version_id"`
}

// UpdateActiveTemplateVersion promotes a version.
type UpdateActiveTemplateVersion struct {
	ID string `json:"id"`
}

// TemplateVersion is one upload of a template's files and its import job.
type TemplateVersion struct {
	ID             string                     `json:"id"`
	TemplateID     *string                    `json:"template_id,omitempty"`
	OrganizationID string                     `json:"organization_id"`
	CreatedAt      time.Time                  `json:"created_at"`
	UpdatedAt      time.Time                  `json:"updated_at"`
	Name           string                     `json:"name"`
	Message        string                     `json:"message"`
	Job            ProvisionerJob             `json:"job"`
	CreatedBy      MinimalUser                `json:"created_by"`
	Parameters     []TemplateVersionParameter `json:"parameters"`
}

// CreateTemplateVersionRequest uploads a new version; it is imported by a
// provisioner job that carries Tags.
type CreateTemplateVersionRequest struct {
	Name          string            `json:"name,omitempty"`
	Message       string            `json:"message,omitempty"`
	TemplateID    string            `json:"template_id,omitempty"`
	StorageMethod string            `json:"storage_method"`
	FileID        string            `json:"file_id"`
	Provisioner   string            `json:"provisioner"`
	Tags          map[string]string `json:"tags,omitempty"`
}

// TemplateVersionParameter is a rich parameter a template declares.
type TemplateVersionParameter struct {
	Name         string `json:"name"`
	DisplayName  string `json:"display_name,omitempty"`
	Description  string `json:"description,omitempty"`
	Type         string `json:"type"`
	DefaultValue string `json:"default_value"`
	Required     bool   `json:"required"`
	Mutable      bool   `json:"mutable"`
}

// CreateTemplateVersion uploads a version into the organization.
func (c *Client) CreateTemplateVersion(ctx context.Context, org string, req CreateTemplateVersionRequest) (TemplateVersion, error) {
	var v TemplateVersion
	return v, c.do(ctx, http.MethodPost, fmt.Sprintf("/api/v2/organizations/%s/templateversions", org), req, &v, http.StatusCreated)
}

// TemplateVersion returns a version by id.
func (c *Client) TemplateVersion(ctx context.Context, id string) (TemplateVersion, error) {
	var v TemplateVersion
	return v, c.do(ctx, http.MethodGet, "/api/v2/templateversions/"+id, nil, &v)
}

// TemplateVersionLogs calls fn for each log line of the version's import job
// after the given id; with follow it returns when the job is done.
func (c *Client) TemplateVersionLogs(ctx context.Context, id string, after int64, follow bool, fn func(ProvisionerJobLog) error) error {
	return c.followJobLogs(ctx, "/api/v2/templateversions/"+id+"/logs", after, follow, fn)
}

// CancelTemplateVersion cancels the version's import job.
func (c *Client) CancelTemplateVersion(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodPatch, "/api/v2/templateversions/"+id+"/cancel", nil, nil)
}

// CreateTemplate creates a template in the organization.
func (c *Client) CreateTemplate(ctx context.Context, org string, req CreateTemplateRequest) (Template, error) {
	var t Template
	return t, c.do(ctx, http.MethodPost, fmt.Sprintf("/api/v2/organizations/%s/templates", org), req, &t, http.StatusCreated)
}

// Templates lists the organization's templates.
func (c *Client) Templates(ctx context.Context, org string) ([]Template, error) {
	var ts []Template
	return ts, c.do(ctx, http.MethodGet, fmt.Sprintf("/api/v2/organizations/%s/templates", org), nil, &ts)
}

// TemplateByName returns the organization's template named name.
func (c *Client) TemplateByName(ctx context.Context, org, name string) (Template, error) {
	var t Template
	return t, c.do(ctx, http.MethodGet, fmt.Sprintf("/api/v2/organizations/%s/templates/%s", org, name), nil, &t)
}

// Template returns a template by id.
func (c *Client) Template(ctx context.Context, id string) (Template, error) {
	var t Template
	return t, c.do(ctx, http.MethodGet, "/api/v2/templates/"+id, nil, &t)
}

// UpdateActiveTemplateVersion makes version the template's active version.
func (c *Client) UpdateActiveTemplateVersion(ctx context.Context, template string, req UpdateActiveTemplateVersion) error {
	return c.do(ctx, http.MethodPatch, "/api/v2/templates/"+template+"/versions", req, nil)
}

// TemplateVersionsByTemplate lists a template's versions.
func (c *Client) TemplateVersionsByTemplate(ctx context.Context, template string) ([]TemplateVersion, error) {
	var vs []TemplateVersion
	return vs, c.do(ctx, http.MethodGet, "/api/v2/templates/"+template+"/versions", nil, &vs)
}

// DeleteTemplate deletes a template that no workspace uses.
func (c *Client) DeleteTemplate(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, "/api/v2/templates/"+id, nil, nil)
}
