package codersdk

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// WorkspaceStatus is derived from the latest build's transition and job.
type WorkspaceStatus string

// The workspace statuses, as in Coder.
const (
	WorkspaceStatusPending   WorkspaceStatus = "pending"
	WorkspaceStatusStarting  WorkspaceStatus = "starting"
	WorkspaceStatusRunning   WorkspaceStatus = "running"
	WorkspaceStatusStopping  WorkspaceStatus = "stopping"
	WorkspaceStatusStopped   WorkspaceStatus = "stopped"
	WorkspaceStatusFailed    WorkspaceStatus = "failed"
	WorkspaceStatusCanceling WorkspaceStatus = "canceling"
	WorkspaceStatusCanceled  WorkspaceStatus = "canceled"
	WorkspaceStatusDeleting  WorkspaceStatus = "deleting"
	WorkspaceStatusDeleted   WorkspaceStatus = "deleted"
)

// WorkspaceTransition is what a build does to a workspace.
type WorkspaceTransition string

// The transitions.
const (
	WorkspaceTransitionStart  WorkspaceTransition = "start"
	WorkspaceTransitionStop   WorkspaceTransition = "stop"
	WorkspaceTransitionDelete WorkspaceTransition = "delete"
)

// Workspace is a user's instance of a template.
type Workspace struct {
	ID                      string         `json:"id"`
	CreatedAt               time.Time      `json:"created_at"`
	UpdatedAt               time.Time      `json:"updated_at"`
	OwnerID                 string         `json:"owner_id"`
	OwnerName               string         `json:"owner_name"`
	OrganizationID          string         `json:"organization_id"`
	TemplateID              string         `json:"template_id"`
	TemplateName            string         `json:"template_name"`
	TemplateActiveVersionID string         `json:"template_active_version_id"`
	LatestBuild             WorkspaceBuild `json:"latest_build"`
	Outdated                bool           `json:"outdated"`
	Name                    string         `json:"name"`
	// TTLMillis is how long a start build runs before coderd stops it,
	// counted from the build's end and moved by activity; nil means until
	// stopped by hand (docs/schedules.md).
	TTLMillis *int64 `json:"ttl_ms,omitempty"`
	// AutostartSchedule is a weekly cron line with its time zone
	// ("CRON_TZ=Europe/Berlin 30 9 * * 1-5"); nil means no autostart.
	AutostartSchedule *string `json:"autostart_schedule,omitempty"`
	// LastUsedAt is the last activity the relay saw (zero: none yet).
	LastUsedAt time.Time `json:"last_used_at"`
	// DormantAt is when the workspace was marked dormant (nil: it is not);
	// a dormant workspace does not start until it is marked active again.
	DormantAt *time.Time `json:"dormant_at,omitempty"`
	// DeletingAt is when coderd deletes the dormant workspace (nil: never).
	DeletingAt *time.Time `json:"deleting_at,omitempty"`
}

// WorkspacesResponse lists workspaces.
type WorkspacesResponse struct {
	Workspaces []Workspace `json:"workspaces"`
	Count      int         `json:"count"`
}

// WorkspaceBuildParameter is a rich parameter value.
type WorkspaceBuildParameter struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// CreateWorkspaceRequest creates a workspace and its first build.
type CreateWorkspaceRequest struct {
	TemplateID          string                    `json:"template_id,omitempty"`
	TemplateVersionID   string                    `json:"template_version_id,omitempty"`
	Name                string                    `json:"name"`
	RichParameterValues []WorkspaceBuildParameter `json:"rich_parameter_values,omitempty"`
	// AutostartSchedule and TTLMillis are the new workspace's schedule, as
	// in Workspace; nil means none.
	AutostartSchedule *string `json:"autostart_schedule,omitempty"`
	TTLMillis         *int64  `json:"ttl_ms,omitempty"`
}

// WorkspaceBuild is one transition of a workspace.
type WorkspaceBuild struct {
	ID                  string                    `json:"id"`
	CreatedAt           time.Time                 `json:"created_at"`
	UpdatedAt           time.Time                 `json:"updated_at"`
	WorkspaceID         string                    `json:"workspace_id"`
	WorkspaceName       string                    `json:"workspace_name"`
	WorkspaceOwnerID    string                    `json:"workspace_owner_id"`
	WorkspaceOwnerName  string                    `json:"workspace_owner_name"`
	TemplateVersionID   string                    `json:"template_version_id"`
	TemplateVersionName string                    `json:"template_version_name"`
	BuildNumber         int32                     `json:"build_number"`
	Transition          WorkspaceTransition       `json:"transition"`
	InitiatorID         string                    `json:"initiator_id"`
	InitiatorUsername   string                    `json:"initiator_name"`
	Job                 ProvisionerJob            `json:"job"`
	Reason              string                    `json:"reason"`
	Resources           []WorkspaceResource       `json:"resources"`
	Status              WorkspaceStatus           `json:"status"`
	RichParameterValues []WorkspaceBuildParameter `json:"rich_parameter_values,omitempty"`
	// Deadline is when coderd stops a running start build (its
	// workspace's TTL after it ended, moved by activity and by
	// PUT /workspaces/{id}/extend); nil when there is none.
	Deadline *time.Time `json:"deadline,omitempty"`
	// MaxDeadline is the latest the deadline may be, from the template's
	// max_ttl_ms when the build started (as Coder's max_deadline); nil when
	// there is no limit.
	MaxDeadline *time.Time `json:"max_deadline,omitempty"`
}

