package codersdk

import (
	"context"
	"fmt"
	"net/http"
	"time"
)

// Role names. A user holds exactly the roles listed; "member" is implied.
const (
	RoleOwner         = "owner"
	RoleTemplateAdmin = "template-admin"
	RoleMember        = "member"
)

// Me stands for the calling user wherever a path takes a user.
const Me = "me"

// Role is a role held by a user.
type Role struct {
	Name        string `json:"name"`
	DisplayName string `json:"display_name"`
}

// User is one account.
type User struct {
	ID              string    `json:"id"`
	Username        string    `json:"username"`
	Name            string    `json:"name"` // full name; "" when not set
	Email           string    `json:"email"`
	CreatedAt       time.Time `json:"created_at"`
	LastSeenAt      time.Time `json:"last_seen_at"`
	Status          string    `json:"status"` // UserStatusActive or UserStatusSuspended
	Roles           []Role    `json:"roles"`
	OrganizationIDs []string  `json:"organization_ids"`
}

// HasRole reports whether u holds role.
func (u User) HasRole(role string) bool {
	for _, r := range u.Roles {
		if r.Name == role {
			return true
		}
	}
	return role == RoleMember
}

// MinimalUser names a user inside other resources.
type MinimalUser struct {
	ID       string `json:"id"`
	Username string `json:"username"`
}

// CreateFirstUserRequest creates the deployment's first owner.
type CreateFirstUserRequest struct {
	Email    string `json:"email"`
	Username string `json:"username"`
	Password string `json:"password"`
	Name     string `json:"name,omitempty"`
}

// CreateFirstUserResponse answers POST /api/v2/users/first.
type CreateFirstUserResponse struct {
	UserID         string `json:"user_id"`
	OrganizationID string `json:"organization_id"`
}

// CreateUserRequest creates a user (owners only).
type CreateUserRequest struct {
	Email    string `json:"email"`
	Username string `json:"username"`
	Password string `json:"password"`
	// Name is the user's full name (optional).
	Name string `json:"name,omitempty"`
	// Roles beyond member: "owner", "template-admin".
	Roles []string `json:"roles,omitempty"`
	// OrganizationIDs is accepted for compatibility; every user joins the
	// default organization.
	OrganizationIDs []string `json:"organization_ids,omitempty"`
}

// UpdateUserProfileRequest changes a user's username and full name, as
// PUT /api/v2/users/{user}/profile does in Coder. An empty Username keeps
// the current one.
type UpdateUserProfileRequest struct {
	Username string `json:"username,omitempty"`
	Name     string `json:"name"`
}

