package coderd

import (
	"context"
	"crypto/cipher"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/gin-gonic/gin"
	"golang.org/x/oauth2"
	"golang.org/x/sync/singleflight"

	"airgapcoder/coderd/database"
	"airgapcoder/coderd/externalauth"
	"airgapcoder/coderd/site"
	"airgapcoder/codersdk"
)

// External auth (issue 33): users link their accounts at the deployment's
// OAuth2 providers (package externalauth) once, and workspaces get the
// owner's fresh token from then on: git through the agent's endpoint
// (externalauth_agent.go), Terraform through the build's job.
//
// The flow starts and ends at Coder's path, GET /external-auth/{id}/callback:
// without a code it sends the browser to the provider with a state and a
// PKCE verifier sealed in a cookie (as the OIDC sign-in's, under a key of
// its own); with one it exchanges the code, validates the token and keeps
// it. Tokens are kept in external_auth_links sealed with sealAtRest under a
// key derived from the deployment's external auth secret, so the database
// alone (a backup, a dump) gives none away. A token is refreshed when it
// expires within extAuthExpirySkew, once per user and provider at a time
// on this replica; a refresh the provider refuses deletes the stale link
// (audited), and the user is asked to link again.

const (
	// extAuthSecretKey names the deployment secret the keys derive from.
	extAuthSecretKey = "external_auth_secret"
	// extAuthTokenPurpose and extAuthStatePurpose name the derived keys.
	extAuthTokenPurpose = "coderd external auth token"
	extAuthStatePurpose = "coderd external auth state cookie"
	// extAuthStateCookie holds the flow's sealed state; it is sent only to
	// the callback.
	extAuthStateCookie = "coder_external_auth_state"
	// extAuthExpirySkew refreshes a token this long before it expires, so
	// that a token handed out is good for at least that long.
	extAuthExpirySkew = 10 * time.Second
	// extAuthListenPoll is how often a waiting agent request looks for a
	// link made on another replica (links made on this one wake it at once).
	extAuthListenPoll = 2 * time.Second
	// extAuthRefreshTimeout bounds one refresh, which requests share.
	extAuthRefreshTimeout = 30 * time.Second
)

// auditResourceExternalAuth is the audit resource of links and of the
// tokens handed to workspaces.
const auditResourceExternalAuth codersdk.AuditResourceType = "external_auth"

// auditActionHandToken records a token handed to a workspace (the agent's
// endpoint, or a build's job); never the token itself.
const auditActionHandToken codersdk.AuditAction = "hand_token"

// externalAuth is the API's state of its external auth providers.
type externalAuth struct {
	providers []*externalauth.Provider
	byID      map[string]*externalauth.Provider
	// tokens seals the links' tokens at rest; states seals the flow's
	// cookie.
	tokens cipher.AEAD
	states *oidcSealer
	// refreshes runs one refresh per user and provider at a time.
	refreshes singleflight.Group

	// linkedMu guards linked, which is closed (and replaced) whenever a
	// link is stored on this replica: it wakes waiting agent requests.
	linkedMu sync.Mutex
	linked   chan struct{}
}

// newExternalAuth checks the providers and derives the keys; it answers
// nil when none are configured.
func newExternalAuth(ctx context.Context, opts Options) (*externalAuth, error) {
	if len(opts.ExternalAuth) == 0 {
		return nil, nil
	}
	providers, err := externalauth.New(opts.ExternalAuth, externalauth.Options{AccessURL: opts.AccessURL, HTTPClient: opts.ExternalAuthHTTPClient})
	if err != nil {
		return nil, err
	}
	secret, err := opts.DB.DeploymentValue(ctx, extAuthSecretKey, randomString(48))
	if err != nil {
		return nil, fmt.Errorf("read the deployment's external auth secret: %w", err)
	}
	x := &externalAuth{providers: providers, byID: map[string]*externalauth.Provider{}, linked: make(chan struct{})}
	for _, p := range providers {
		x.byID[p.ID()] = p
	}
	if x.tokens, err = deploymentAEAD(secret, extAuthTokenPurpose); err != nil {
		return nil, err
	}
	stateKey, err := deploymentAEAD(secret, extAuthStatePurpose)
	if err != nil {
		return nil, err
	}
	x.states = &oidcSealer{aead: stateKey}
	return x, nil
}

