package codersdk

import (
	"context"
	"fmt"
	"net/http"
)

// WorkspaceQuota is a user's workspace quota, in credits a day, as Coder's
// GET /api/v2/workspace-quota/{user}.
type WorkspaceQuota struct {
	// CreditsConsumed is the daily cost of the user's workspaces whose
	// latest build starts them.
	CreditsConsumed int `json:"credits_consumed"`
	// Budget is the sum of the quota allowances of the user's groups,
	// Everyone included. It is 0 when quotas are off.
	Budget int `json:"budget"`
	// Enabled reports whether quotas are enforced: some group has a non-zero
	// quota allowance. When false, workspaces are unlimited.
	Enabled bool `json:"enabled"`
}

// WorkspaceQuota returns a user's workspace quota (Me for the caller).
func (c *Client) WorkspaceQuota(ctx context.Context, user string) (WorkspaceQuota, error) {
	return doJSON[WorkspaceQuota](ctx, c, http.MethodGet, fmt.Sprintf("/api/v2/workspace-quota/%s", user), nil)
}
