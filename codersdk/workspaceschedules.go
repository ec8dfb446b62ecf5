package codersdk

import (
	"context"
	"net/http"
	"time"
)

// Build reasons (WorkspaceBuild.Reason), as Coder's.
const (
	BuildReasonInitiator = "initiator"
	BuildReasonAutostart = "autostart"
	BuildReasonAutostop  = "autostop"
)

// UpdateWorkspaceAutostartRequest sets a workspace's autostart schedule;
// a nil or empty Schedule removes it.
type UpdateWorkspaceAutostartRequest struct {
	Schedule *string `json:"schedule"`
}

// UpdateWorkspaceTTLRequest sets a workspace's TTL; nil means none (the
// running build's deadline is removed too).
type UpdateWorkspaceTTLRequest struct {
	TTLMillis *int64 `json:"ttl_ms"`
}

// PutExtendWorkspaceRequest moves a running workspace's deadline.
type PutExtendWorkspaceRequest struct {
	Deadline time.Time `json:"deadline"`
}

// UpdateWorkspaceAutostart is PUT /api/v2/workspaces/{id}/autostart.
func (c *Client) UpdateWorkspaceAutostart(ctx context.Context, id string, req UpdateWorkspaceAutostartRequest) error {
	return c.do(ctx, http.MethodPut, "/api/v2/workspaces/"+id+"/autostart", req, nil, http.StatusNoContent)
}

// UpdateWorkspaceTTL is PUT /api/v2/workspaces/{id}/ttl.
func (c *Client) UpdateWorkspaceTTL(ctx context.Context, id string, req UpdateWorkspaceTTLRequest) error {
	return c.do(ctx, http.MethodPut, "/api/v2/workspaces/"+id+"/ttl", req, nil, http.StatusNoContent)
}

// PutExtendWorkspace is PUT /api/v2/workspaces/{id}/extend.
func (c *Client) PutExtendWorkspace(ctx context.Context, id string, req PutExtendWorkspaceRequest) error {
	return c.do(ctx, http.MethodPut, "/api/v2/workspaces/"+id+"/extend", req, nil)
}