// provider returns the provider id names, or a 404.
func (x *externalAuth) provider(id string) (*externalauth.Provider, error) {
	if x != nil {
		if p, ok := x.byID[id]; ok {
			return p, nil
		}
	}
	return nil, notFound(fmt.Sprintf("External auth provider %q", id))
}

// wakeListeners wakes the agent requests waiting for a link.
func (x *externalAuth) wakeListeners() {
	x.linkedMu.Lock()
	defer x.linkedMu.Unlock()
	close(x.linked)
	x.linked = make(chan struct{})
}

func (x *externalAuth) linkedChan() <-chan struct{} {
	x.linkedMu.Lock()
	defer x.linkedMu.Unlock()
	return x.linked
}

// extAuthTrustHint is what to do when the provider's certificate is not
// trusted.
const extAuthTrustHint = "import the provider's CA certificate into the deployment's trust store with `coder certs import FILE --dir DIR` and restart `coder appliance up` (for `coder server`, add it to the system's trust store or point SSL_CERT_FILE at a bundle holding it)"

// providerError is a 502 for a request to a provider that failed; a
// certificate the deployment does not trust gets extAuthTrustHint.
func providerError(err error, format string, args ...any) *apiError {
	detail := err.Error()
	var unknown x509.UnknownAuthorityError
	var verify *tls.CertificateVerificationError
	var invalid x509.CertificateInvalidError
	if errors.As(err, &unknown) || errors.As(err, &verify) || errors.As(err, &invalid) {
		detail += "; " + extAuthTrustHint
	}
	e := errorf(http.StatusBadGateway, detail, format, args...)
	e.cause = err
	return e
}

// extAuthPageURL is the dashboard page that links provider id, on the
// access URL.
func (api *API) extAuthPageURL(id string) string {
	return api.opts.AccessURL.ResolveReference(&url.URL{Path: codersdk.ExternalAuthPagePath(id)}).String()
}

// extAuthToken is a user's token for one provider, opened.
type extAuthToken struct {
	// linked: the user has a link whose token is valid; the other fields
	// are set only then (ValidateError and User aside).
	linked bool
	access string
	extra  map[string]any
	expiry time.Time
	// user is who the provider says the token is of (when it says).
	user *codersdk.ExternalAuthUser
	// validateError says why a stored token is not valid.
	validateError string
}

// externalAuthToken returns the user's fresh token for p: refreshed when
// it expires within extAuthExpirySkew, and validated at the provider. A
// user without a link, or whose token the provider says is invalid, gets
// linked = false; a refresh the provider refuses also deletes the link
// (audited). Errors are the provider's or the database's.
func (api *API) externalAuthToken(ctx context.Context, user database.User, p *externalauth.Provider) (extAuthToken, error) {
	x := api.extAuth
	link, err := api.db.ExternalAuthLink(ctx, user.ID, p.ID())
	if errors.Is(err, database.ErrNotFound) {
		return extAuthToken{}, nil
	}
	if err != nil {
		return extAuthToken{}, err
	}
	if !link.OAuthExpiry.IsZero() && !api.now().Before(link.OAuthExpiry.Add(-extAuthExpirySkew)) {
		v, err, _ := x.refreshes.Do(user.ID+"\x00"+p.ID(), func() (any, error) {
			// Requests wait for this one: the first one's client going
			// away must not fail them all.
			ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), extAuthRefreshTimeout)
			defer cancel()
			return api.refreshExternalAuth(ctx, user, p, link)
		})
		if err != nil {
			return extAuthToken{}, err
		}
		if v == nil {
			return extAuthToken{validateError: "the provider refused to refresh the token: link the account again"}, nil
		}
		link = v.(database.ExternalAuthLink)
	}
	access, err := openAtRest(x.tokens, extAuthTokenPurpose, link.OAuthAccessToken)
	if err != nil {
		// The deployment secret changed: the token is lost.
		return extAuthToken{validateError: "the stored token cannot be opened (" + err.Error() + "): link the account again"}, nil
	}
	valid, who, err := p.Validate(ctx, access)
	if err != nil {
		return extAuthToken{}, providerError(err, "Validate the %s token", p.Config().DisplayName)
	}
	if !valid {
		return extAuthToken{validateError: "the provider says the token is not valid (its validate URL answered 401): link the account again"}, nil
	}
	tok := extAuthToken{linked: true, access: access, expiry: link.OAuthExpiry, user: who}
	if len(link.OAuthExtra) > 0 && string(link.OAuthExtra) != "{}" {
		_ = json.Unmarshal(link.OAuthExtra, &tok.extra)
	}
	return tok, nil
}

