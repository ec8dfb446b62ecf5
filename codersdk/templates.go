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
	TemplateScheduleFields
}

// TemplateScheduleFields are a template's schedule defaults and dormancy
// rules, in milliseconds as Coder's; 0 means off.
type TemplateScheduleFields struct {
	// DefaultTTLMillis is the TTL of a workspace created without ttl_ms.
	DefaultTTLMillis int64 `json:"default_ttl_ms"`
	// ActivityBumpMillis is how far activity moves a running workspace's
	// deadline; 0 means by the workspace's TTL.
	ActivityBumpMillis int64 `json:"activity_bump_ms"`
	// TimeTilDormantMillis is how long a stopped workspace may go unused
	// before it is marked dormant.
	TimeTilDormantMillis int64 `json:"time_til_dormant_ms"`
	// TimeTilDormantAutoDeleteMillis is how long a dormant workspace lives
	// before coderd deletes it.
	TimeTilDormantAutoDeleteMillis int64 `json:"time_til_dormant_autodelete_ms"`
	// MaxTTLMillis is Coder's max_ttl: the longest TTL a workspace of the
	// template may ask for, and the longest a start build runs (activity
	// does not move its deadline past the build's max_deadline).
	MaxTTLMillis int64 `json:"max_ttl_ms"`
}

// UpdateTemplateMeta is the body of PATCH /api/v2/templates/{id}; fields
// left out keep their value.
type UpdateTemplateMeta struct {
	DefaultTTLMillis               *int64 `json:"default_ttl_ms,omitempty"`
	ActivityBumpMillis             *int64 `json:"activity_bump_ms,omitempty"`
	TimeTilDormantMillis           *int64 `json:"time_til_dormant_ms,omitempty"`
	TimeTilDormantAutoDeleteMillis *int64 `json:"time_til_dormant_autodelete_ms,omitempty"`
	MaxTTLMillis                   *int64 `json:"max_ttl_ms,omitempty"`
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
	Variables      []TemplateVersionVariable  `json:"variables"`
	// WorkspaceTags are the template's coder_workspace_tags entries; each
	// workspace build's job carries them, evaluated, as provisioner tags.
	WorkspaceTags []WorkspaceTagExpression `json:"workspace_tags,omitempty"`
	// Archived versions are left out of the list unless asked for and are
	// never promoted or built.
	Archived bool `json:"archived"`
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
	// UserVariableValues set the template's Terraform variables.
	UserVariableValues []VariableValue `json:"user_variable_values,omitempty"`
}

// TemplateVersionParameter is a rich parameter a template declares with a
// `data "coder_parameter"` block of the official coder/coder provider. The
// fields mirror the block's arguments; see docs/templates.md.
type TemplateVersionParameter struct {
	Name        string `json:"name"`
	DisplayName string `json:"display_name,omitempty"`
	Description string `json:"description,omitempty"`
	// Type is ParameterTypeString, ParameterTypeNumber, ParameterTypeBool or
	// ParameterTypeListString.
	Type string `json:"type"`
	// FormType is the provider's form_type (input, textarea, dropdown,
	// radio, checkbox, switch, multi-select, tag-select, slider, error), as
	// the provider fills it in from the type when the template leaves it out.
	FormType     string `json:"form_type,omitempty"`
	DefaultValue string `json:"default_value"`
	Icon         string `json:"icon,omitempty"`
	// Required is true when the block has no default: a value must be given.
	Required bool `json:"required"`
	// Mutable parameters may change after the workspace's first build;
	// immutable ones keep their first value.
	Mutable bool `json:"mutable"`
	// Ephemeral values apply to one build only and are never stored.
	Ephemeral bool                             `json:"ephemeral"`
	Options   []TemplateVersionParameterOption `json:"options,omitempty"`
	// Validation: a regex (string parameters) with ValidationError as the
	// message, an inclusive min/max (number parameters) and a monotonic
	// rule ("increasing" or "decreasing") against the previous value.
	ValidationRegex     string `json:"validation_regex,omitempty"`
	ValidationError     string `json:"validation_error,omitempty"`
	ValidationMin       *int32 `json:"validation_min,omitempty"`
	ValidationMax       *int32 `json:"validation_max,omitempty"`
	ValidationMonotonic string `json:"validation_monotonic,omitempty"`
	// Order sorts parameters for forms and prompts (then by name).
	Order int32 `json:"order"`
}

