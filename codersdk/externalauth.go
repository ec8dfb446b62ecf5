package codersdk

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"time"
)

// External auth (issue 33), in the shapes of Coder's API: a deployment
// names OAuth2 providers (the site's Git server, say); each user links
// their account once, and workspaces get that user's fresh token from the
// agent's endpoint (git through `coder gitaskpass`) and builds from the
// provisioner's environment.

// ExternalAuthCallbackPath is where a provider's OAuth2 flow starts
// (without a code) and ends (with one), as in Coder: register
// ACCESS_URL/external-auth/<id>/callback with the provider.
func ExternalAuthCallbackPath(id string) string {
	return "/external-auth/" + url.PathEscape(id) + "/callback"
}

// ExternalAuthPagePath is the dashboard page that links or unlinks a
// provider: what a workspace prints when the user has not linked yet.
func ExternalAuthPagePath(id string) string { return "/external-auth/" + url.PathEscape(id) }

// ExternalAuthLinkProvider is a configured provider as the API lists it.
type ExternalAuthLinkProvider struct {
	ID          string `json:"id"`
	Type        string `json:"type"`
	DisplayName string `json:"display_name"`
	DisplayIcon string `json:"display_icon"`
	// Regex matches the Git remote URLs the provider's tokens are for.
	Regex string `json:"regex"`
}

// ExternalAuthLink is the signed-in user's link to one provider.
type ExternalAuthLink struct {
	ProviderID      string    `json:"provider_id"`
	CreatedAt       time.Time `json:"created_at"`
	UpdatedAt       time.Time `json:"updated_at"`
	HasRefreshToken bool      `json:"has_refresh_token"`
	Expires         time.Time `json:"expires"`
	Authenticated   bool      `json:"authenticated"`
	ValidateError   string    `json:"validate_error,omitempty"`
}

// ListUserExternalAuthResponse is GET /api/v2/external-auth.
type ListUserExternalAuthResponse struct {
	Providers []ExternalAuthLinkProvider `json:"providers"`
	Links     []ExternalAuthLink         `json:"links"`
}

// ExternalAuthUser is the provider's account a link belongs to, when the
// provider's validate URL says who that is.
type ExternalAuthUser struct {
	ID         int64  `json:"id"`
	Login      string `json:"login"`
	AvatarURL  string `json:"avatar_url"`
	ProfileURL string `json:"profile_url"`
	Name       string `json:"name"`
}

// ExternalAuth is GET /api/v2/external-auth/{id}: one provider and whether
// the signed-in user has a valid link to it.
type ExternalAuth struct {
	Authenticated bool   `json:"authenticated"`
	Device        bool   `json:"device"`
	DisplayName   string `json:"display_name"`
	// User is the provider's account, when known.
	User *ExternalAuthUser `json:"user"`
	// AppInstallable and Installations: GitHub apps only (always false and
	// empty here, kept for Coder's shape).
	AppInstallable bool   `json:"app_installable"`
	Installations  []any  `json:"installations"`
	AppInstallURL  string `json:"app_install_url"`
	// SupportsRevocation: whether unlinking also revokes at the provider.
	SupportsRevocation bool `json:"supports_revocation"`
}

// ExternalAuthRequest is the agent's question: the token for a provider,
// chosen by ID or by a Git remote URL its regex matches (Match). Listen
// waits until the user links the provider (or ctx ends).
type ExternalAuthRequest struct {
	ID     string
	Match  string
	Listen bool
}

// ExternalAuthResponse is the agent endpoint's answer, as Coder's agentsdk
// has it: with a link, the access token (and, for git, Username and
// Password as the provider type wants them); without one, URL is the page
// that links it and the token fields are empty.
type ExternalAuthResponse struct {
	AccessToken string         `json:"access_token"`
	TokenExtra  map[string]any `json:"token_extra"`
	URL         string         `json:"url"`
	Type        string         `json:"type"`
	// Username and Password are what git should be told (Coder's rule per
	// provider type: e.g. oauth2 and the token, or the token and "").
	Username string `json:"username"`
	Password string `json:"password"`
}

// ListExternalAuths lists the providers and the signed-in user's links.
func (c *Client) ListExternalAuths(ctx context.Context) (ListUserExternalAuthResponse, error) {
	return doJSON[ListUserExternalAuthResponse](ctx, c, http.MethodGet, "/api/v2/external-auth", nil)
}

// ExternalAuthByID is one provider and the signed-in user's link to it.
func (c *Client) ExternalAuthByID(ctx context.Context, id string) (ExternalAuth, error) {
	return doJSON[ExternalAuth](ctx, c, http.MethodGet, "/api/v2/external-auth/"+url.PathEscape(id), nil)
}

// UnlinkExternalAuth deletes the signed-in user's link to a provider.
func (c *Client) UnlinkExternalAuth(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, "/api/v2/external-auth/"+url.PathEscape(id), nil, nil, http.StatusOK, http.StatusNoContent)
}

// WorkspaceAgentExternalAuth asks, as the agent (the client's session
// token is the agent token), for the workspace owner's token:
// GET /api/v2/workspaceagents/me/external-auth?id=|match=&listen=.
func (c *Client) WorkspaceAgentExternalAuth(ctx context.Context, req ExternalAuthRequest) (ExternalAuthResponse, error) {
	q := url.Values{}
	if req.ID != "" {
		q.Set("id", req.ID)
	}
	if req.Match != "" {
		q.Set("match", req.Match)
	}
	if req.Listen {
		q.Set("listen", "true")
	}
	var r ExternalAuthResponse
	if err := c.do(ctx, http.MethodGet, "/api/v2/workspaceagents/me/external-auth?"+q.Encode(), nil, &r); err != nil {
		return r, fmt.Errorf("external auth: %w", err)
	}
	return r, nil
}

// TemplateVersionExternalAuth is a provider a template version declares
// (data "coder_external_auth"), as GET
// /api/v2/templateversions/{id}/external-auth lists them for the signed-in
// user, in Coder's shape.
type TemplateVersionExternalAuth struct {
	ID          string `json:"id"`
	Type        string `json:"type"`
	DisplayName string `json:"display_name"`
	DisplayIcon string `json:"display_icon"`
	// Authenticated: the user has a valid link to the provider.
	Authenticated bool `json:"authenticated"`
	// AuthenticateURL is the page that links it (on the access URL).
	AuthenticateURL string `json:"authenticate_url"`
	// Optional: builds run without the link (the data source says
	// optional = true).
	Optional bool `json:"optional,omitempty"`
}

// TemplateVersionExternalAuth lists the external auth providers a template
// version declares and whether the signed-in user has linked each.
func (c *Client) TemplateVersionExternalAuth(ctx context.Context, versionID string) ([]TemplateVersionExternalAuth, error) {
	return doJSON[[]TemplateVersionExternalAuth](ctx, c, http.MethodGet, "/api/v2/templateversions/"+url.PathEscape(versionID)+"/external-auth", nil)
}