// refreshExternalAuth refreshes a link's token and keeps the new one. It
// answers nil (and deletes the link) when the provider refuses.
func (api *API) refreshExternalAuth(ctx context.Context, user database.User, p *externalauth.Provider, link database.ExternalAuthLink) (any, error) {
	x := api.extAuth
	refresh, err := openAtRest(x.tokens, extAuthTokenPurpose, link.OAuthRefreshToken)
	if err != nil {
		refresh = "" // unreadable: refused like a missing one
	}
	tok, err := p.Refresh(ctx, refresh)
	var refused *externalauth.RefusedError
	if errors.As(err, &refused) {
		// The link is stale unless another request replaced it meanwhile.
		deleted, derr := api.db.DeleteExternalAuthLinkIfToken(ctx, user.ID, p.ID(), link.OAuthAccessToken)
		if derr != nil {
			return nil, derr
		}
		if !deleted {
			current, err := api.db.ExternalAuthLink(ctx, user.ID, p.ID())
			if errors.Is(err, database.ErrNotFound) {
				return nil, nil
			}
			return current, err
		}
		api.log.Info("external auth refresh refused; link deleted", "provider", p.ID(), "user", user.Username, "reason", refused.Reason)
		raw, _ := json.Marshal(map[string]any{"provider": p.ID(), "source": "refresh", "reason": refused.Reason})
		row := database.AuditLog{
			UserID: user.ID, Username: user.Username, Action: string(codersdk.AuditActionDelete),
			ResourceType: string(auditResourceExternalAuth), ResourceID: p.ID(), ResourceTarget: p.ID(),
			StatusCode: http.StatusUnauthorized, AdditionalFields: raw,
		}
		row.Description = describe(row) + " (the provider refused to refresh the token; the link was deleted)"
		api.writeAudit(ctx, row)
		return nil, nil
	}
	if err != nil {
		return nil, providerError(err, "Refresh the %s token", p.Config().DisplayName)
	}
	next, err := api.sealExternalAuthLink(user.ID, p, tok)
	if err != nil {
		return nil, err
	}
	stored, _, err := api.db.UpdateExternalAuthLinkToken(ctx, next, link.OAuthRefreshToken)
	if errors.Is(err, database.ErrNotFound) {
		return nil, nil // unlinked meanwhile
	}
	return stored, err
}

// sealExternalAuthLink is the link row of a token from the provider, its
// tokens sealed and its expiry on coderd's clock.
func (api *API) sealExternalAuthLink(userID string, p *externalauth.Provider, tok *oauth2.Token) (database.ExternalAuthLink, error) {
	x := api.extAuth
	access, err := sealAtRest(x.tokens, extAuthTokenPurpose, tok.AccessToken)
	if err != nil {
		return database.ExternalAuthLink{}, err
	}
	refresh, err := sealAtRest(x.tokens, extAuthTokenPurpose, tok.RefreshToken)
	if err != nil {
		return database.ExternalAuthLink{}, err
	}
	// x/oauth2 dates the expiry by the wall clock; coderd's may differ.
	var expiry time.Time
	if !tok.Expiry.IsZero() {
		expiry = api.now().Add(time.Until(tok.Expiry))
	}
	extra := []byte("{}")
	if e := p.TokenExtra(tok); e != nil {
		if extra, err = json.Marshal(e); err != nil {
			return database.ExternalAuthLink{}, err
		}
	}
	return database.ExternalAuthLink{
		UserID: userID, ProviderID: p.ID(), OAuthAccessToken: access, OAuthRefreshToken: refresh, OAuthExpiry: expiry, OAuthExtra: extra,
	}, nil
}

