package codersdk

import (
	"context"
	"fmt"
	"net/http"
	"time"
)

// The provisioner protocol: a daemon registers with its name and tags, then
// long-polls for a job, streams logs with heartbeats while it works, and ends
// the job with complete or fail. Daemons authenticate with the deployment's
// pre-shared key (ProvisionerDaemonPSKHeader) or a user session token.

// ProvisionerDaemon is a registered daemon.
type ProvisionerDaemon struct {
	ID             string            `json:"id"`
	OrganizationID string            `json:"organization_id"`
	CreatedAt      time.Time         `json:"created_at"`
	LastSeenAt     *time.Time        `json:"last_seen_at,omitempty"`
	Name           string            `json:"name"`
	Version        string            `json:"version"`
	Tags           map[string]string `json:"tags"`
	Provisioners   []string          `json:"provisioners"`
	Status         string            `json:"status"`
	CurrentJobID   *string           `json:"current_job_id,omitempty"`
	// JobHeartbeatTimeoutMillis is how long coderd waits for a heartbeat
	// before failing a running job; daemons heartbeat well within it.
	JobHeartbeatTimeoutMillis int64 `json:"job_heartbeat_timeout_ms,omitempty"`
}

// Daemon statuses.
const (
	ProvisionerDaemonIdle    = "idle"
	ProvisionerDaemonBusy    = "busy"
	ProvisionerDaemonOffline = "offline"
)

// RegisterProvisionerDaemonRequest announces a daemon.
type RegisterProvisionerDaemonRequest struct {
	Name    string            `json:"name"`
	Version string            `json:"version"`
	Tags    map[string]string `json:"tags"`
}

// AcquiredJob is everything a daemon needs to run a job.
type AcquiredJob struct {
	JobID     string             `json:"job_id"`
	CreatedAt time.Time          `json:"created_at"`
	Type      ProvisionerJobType `json:"type"`
	// FileID is the template tar; fetch it with Download.
	FileID            string            `json:"file_id"`
	Tags              map[string]string `json:"tags"`
	TemplateVersionID string            `json:"template_version_id,omitempty"`
	TemplateID        string            `json:"template_id,omitempty"`
	TemplateName      string            `json:"template_name,omitempty"`
	// TemplateVersionName is what the provider reports as the template
	// version (coder_workspace.template_version).
	TemplateVersionName string `json:"template_version_name,omitempty"`
	// VariableValues are the template version's Terraform variables, passed
	// with -var on imports and builds alike.
	VariableValues []VariableValue `json:"variable_values,omitempty"`

	// Workspace builds only.
	WorkspaceBuildID string              `json:"workspace_build_id,omitempty"`
	WorkspaceID      string              `json:"workspace_id,omitempty"`
	WorkspaceName    string              `json:"workspace_name,omitempty"`
	WorkspaceOwnerID string              `json:"workspace_owner_id,omitempty"`
	WorkspaceOwner   string              `json:"workspace_owner,omitempty"`
	Transition       WorkspaceTransition `json:"transition,omitempty"`
	BuildNumber      int32               `json:"build_number,omitempty"`
	// Owner is what data "coder_workspace_owner" reads.
	Owner WorkspaceOwnerContext `json:"owner,omitempty"`
	// RichParameterValues are this build's values; PreviousParameterValues
	// those of the workspace's previous build (the provider validates
	// monotonic parameters against them).
	RichParameterValues     []WorkspaceBuildParameter `json:"rich_parameter_values,omitempty"`
	PreviousParameterValues []WorkspaceBuildParameter `json:"previous_parameter_values,omitempty"`
	// State is the Terraform state of the previous build.
	State []byte `json:"state,omitempty"`
	// ExternalAuthProviders are the workspace owner's fresh tokens for the
	// external auth providers the template version declares (data
	// "coder_external_auth"); the daemon hands each to Terraform as
	// CODER_EXTERNAL_AUTH_ACCESS_TOKEN_<id>, which the provider reads.
	// Providers the owner has not linked are absent (optional ones only:
	// a build needing an unlinked one is refused before it is queued).
	ExternalAuthProviders []ExternalAuthProviderToken `json:"external_auth_providers,omitempty"`
}

// ExternalAuthProviderToken is one provider's access token for a build.
type ExternalAuthProviderToken struct {
	ID          string `json:"id"`
	AccessToken string `json:"access_token"`
}

// TemplateVersionExternalAuthProvider is an external auth provider a
// template version declares with data "coder_external_auth": its id, and
// whether the data source says optional = true.
type TemplateVersionExternalAuthProvider struct {
	ID       string `json:"id"`
	Optional bool   `json:"optional,omitempty"`
}

