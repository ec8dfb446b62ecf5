package codersdk

import (
	"context"
	"net/http"
)

// OIDCCallbackPath starts (without a code) and finishes (with code and
// state) an OpenID Connect sign-in, as Coder's. The identity provider
// registers <access URL>/api/v2/users/oidc/callback as the redirect URI.
const OIDCCallbackPath = "/api/v2/users/oidc/callback"

// CLIAuthPath is the dashboard page that shows a signed-in user a session
// token to paste into `coder login` (as Coder's /cli-auth).
const CLIAuthPath = "/cli-auth"

// AuthMethods says how users may sign in (GET /api/v2/users/authmethods,
// Coder's shape).
type AuthMethods struct {
	Password AuthMethod     `json:"password"`
	OIDC     OIDCAuthMethod `json:"oidc"`
}

// AuthMethod is one way to sign in.
type AuthMethod struct {
	Enabled bool `json:"enabled"`
}

// OIDCAuthMethod is the OpenID Connect sign-in: the login page's button
// says "Sign in with <SignInText>".
type OIDCAuthMethod struct {
	AuthMethod
	SignInText string `json:"signInText"`
	IconURL    string `json:"iconUrl"`
}

// AuthMethods returns how users may sign in; it needs no session.
func (c *Client) AuthMethods(ctx context.Context) (AuthMethods, error) {
	return doJSON[AuthMethods](ctx, c, http.MethodGet, "/api/v2/users/authmethods", nil)
}