// externalAuthCallback answers GET /external-auth/{id}/callback: the start
// of the link flow without a code, its end with one. A visitor who is not
// signed in is sent to the login page first, and back here after.
func (api *API) externalAuthCallback(c *gin.Context) error {
	p, err := api.extAuth.provider(c.Param("provider"))
	if err != nil {
		return err
	}
	a := api.authOnce(c)
	if a.err != nil {
		var ae *apiError
		if !errors.As(a.err, &ae) {
			return a.err
		}
		q := url.Values{"redirect": {c.Request.URL.RequestURI()}}
		http.Redirect(c.Writer, c.Request, "/login?"+q.Encode(), http.StatusSeeOther)
		return nil
	}
	if c.Query("code") == "" && c.Query("error") == "" {
		return api.externalAuthStart(c, p)
	}
	e := api.audit(c, codersdk.AuditActionCreate, auditResourceExternalAuth).actor(a.user).resource(p.ID(), p.ID()).field("provider", p.ID())
	redirect, err := api.externalAuthFinish(c, a.user, p, e)
	if err != nil {
		ae := api.apiErrorOf(err, "provider", p.ID())
		msg := ae.Message
		if ae.Detail != "" {
			msg += ": " + ae.Detail
		}
		api.externalAuthErrorPage(c, ae.status, p, msg)
		return nil
	}
	http.Redirect(c.Writer, c.Request, redirect, http.StatusSeeOther)
	return nil
}

// externalAuthStart remembers where to return (?redirect=, a local path;
// the provider's page by default) and sends the browser to the provider.
// A login_hint parameter is passed on.
func (api *API) externalAuthStart(c *gin.Context, p *externalauth.Provider) error {
	redirect := codersdk.ExternalAuthPagePath(p.ID())
	if r := c.Query("redirect"); r != "" {
		redirect = site.LocalRedirect(r)
	}
	// Nonce carries the provider's ID: a state made for one provider does
	// not finish another's flow.
	st := oidcState{
		State: randomString(32), Nonce: p.ID(), Verifier: oauth2.GenerateVerifier(),
		Redirect: redirect, Expires: api.now().Add(oidcStateLifetime),
	}
	sealed, err := api.extAuth.states.seal(st)
	if err != nil {
		return err
	}
	http.SetCookie(c.Writer, &http.Cookie{
		Name: extAuthStateCookie, Value: sealed, Path: codersdk.ExternalAuthCallbackPath(p.ID()), MaxAge: int(oidcStateLifetime.Seconds()),
		HttpOnly: true, SameSite: http.SameSiteLaxMode, Secure: c.Request.TLS != nil || api.opts.AccessURL.Scheme == "https",
	})
	http.Redirect(c.Writer, c.Request, p.AuthCodeURL(st.State, st.Verifier, c.Query("login_hint")), http.StatusTemporaryRedirect)
	return nil
}

// externalAuthFinish checks the callback's state, exchanges the code,
// validates the token and keeps it; it returns where to go.
func (api *API) externalAuthFinish(c *gin.Context, user database.User, p *externalauth.Provider, e *auditEntry) (string, error) {
	ctx := c.Request.Context()
	http.SetCookie(c.Writer, &http.Cookie{Name: extAuthStateCookie, Path: codersdk.ExternalAuthCallbackPath(p.ID()), MaxAge: -1, HttpOnly: true})
	if msg := c.Query("error"); msg != "" {
		if d := c.Query("error_description"); d != "" {
			msg += ": " + d
		}
		e.field("refused", "provider_error")
		return "", errorf(http.StatusForbidden, "", "%s refused to link the account (%s)", p.Config().DisplayName, msg)
	}
	cookie, err := c.Cookie(extAuthStateCookie)
	if err != nil {
		e.field("refused", "state")
		return "", errorf(http.StatusBadRequest, "", "The link flow's state is missing: start linking again")
	}
	st, err := api.extAuth.states.open(cookie, c.Query("state"), api.now())
	if err == nil && st.Nonce != p.ID() {
		err = errOIDCState
	}
	if err != nil {
		e.field("refused", "state")
		return "", errorf(http.StatusBadRequest, "", "The link flow's state is missing, expired or does not match: start linking again")
	}
	tok, err := p.Exchange(ctx, c.Query("code"), st.Verifier)
	if err != nil {
		return "", providerError(err, "%s did not give a token for the code", p.Config().DisplayName)
	}
	valid, who, err := p.Validate(ctx, tok.AccessToken)
	if err != nil {
		return "", providerError(err, "Validate the new %s token", p.Config().DisplayName)
	}
	if !valid {
		e.field("refused", "invalid_token")
		return "", errorf(http.StatusForbidden, "", "%s says the token it just gave is not valid (its validate URL answered 401)", p.Config().DisplayName)
	}
	if who != nil {
		e.field("login", who.Login)
	}
	link, err := api.sealExternalAuthLink(user.ID, p, tok)
	if err != nil {
		return "", err
	}
	e.field("has_refresh_token", tok.RefreshToken != "").field("expires", link.OAuthExpiry)
	if _, err := api.db.UpsertExternalAuthLink(ctx, link); err != nil {
		return "", err
	}
	api.extAuth.wakeListeners()
	api.log.Info("external auth linked", "provider", p.ID(), "user", user.Username)
	return st.Redirect, nil
}

