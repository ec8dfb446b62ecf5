package codersdk

import (
	"context"
	"net/http"
)

// Subdomain apps (--wildcard-access-url): names as in Coder.
const (
	// SubdomainAppSessionTokenCookie is the cookie an app host sets for
	// itself (host-only) once a visitor signed in through the access URL.
	// It opens that one app host and nothing else: the API refuses it.
	SubdomainAppSessionTokenCookie = "coder_subdomain_app_session_token"
	// SubdomainAppSessionTokenParam carries the short-lived token the
	// access URL hands an app host in the redirect after sign-in; the app
	// host exchanges it for its cookie and removes it from the URL.
	SubdomainAppSessionTokenParam = "coder_application_connect_api_key"
	// AppAuthRedirectPath is where an app host sends a visitor without a
	// valid app cookie, with ?redirect_uri=<the app URL>.
	AppAuthRedirectPath = "/api/v2/applications/auth-redirect"
)

// Share levels of a coder_app (WorkspaceApp.Share), as Coder's.
const (
	AppShareOwner         = "owner"
	AppShareAuthenticated = "authenticated"
	AppSharePublic        = "public"
)

// AppHostResponse is GET /api/v2/applications/host: the wildcard access
// URL with the port app URLs use ("*.apps.example.internal:3443"), ""
// when the deployment has none (subdomain apps are then unavailable).
type AppHostResponse struct {
	Host string `json:"host"`
}

// AppHost returns the deployment's wildcard app host.
func (c *Client) AppHost(ctx context.Context) (AppHostResponse, error) {
	return doJSON[AppHostResponse](ctx, c, http.MethodGet, "/api/v2/applications/host", nil, http.StatusOK)
}