// CreateWorkspaceBuildRequest starts, stops or deletes a workspace.
type CreateWorkspaceBuildRequest struct {
	TemplateVersionID   string                    `json:"template_version_id,omitempty"`
	Transition          WorkspaceTransition       `json:"transition"`
	RichParameterValues []WorkspaceBuildParameter `json:"rich_parameter_values,omitempty"`
	// Orphan deletes the workspace without destroying its resources.
	Orphan bool `json:"orphan,omitempty"`
}

// WorkspaceResource is a Terraform resource of a build.
type WorkspaceResource struct {
	ID         string           `json:"id"`
	CreatedAt  time.Time        `json:"created_at"`
	JobID      string           `json:"job_id"`
	Transition string           `json:"workspace_transition"`
	Type       string           `json:"type"`
	Name       string           `json:"name"`
	Agents     []WorkspaceAgent `json:"agents,omitempty"`
	// Hide, Icon, DailyCost and Metadata come from the template's
	// coder_metadata for this resource; sensitive values are never sent.
	Hide      bool                        `json:"hide,omitempty"`
	Icon      string                      `json:"icon,omitempty"`
	DailyCost int32                       `json:"daily_cost,omitempty"`
	Metadata  []WorkspaceResourceMetadata `json:"metadata,omitempty"`
}

// WorkspaceResourceMetadata is one item of a coder_metadata. A sensitive
// item's Value is empty in API answers.
type WorkspaceResourceMetadata struct {
	Key       string `json:"key"`
	Value     string `json:"value"`
	Sensitive bool   `json:"sensitive"`
}

// WorkspaceAgent is the agent a resource runs.
type WorkspaceAgent struct {
	ID              string         `json:"id"`
	CreatedAt       time.Time      `json:"created_at"`
	Name            string         `json:"name"`
	ResourceID      string         `json:"resource_id"`
	Status          string         `json:"status"`
	LifecycleState  string         `json:"lifecycle_state"`
	OperatingSystem string         `json:"operating_system"`
	Architecture    string         `json:"architecture"`
	Directory       string         `json:"directory,omitempty"`
	Apps            []WorkspaceApp `json:"apps"`
	// Version is the agent's build, as it reported it ("" before it has).
	Version string `json:"version,omitempty"`
	// ExpandedDirectory is Directory as the agent resolved it.
	ExpandedDirectory string `json:"expanded_directory,omitempty"`
	// ListeningPorts are the TCP ports the agent last saw listening in the
	// workspace; reach them with coder port-forward or their dev URL.
	ListeningPorts           []AgentListeningPort `json:"listening_ports"`
	FirstConnectedAt         *time.Time           `json:"first_connected_at,omitempty"`
	LastConnectedAt          *time.Time           `json:"last_connected_at,omitempty"`
	DisconnectedAt           *time.Time           `json:"disconnected_at,omitempty"`
	ConnectionTimeoutSeconds int32                `json:"connection_timeout_seconds"`
	TroubleshootingURL       string               `json:"troubleshooting_url,omitempty"`
	// Env is what sessions and scripts get (agent env and coder_env).
	Env         map[string]string `json:"environment_variables,omitempty"`
	Scripts     []AgentScript     `json:"scripts,omitempty"`
	DisplayApps *DisplayApps      `json:"display_apps,omitempty"`
	Order       int32             `json:"order,omitempty"`
	// Metadata are the agent's metadata blocks with their latest values.
	Metadata []AgentMetadata `json:"metadata,omitempty"`
}

// WorkspaceApp is a coder_app of an agent.
type WorkspaceApp struct {
	ID          string `json:"id"`
	Slug        string `json:"slug"`
	DisplayName string `json:"display_name"`
	URL         string `json:"url,omitempty"`
	Port        int32  `json:"port,omitempty"`
	Command     string `json:"command,omitempty"`
	Icon        string `json:"icon,omitempty"`
	Subdomain   bool   `json:"subdomain"`
	// SubdomainName is a subdomain app's host without the wildcard's
	// suffix ("<slug>--<agent>--<workspace>--<owner>", as Coder's); ""
	// when the deployment has no wildcard access URL (GET
	// /api/v2/applications/host) or the app is path-based.
	SubdomainName string          `json:"subdomain_name,omitempty"`
	Share         string          `json:"sharing_level"`
	External      bool            `json:"external"`
	Healthcheck   *AppHealthcheck `json:"healthcheck,omitempty"`
	// Health is one of the WorkspaceAppHealth values: "disabled" when the
	// app has no usable healthcheck, else what its agent last reported.
	Health  string `json:"health"`
	Group   string `json:"group,omitempty"`
	Order   int32  `json:"order,omitempty"`
	Hidden  bool   `json:"hidden"`
	OpenIn  string `json:"open_in,omitempty"`
	Tooltip string `json:"tooltip,omitempty"`
}