// WorkspaceOwnerContext is the workspace owner as a build sees it.
type WorkspaceOwnerContext struct {
	FullName string   `json:"full_name,omitempty"`
	Email    string   `json:"email,omitempty"`
	Groups   []string `json:"groups,omitempty"`
	Roles    []string `json:"roles,omitempty"`
	// SessionToken is an API token of the owner that coderd minted for
	// this build (named after the workspace, valid for a day).
	SessionToken string `json:"session_token,omitempty"`
	// SSHPublicKey is the owner's SSH public key (authorized_keys line),
	// the one `coder publickey` prints.
	SSHPublicKey  string `json:"ssh_public_key,omitempty"`
	SSHPrivateKey string `json:"ssh_private_key,omitempty"`
	LoginType     string `json:"login_type,omitempty"`
}

// ProvisionerJobLogInput is a log line a daemon sends.
type ProvisionerJobLogInput struct {
	CreatedAt time.Time `json:"created_at"`
	Source    string    `json:"log_source"`
	Level     string    `json:"log_level"`
	Stage     string    `json:"stage"`
	Output    string    `json:"output"`
}

// UpdateJobRequest is a heartbeat, optionally with log lines.
type UpdateJobRequest struct {
	Logs []ProvisionerJobLogInput `json:"logs,omitempty"`
}

// UpdateJobResponse tells the daemon whether the job was canceled.
type UpdateJobResponse struct {
	Canceled bool `json:"canceled"`
}

// ProvisionedResource is a resource the daemon found in the applied state.
type ProvisionedResource struct {
	Type   string             `json:"type"`
	Name   string             `json:"name"`
	Agents []ProvisionedAgent `json:"agents,omitempty"`
	// Hide, Icon, DailyCost and Metadata come from a coder_metadata whose
	// resource_id is this resource's id.
	Hide      bool                        `json:"hide,omitempty"`
	Icon      string                      `json:"icon,omitempty"`
	DailyCost int32                       `json:"daily_cost,omitempty"`
	Metadata  []WorkspaceResourceMetadata `json:"metadata,omitempty"`
}

// ProvisionedAgent is a coder_agent found in the applied state, with the
// coder_app, coder_env and coder_script resources attached to it.
type ProvisionedAgent struct {
	ID              string `json:"id"`
	Name            string `json:"name"`
	Token           string `json:"token"`
	OperatingSystem string `json:"operating_system"`
	Architecture    string `json:"architecture"`
	Directory       string `json:"directory,omitempty"`
	// Env is the agent's env merged with its coder_env resources.
	Env map[string]string `json:"env,omitempty"`
	// Scripts are the agent's coder_script resources, plus its
	// startup_script ("Startup Script", run on start, blocking login when
	// startup_script_behavior is "blocking") and shutdown_script ("Shutdown
	// Script", run on stop), as Coder converts them.
	Scripts []AgentScript `json:"scripts,omitempty"`
	// Metadata are the agent's metadata blocks.
	Metadata []AgentMetadataDescription `json:"metadata,omitempty"`
	// ConnectionTimeoutSeconds is how long the agent may take to connect
	// before it counts as timed out.
	ConnectionTimeoutSeconds int32            `json:"connection_timeout_seconds,omitempty"`
	TroubleshootingURL       string           `json:"troubleshooting_url,omitempty"`
	MOTDFile                 string           `json:"motd_file,omitempty"`
	DisplayApps              *DisplayApps     `json:"display_apps,omitempty"`
	Order                    int32            `json:"order,omitempty"`
	Apps                     []ProvisionedApp `json:"apps,omitempty"`
}

// ProvisionedApp is a coder_app found in the applied state.
type ProvisionedApp struct {
	Slug        string          `json:"slug"`
	DisplayName string          `json:"display_name,omitempty"`
	URL         string          `json:"url,omitempty"`
	Port        int32           `json:"port,omitempty"`
	Command     string          `json:"command,omitempty"`
	Icon        string          `json:"icon,omitempty"`
	Subdomain   bool            `json:"subdomain,omitempty"`
	Share       string          `json:"share,omitempty"`
	External    bool            `json:"external,omitempty"`
	Healthcheck *AppHealthcheck `json:"healthcheck,omitempty"`
	Group       string          `json:"group,omitempty"`
	Order       int32           `json:"order,omitempty"`
	Hidden      bool            `json:"hidden,omitempty"`
	OpenIn      string          `json:"open_in,omitempty"`
	Tooltip     string          `json:"tooltip,omitempty"`
}

// AppHealthcheck is a coder_app's healthcheck block.
type AppHealthcheck struct {
	// URL is fetched (GET) from inside the workspace by its agent.
	URL string `json:"url"`
	// Interval is the number of seconds between checks, and how long one
	// check may take.
	Interval int32 `json:"interval"`
	// Threshold is how many failed checks in a row make the app unhealthy.
	Threshold int32 `json:"threshold"`
}

