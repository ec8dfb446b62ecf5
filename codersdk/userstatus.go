package codersdk

import (
	"context"
	"fmt"
	"net/http"
)

// User statuses (User.Status). A suspended user cannot log in, and the
// sessions and API tokens it has are refused until an owner activates it
// again.
const (
	UserStatusActive    = "active"
	UserStatusSuspended = "suspended"
)

// SuspendUser suspends user (an id or username; owners only, not
// themselves) and returns it as updated.
func (c *Client) SuspendUser(ctx context.Context, user string) (User, error) {
	return doJSON[User](ctx, c, http.MethodPut, fmt.Sprintf("/api/v2/users/%s/status/suspend", user), nil)
}

// ActivateUser activates user (an id or username; owners only) and returns
// it as updated.
func (c *Client) ActivateUser(ctx context.Context, user string) (User, error) {
	return doJSON[User](ctx, c, http.MethodPut, fmt.Sprintf("/api/v2/users/%s/status/activate", user), nil)
}