// App health values (WorkspaceApp.Health), as in Coder. An app with a
// healthcheck starts initializing; its agent checks it every interval and
// reports healthy after a check that passes (an HTTP answer below 500
// within the interval) and unhealthy after threshold checks in a row that
// fail.
const (
	WorkspaceAppHealthDisabled     = "disabled"
	WorkspaceAppHealthInitializing = "initializing"
	WorkspaceAppHealthHealthy      = "healthy"
	WorkspaceAppHealthUnhealthy    = "unhealthy"
)

// CreateWorkspace creates a workspace for user.
func (c *Client) CreateWorkspace(ctx context.Context, user string, req CreateWorkspaceRequest) (Workspace, error) {
	return doJSON[Workspace](ctx, c, http.MethodPost, fmt.Sprintf("/api/v2/users/%s/workspaces", user), req, http.StatusCreated)
}

// WorkspaceFilter narrows GET /api/v2/workspaces.
type WorkspaceFilter struct {
	// Owner is a username or "me".
	Owner string
	// Name matches workspace names containing it.
	Name string
	// Limit caps the number returned; 0 means no limit.
	Limit  int
	Offset int
}

// Workspaces lists the workspaces the caller may see.
func (c *Client) Workspaces(ctx context.Context, f WorkspaceFilter) (WorkspacesResponse, error) {
	var terms []string
	if f.Owner != "" {
		terms = append(terms, "owner:"+f.Owner)
	}
	if f.Name != "" {
		terms = append(terms, "name:"+f.Name)
	}
	return doJSON[WorkspacesResponse](ctx, c, http.MethodGet, listPath("/api/v2/workspaces", strings.Join(terms, " "), f.Limit, f.Offset), nil)
}

// Workspace returns a workspace by id.
func (c *Client) Workspace(ctx context.Context, id string) (Workspace, error) {
	return doJSON[Workspace](ctx, c, http.MethodGet, "/api/v2/workspaces/"+id, nil)
}

// WorkspaceByOwnerAndName returns owner's workspace called name.
func (c *Client) WorkspaceByOwnerAndName(ctx context.Context, owner, name string) (Workspace, error) {
	return doJSON[Workspace](ctx, c, http.MethodGet, fmt.Sprintf("/api/v2/users/%s/workspace/%s", owner, name), nil)
}

// CreateWorkspaceBuild queues a transition.
func (c *Client) CreateWorkspaceBuild(ctx context.Context, workspace string, req CreateWorkspaceBuildRequest) (WorkspaceBuild, error) {
	return doJSON[WorkspaceBuild](ctx, c, http.MethodPost, "/api/v2/workspaces/"+workspace+"/builds", req, http.StatusCreated)
}

// WorkspaceBuilds lists a workspace's builds, newest first.
func (c *Client) WorkspaceBuilds(ctx context.Context, workspace string) ([]WorkspaceBuild, error) {
	return doJSON[[]WorkspaceBuild](ctx, c, http.MethodGet, "/api/v2/workspaces/"+workspace+"/builds", nil)
}

// WorkspaceBuild returns a build by id.
func (c *Client) WorkspaceBuild(ctx context.Context, id string) (WorkspaceBuild, error) {
	return doJSON[WorkspaceBuild](ctx, c, http.MethodGet, "/api/v2/workspacebuilds/"+id, nil)
}

// WorkspaceBuildState returns the Terraform state a build left.
func (c *Client) WorkspaceBuildState(ctx context.Context, id string) ([]byte, error) {
	return c.getBytes(ctx, "/api/v2/workspacebuilds/"+id+"/state")
}

// WorkspaceBuildLogs calls fn for each log line of the build after the given
// id; with follow it returns when the build's job is done.
func (c *Client) WorkspaceBuildLogs(ctx context.Context, id string, after int64, follow bool, fn func(ProvisionerJobLog) error) error {
	return c.followJobLogs(ctx, "/api/v2/workspacebuilds/"+id+"/logs", after, follow, fn)
}

// CancelWorkspaceBuild cancels a pending or running build.
func (c *Client) CancelWorkspaceBuild(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodPatch, "/api/v2/workspacebuilds/"+id+"/cancel", nil, nil)
}

// UpdateWorkspaceDormancy is the body of PUT /api/v2/workspaces/{id}/dormant.
type UpdateWorkspaceDormancy struct {
	Dormant bool `json:"dormant"`
}

// UpdateWorkspaceDormancy marks a workspace dormant or active again.
func (c *Client) UpdateWorkspaceDormancy(ctx context.Context, id string, req UpdateWorkspaceDormancy) error {
	return c.do(ctx, http.MethodPut, "/api/v2/workspaces/"+id+"/dormant", req, nil, http.StatusNoContent)
}