// Enabled reports whether h is a healthcheck the agent runs: a URL, and an
// interval and threshold above zero (the provider requires the three but
// does not check their values). An app whose healthcheck is not enabled
// has health "disabled".
func (h *AppHealthcheck) Enabled() bool {
	return h != nil && h.URL != "" && h.Interval > 0 && h.Threshold > 0
}

// DisplayApps is a coder_agent's display_apps block: which built-in apps
// the dashboard offers.
type DisplayApps struct {
	VSCode               bool `json:"vscode"`
	VSCodeInsiders       bool `json:"vscode_insiders"`
	WebTerminal          bool `json:"web_terminal"`
	SSHHelper            bool `json:"ssh_helper"`
	PortForwardingHelper bool `json:"port_forwarding_helper"`
}

// CompleteJobRequest ends a job successfully.
type CompleteJobRequest struct {
	// State is the Terraform state after a workspace build.
	State     []byte                `json:"state,omitempty"`
	Resources []ProvisionedResource `json:"resources,omitempty"`
	// Imports only: the template's coder_parameter blocks, its Terraform
	// variables and its coder_workspace_tags entries.
	Parameters    []TemplateVersionParameter `json:"parameters,omitempty"`
	Variables     []TemplateVersionVariable  `json:"variables,omitempty"`
	WorkspaceTags []WorkspaceTagExpression   `json:"workspace_tags,omitempty"`
	// ExternalAuthProviders are the template's data "coder_external_auth"
	// blocks (imports only).
	ExternalAuthProviders []TemplateVersionExternalAuthProvider `json:"external_auth_providers,omitempty"`
}

// FailJobRequest ends a job with an error.
type FailJobRequest struct {
	Error     string `json:"error"`
	ErrorCode string `json:"error_code,omitempty"`
	// State, when set, replaces the build's state (a partial apply).
	State []byte `json:"state,omitempty"`
}

// RegisterProvisionerDaemon announces a daemon and returns its record.
func (c *Client) RegisterProvisionerDaemon(ctx context.Context, req RegisterProvisionerDaemonRequest) (ProvisionerDaemon, error) {
	return doJSON[ProvisionerDaemon](ctx, c, http.MethodPost, "/api/v2/provisionerdaemons", req, http.StatusCreated, http.StatusOK)
}

// ProvisionerDaemons lists the registered daemons.
func (c *Client) ProvisionerDaemons(ctx context.Context) ([]ProvisionerDaemon, error) {
	return doJSON[[]ProvisionerDaemon](ctx, c, http.MethodGet, "/api/v2/provisionerdaemons", nil)
}

// AcquireJob waits up to wait for a job the daemon's tags match. It returns
// (nil, nil) when none arrived in time.
func (c *Client) AcquireJob(ctx context.Context, daemonID string, wait time.Duration) (*AcquiredJob, error) {
	path := fmt.Sprintf("/api/v2/provisionerdaemons/%s/acquire?wait=%s", daemonID, wait)
	resp, err := c.Request(ctx, http.MethodPost, path, nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusNoContent:
		return nil, nil
	case http.StatusOK:
		var j AcquiredJob
		return &j, decodeJSON(resp, &j)
	}
	return nil, ReadBodyAsError(resp)
}

// UpdateJob sends a heartbeat and log lines for a job the daemon holds.
func (c *Client) UpdateJob(ctx context.Context, daemonID, jobID string, req UpdateJobRequest) (UpdateJobResponse, error) {
	return doJSON[UpdateJobResponse](ctx, c, http.MethodPost, fmt.Sprintf("/api/v2/provisionerdaemons/%s/jobs/%s/update", daemonID, jobID), req)
}

// CompleteJob ends a job successfully.
func (c *Client) CompleteJob(ctx context.Context, daemonID, jobID string, req CompleteJobRequest) error {
	return c.do(ctx, http.MethodPost, fmt.Sprintf("/api/v2/provisionerdaemons/%s/jobs/%s/complete", daemonID, jobID), req, nil)
}

// FailJob ends a job with an error.
func (c *Client) FailJob(ctx context.Context, daemonID, jobID string, req FailJobRequest) error {
	return c.do(ctx, http.MethodPost, fmt.Sprintf("/api/v2/provisionerdaemons/%s/jobs/%s/fail", daemonID, jobID), req, nil)
}

// DaemonFile downloads the template tar of a job the daemon holds.
func (c *Client) DaemonFile(ctx context.Context, daemonID, fileID string) ([]byte, error) {
	return c.getBytes(ctx, fmt.Sprintf("/api/v2/provisionerdaemons/%s/files/%s", daemonID, fileID))
}
