package codersdk

import (
	"context"
	"encoding/json"
	"net/http"
	"time"
)

// AuditAction is what an audit record says was done.
type AuditAction string

// Audit actions. Names follow Coder's where Coder has the same thing.
const (
	AuditActionCreate AuditAction = "create"
	// AuditActionWrite changes a resource (a user's roles or profile, a
	// template's active version).
	AuditActionWrite  AuditAction = "write"
	AuditActionDelete AuditAction = "delete"
	AuditActionLogin  AuditAction = "login"
	AuditActionLogout AuditAction = "logout"
	// AuditActionStart, Stop and Delete (on workspace builds) are the
	// transition a build was asked for.
	AuditActionStart AuditAction = "start"
	AuditActionStop  AuditAction = "stop"
	// AuditActionConnect is one relayed connection into a workspace (SSH,
	// port forward, dev URL), recorded when it ends.
	AuditActionConnect AuditAction = "connect"
	// AuditActionUpgrade is a deployment starting on a version other than
	// the one it last ran (the appliance's upgrade or rollback).
	AuditActionUpgrade AuditAction = "upgrade"
	// AuditActionInstall is a deployment's first start, or the appliance
	// installing a release.
	AuditActionInstall AuditAction = "install"
	// AuditActionRollback is the appliance putting the previous release
	// and its database back after an upgrade failed.
	AuditActionRollback AuditAction = "rollback"
	// AuditActionRestore is the appliance restoring a database backup.
	AuditActionRestore AuditAction = "restore"
)

// AuditResourceType is the kind of thing an audit record is about.
type AuditResourceType string

// Audited resource types.
const (
	AuditResourceUser            AuditResourceType = "user"
	AuditResourceAPIKey          AuditResourceType = "api_key"
	AuditResourceTemplate        AuditResourceType = "template"
	AuditResourceTemplateVersion AuditResourceType = "template_version"
	AuditResourceWorkspace       AuditResourceType = "workspace"
	AuditResourceWorkspaceBuild  AuditResourceType = "workspace_build"
	// AuditResourceWorkspaceAgent is the target of relayed connections.
	AuditResourceWorkspaceAgent AuditResourceType = "workspace_agent"
	AuditResourceDeployment     AuditResourceType = "deployment"
	// AuditResourceGroup is a group: its creation, changes, deletion and
	// memberships (the OIDC group sync's too).
	AuditResourceGroup AuditResourceType = "group"
)

// Audit outcomes.
const (
	AuditOutcomeSuccess = "success"
	AuditOutcomeFailure = "failure"
)

// AuditLog is one audit record, in the shape of Coder's.
type AuditLog struct {
	ID string `json:"id"`
	// Time is when the action was done (a relayed connection: when it
	// ended; its start is in AdditionalFields).
	Time time.Time `json:"time"`
	// IP is the request's source address; "" when there was no request.
	IP           string            `json:"ip"`
	UserAgent    string            `json:"user_agent"`
	ResourceType AuditResourceType `json:"resource_type"`
	// ResourceID is the resource's id ("" when it was never created or
	// not found).
	ResourceID string `json:"resource_id"`
	// ResourceTarget is the resource's name as it was: a username, a
	// template, version or token name, the email a login tried.
	ResourceTarget string      `json:"resource_target"`
	Action         AuditAction `json:"action"`
	// StatusCode is the HTTP status the request was answered with (101 for
	// a relayed WebSocket connection).
	StatusCode int `json:"status_code"`
	// Outcome is AuditOutcomeSuccess or AuditOutcomeFailure.
	Outcome string `json:"outcome"`
	// AdditionalFields is a JSON object of what else is known: the email a
	// login tried, a build's transition, a connection's bytes and duration,
	// a failure's error message.
	AdditionalFields json.RawMessage `json:"additional_fields"`
	// Description says in a few words what was done, and how it failed.
	Description string `json:"description"`
	// WorkspaceOwner and WorkspaceName name the workspace the action
	// touched, "" for none.
	WorkspaceOwner string `json:"workspace_owner,omitempty"`
	WorkspaceName  string `json:"workspace_name,omitempty"`
	OrganizationID string `json:"organization_id"`
	// User is the actor; nil for anonymous requests and the deployment
	// itself.
	User *MinimalUser `json:"user"`
}

// Actor names the actor as a table shows it: the username, "system" for
// the deployment's own records, else "anonymous".
func (l AuditLog) Actor() string {
	switch {
	case l.User != nil && l.User.Username != "":
		return l.User.Username
	case l.ResourceType == AuditResourceDeployment:
		return "system"
	}
	return "anonymous"
}

// AuditLogResponse answers GET /api/v2/audit.
type AuditLogResponse struct {
	AuditLogs []AuditLog `json:"audit_logs"`
	Count     int64      `json:"count"`
}

// AuditLogsRequest selects audit records.
type AuditLogsRequest struct {
	// SearchQuery is the q parameter: space-separated key:value terms,
	// username: action: resource_type: workspace: (NAME or OWNER/NAME)
	// outcome: (success|failure) since: until: (RFC 3339 or YYYY-MM-DD).
	SearchQuery string
	// Limit caps the records returned (0: the server's default, 100).
	Limit  int
	Offset int
}

// AuditLogs lists audit records, newest first (owners only).
func (c *Client) AuditLogs(ctx context.Context, req AuditLogsRequest) (AuditLogResponse, error) {
	return doJSON[AuditLogResponse](ctx, c, http.MethodGet, listPath("/api/v2/audit", req.SearchQuery, req.Limit, req.Offset), nil)
}