// TemplateVersionParameterOption is one choice of an option-list parameter.
type TemplateVersionParameterOption struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	Value       string `json:"value"`
	Icon        string `json:"icon,omitempty"`
}

// Parameter types, as the provider spells them.
const (
	ParameterTypeString     = "string"
	ParameterTypeNumber     = "number"
	ParameterTypeBool       = "bool"
	ParameterTypeListString = "list(string)"
)

// TemplateVersionVariable is a Terraform `variable` of a template: set once
// per template version (`coder templates push --variable k=v`), not per
// workspace. Values are passed to terraform with -var on the import and on
// every build of the version.
type TemplateVersionVariable struct {
	Name         string `json:"name"`
	Description  string `json:"description,omitempty"`
	Type         string `json:"type"`
	Value        string `json:"value"`
	DefaultValue string `json:"default_value"`
	Required     bool   `json:"required"`
	Sensitive    bool   `json:"sensitive"`
}

// VariableValue is a template variable's value given at push.
type VariableValue struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// WorkspaceTagExpression is one entry of a template's
// `data "coder_workspace_tags"` block as written: HCL source text of the key
// and of the value. coderd evaluates them per workspace build against the
// build's parameter values and the template's variables; see
// docs/templates.md for what an expression may reference.
type WorkspaceTagExpression struct {
	Key   string `json:"key"`
	Value string `json:"value"`
	// References maps each "data.coder_parameter.<label>" this entry's
	// key or value refers to, to that parameter's name, so that coderd can
	// bind data.coder_parameter.<label>.value to the build's value.
	References map[string]string `json:"references,omitempty"`
}

// CreateTemplateVersion uploads a version into the organization.
func (c *Client) CreateTemplateVersion(ctx context.Context, org string, req CreateTemplateVersionRequest) (TemplateVersion, error) {
	return doJSON[TemplateVersion](ctx, c, http.MethodPost, fmt.Sprintf("/api/v2/organizations/%s/templateversions", org), req, http.StatusCreated)
}

// TemplateVersion returns a version by id.
func (c *Client) TemplateVersion(ctx context.Context, id string) (TemplateVersion, error) {
	return doJSON[TemplateVersion](ctx, c, http.MethodGet, "/api/v2/templateversions/"+id, nil)
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
	return doJSON[Template](ctx, c, http.MethodPost, fmt.Sprintf("/api/v2/organizations/%s/templates", org), req, http.StatusCreated)
}

// Templates lists the organization's templates.
func (c *Client) Templates(ctx context.Context, org string) ([]Template, error) {
	return doJSON[[]Template](ctx, c, http.MethodGet, fmt.Sprintf("/api/v2/organizations/%s/templates", org), nil)
}

// TemplateByName returns the organization's template named name.
func (c *Client) TemplateByName(ctx context.Context, org, name string) (Template, error) {
	return doJSON[Template](ctx, c, http.MethodGet, fmt.Sprintf("/api/v2/organizations/%s/templates/%s", org, name), nil)
}

// Template returns a template by id.
func (c *Client) Template(ctx context.Context, id string) (Template, error) {
	return doJSON[Template](ctx, c, http.MethodGet, "/api/v2/templates/"+id, nil)
}

// UpdateActiveTemplateVersion makes version the template's active version.
func (c *Client) UpdateActiveTemplateVersion(ctx context.Context, template string, req UpdateActiveTemplateVersion) error {
	return c.do(ctx, http.MethodPatch, "/api/v2/templates/"+template+"/versions", req, nil)
}

// TemplateVersionsByTemplate lists a template's versions.
func (c *Client) TemplateVersionsByTemplate(ctx context.Context, template string) ([]TemplateVersion, error) {
	return doJSON[[]TemplateVersion](ctx, c, http.MethodGet, "/api/v2/templates/"+template+"/versions", nil)
}

// DeleteTemplate deletes a template that no workspace uses.
func (c *Client) DeleteTemplate(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, "/api/v2/templates/"+id, nil, nil)
}

// UpdateTemplateMeta changes a template's schedule defaults (template
// admins).
func (c *Client) UpdateTemplateMeta(ctx context.Context, id string, req UpdateTemplateMeta) (Template, error) {
	return doJSON[Template](ctx, c, http.MethodPatch, "/api/v2/templates/"+id, req)
}