// externalAuthErrorPage answers a browser with what went wrong.
func (api *API) externalAuthErrorPage(c *gin.Context, status int, p *externalauth.Provider, msg string) {
	c.Header("Content-Type", "text/html; charset=utf-8")
	c.Header("Cache-Control", "no-store")
	c.Status(status)
	_ = externalAuthErrorTemplate.Execute(c.Writer, map[string]string{
		"Name": p.Config().DisplayName, "Message": msg, "Page": codersdk.ExternalAuthPagePath(p.ID()),
	})
}

// externalAuthProvider is the :provider parameter of the /api/v2 routes.
func (api *API) externalAuthProvider(c *gin.Context) (*externalauth.Provider, error) {
	return api.extAuth.provider(c.Param("provider"))
}

// listExternalAuths answers GET /api/v2/external-auth: every provider and
// the caller's links.
func (api *API) listExternalAuths(c *gin.Context) error {
	ctx := c.Request.Context()
	out := codersdk.ListUserExternalAuthResponse{Providers: []codersdk.ExternalAuthLinkProvider{}, Links: []codersdk.ExternalAuthLink{}}
	if api.extAuth == nil {
		c.JSON(http.StatusOK, out)
		return nil
	}
	for _, p := range api.extAuth.providers {
		cfg := p.Config()
		out.Providers = append(out.Providers, codersdk.ExternalAuthLinkProvider{
			ID: cfg.ID, Type: cfg.Type, DisplayName: cfg.DisplayName, DisplayIcon: cfg.DisplayIcon, Regex: cfg.Regex,
		})
	}
	links, err := api.db.ExternalAuthLinksByUser(ctx, actor(c).ID)
	if err != nil {
		return err
	}
	for _, l := range links {
		p, ok := api.extAuth.byID[l.ProviderID]
		if !ok {
			continue // no longer configured
		}
		tok, err := api.externalAuthToken(ctx, actor(c), p)
		if err != nil {
			var ae *apiError
			if !errors.As(err, &ae) {
				return err
			}
			tok.validateError = ae.Error()
		}
		out.Links = append(out.Links, codersdk.ExternalAuthLink{
			ProviderID: l.ProviderID, CreatedAt: l.CreatedAt, UpdatedAt: l.UpdatedAt, HasRefreshToken: l.OAuthRefreshToken != "",
			Expires: l.OAuthExpiry, Authenticated: tok.linked, ValidateError: tok.validateError,
		})
	}
	c.JSON(http.StatusOK, out)
	return nil
}

// externalAuthByID answers GET /api/v2/external-auth/{id}.
func (api *API) externalAuthByID(c *gin.Context) error {
	p, err := api.externalAuthProvider(c)
	if err != nil {
		return err
	}
	tok, err := api.externalAuthToken(c.Request.Context(), actor(c), p)
	if err != nil {
		return err
	}
	c.JSON(http.StatusOK, codersdk.ExternalAuth{
		Authenticated: tok.linked, DisplayName: p.Config().DisplayName, User: tok.user, Installations: []any{},
	})
	return nil
}

// deleteExternalAuth answers DELETE /api/v2/external-auth/{id}: the
// caller's link is deleted (the provider keeps its grant: this deployment
// revokes nothing there).
func (api *API) deleteExternalAuth(c *gin.Context) error {
	e := api.audit(c, codersdk.AuditActionDelete, auditResourceExternalAuth)
	p, err := api.externalAuthProvider(c)
	if err != nil {
		return err
	}
	e.resource(p.ID(), p.ID()).field("provider", p.ID())
	err = api.db.DeleteExternalAuthLink(c.Request.Context(), actor(c).ID, p.ID())
	if err != nil {
		return notFoundAs(fmt.Sprintf("Your link to %s", p.Config().DisplayName), err)
	}
	api.log.Info("external auth unlinked", "provider", p.ID(), "user", actor(c).Username)
	c.Status(http.StatusNoContent)
	return nil
}