// GitSSHKey is a user's SSH public key: coderd generates one ed25519 key
// pair per user on first need and hands it to builds
// (data.coder_workspace_owner.ssh_public_key / ssh_private_key).
type GitSSHKey struct {
	UserID    string    `json:"user_id"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
	// PublicKey is an authorized_keys line.
	PublicKey string `json:"public_key"`
}

// UpdateRoles replaces a user's roles.
type UpdateRoles struct {
	Roles []string `json:"roles"`
}

// LoginWithPasswordRequest logs in with email and password.
type LoginWithPasswordRequest struct {
	Email    string `json:"email"`
	Password string `json:"password"`
}

// LoginWithPasswordResponse carries the new session token.
type LoginWithPasswordResponse struct {
	SessionToken string `json:"session_token"`
}

// GetUsersResponse lists users.
type GetUsersResponse struct {
	Users []User `json:"users"`
	Count int    `json:"count"`
}

// CreateFirstUser creates the first owner.
func (c *Client) CreateFirstUser(ctx context.Context, req CreateFirstUserRequest) (CreateFirstUserResponse, error) {
	return doJSON[CreateFirstUserResponse](ctx, c, http.MethodPost, "/api/v2/users/first", req, http.StatusCreated)
}

// HasFirstUser reports whether the deployment has its first user.
func (c *Client) HasFirstUser(ctx context.Context) (bool, error) {
	resp, err := c.Request(ctx, http.MethodGet, "/api/v2/users/first", nil)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
		return true, nil
	case http.StatusNotFound:
		return false, nil
	}
	return false, ReadBodyAsError(resp)
}

// LoginWithPassword exchanges email and password for a session token.
func (c *Client) LoginWithPassword(ctx context.Context, req LoginWithPasswordRequest) (LoginWithPasswordResponse, error) {
	return doJSON[LoginWithPasswordResponse](ctx, c, http.MethodPost, "/api/v2/users/login", req, http.StatusCreated)
}

// Logout ends the current session.
func (c *Client) Logout(ctx context.Context) error {
	return c.do(ctx, http.MethodPost, "/api/v2/users/logout", nil, nil)
}

// User returns a user by id, username or "me".
func (c *Client) User(ctx context.Context, user string) (User, error) {
	return doJSON[User](ctx, c, http.MethodGet, "/api/v2/users/"+user, nil)
}

// Users lists every user.
func (c *Client) Users(ctx context.Context) (GetUsersResponse, error) {
	return doJSON[GetUsersResponse](ctx, c, http.MethodGet, "/api/v2/users", nil)
}

// CreateUser creates a user.
func (c *Client) CreateUser(ctx context.Context, req CreateUserRequest) (User, error) {
	return doJSON[User](ctx, c, http.MethodPost, "/api/v2/users", req, http.StatusCreated)
}

// UpdateUserProfile changes user's username and full name.
func (c *Client) UpdateUserProfile(ctx context.Context, user string, req UpdateUserProfileRequest) (User, error) {
	return doJSON[User](ctx, c, http.MethodPut, fmt.Sprintf("/api/v2/users/%s/profile", user), req)
}

// GitSSHKey returns user's SSH public key, generating the key pair on
// first use.
func (c *Client) GitSSHKey(ctx context.Context, user string) (GitSSHKey, error) {
	return doJSON[GitSSHKey](ctx, c, http.MethodGet, fmt.Sprintf("/api/v2/users/%s/gitsshkey", user), nil)
}

// UpdateUserRoles replaces the roles of user.
func (c *Client) UpdateUserRoles(ctx context.Context, user string, roles []string) (User, error) {
	return doJSON[User](ctx, c, http.MethodPut, fmt.Sprintf("/api/v2/users/%s/roles", user), UpdateRoles{Roles: roles})
}

// APIKey describes a session or API token without its secret.
type APIKey struct {
	ID              string    `json:"id"`
	UserID          string    `json:"user_id"`
	LastUsed        time.Time `json:"last_used"`
	ExpiresAt       time.Time `json:"expires_at"`
	CreatedAt       time.Time `json:"created_at"`
	LoginType       string    `json:"login_type"`
	TokenName       string    `json:"token_name"`
	LifetimeSeconds int64     `json:"lifetime_seconds"`
}

// CreateTokenRequest asks for a new API token. Lifetime is in nanoseconds,
// as in Coder's API.
type CreateTokenRequest struct {
	Lifetime  time.Duration `json:"lifetime"`
	TokenName string        `json:"token_name"`
}

// GenerateAPIKeyResponse carries a new token's secret, shown once.
type GenerateAPIKeyResponse struct {
	Key string `json:"key"`
}

// CreateToken creates an API token for user.
func (c *Client) CreateToken(ctx context.Context, user string, req CreateTokenRequest) (GenerateAPIKeyResponse, error) {
	return doJSON[GenerateAPIKeyResponse](ctx, c, http.MethodPost, fmt.Sprintf("/api/v2/users/%s/keys/tokens", user), req, http.StatusCreated)
}

// Tokens lists user's API tokens.
func (c *Client) Tokens(ctx context.Context, user string) ([]APIKey, error) {
	return doJSON[[]APIKey](ctx, c, http.MethodGet, fmt.Sprintf("/api/v2/users/%s/keys/tokens", user), nil)
}

// DeleteAPIKey removes one of user's keys.
func (c *Client) DeleteAPIKey(ctx context.Context, user, id string) error {
	return c.do(ctx, http.MethodDelete, fmt.Sprintf("/api/v2/users/%s/keys/%s", user, id), nil, nil, http.StatusNoContent)
}

// LogoutAll ends every session of a user and deletes its API tokens.
func (c *Client) LogoutAll(ctx context.Context, user string) error {
	return c.do(ctx, http.MethodPost, fmt.Sprintf("/api/v2/users/%s/logout-all", user), nil, nil, http.StatusNoContent)
}

// Organization is a tenant; this product has one, the default.
type Organization struct {
	ID          string    `json:"id"`
	Name        string    `json:"name"`
	DisplayName string    `json:"display_name"`
	IsDefault   bool      `json:"is_default"`
	CreatedAt   time.Time `json:"created_at"`
}

// Organization returns an organization by id, name or "default".
func (c *Client) Organization(ctx context.Context, org string) (Organization, error) {
	return doJSON[Organization](ctx, c, http.MethodGet, "/api/v2/organizations/"+org, nil)
}
