package coderd

import (
	"context"
	"crypto/cipher"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"github.com/gin-gonic/gin"
	"golang.org/x/oauth2"
	"golang.org/x/sync/singleflight"

	"airgapcoder/coderd/database"
	"airgapcoder/coderd/site"
	"airgapcoder/codersdk"
	"airgapcoder/internal/egress"
)

// OpenID Connect sign-in, as Coder's: GET /api/v2/users/oidc/callback
// without a code redirects to the identity provider (authorization code
// flow with state, nonce and PKCE S256, remembered in a sealed cookie, see
// oidcstate.go); with code and state it exchanges the code, verifies the ID
// token (signature by the provider's JWKS, which go-oidc refetches when it
// meets an unknown key; issuer; audience = client ID; expiry; nonce), merges
// the userinfo claims, finds, links or creates the user, and signs the user
// in with the same session cookie as a password login.
//
// Every request to the provider (discovery, JWKS, token, userinfo) goes
// through OIDCConfig.HTTPClient, the one the control plane builds over the
// deployment's trust store and egress guard.

// loginTypeOIDC is the login type of OIDC sessions and linked users.
const loginTypeOIDC = "oidc"

// OIDCConfig is OpenID Connect sign-in. The zero value is off.
type OIDCConfig struct {
	// IssuerURL is the provider's issuer; discovery reads
	// IssuerURL/.well-known/openid-configuration. Empty turns OIDC off.
	IssuerURL    string
	ClientID     string
	ClientSecret string
	// EmailDomain, when set, admits only emails in one of these domains.
	EmailDomain []string
	// Scopes requested (default openid, profile, email).
	Scopes []string
	// AllowSignups creates a user at the first sign-in of an unknown email.
	AllowSignups bool
	// UsernameField and EmailField name the claims (default
	// preferred_username and email).
	UsernameField string
	EmailField    string
	// IgnoreEmailVerified admits an email whose email_verified is false.
	IgnoreEmailVerified bool
	// SignInText is the login button's "Sign in with <text>" (default
	// "OpenID Connect"); IconURL its icon (optional).
	SignInText string
	IconURL    string
	// HTTPClient makes every request to the provider (nil:
	// http.DefaultClient).
	HTTPClient *http.Client
	// TrustHint is added to certificate errors: how to make the
	// deployment trust the provider (default: the `coder certs import`
	// advice).
	TrustHint string
	// GroupField names the claim that lists the user's IdP groups
	// (--oidc-group-field). Empty turns the group sync and the allowed
	// groups check off.
	GroupField string
	// GroupSync syncs the user's groups from the group claim at each
	// sign-in (groupsync.go; ParseGroupSyncOptions builds it from the
	// --oidc-group-* and --oidc-allowed-groups flags). It applies only
	// when GroupField is set.
	GroupSync GroupSyncOptions
	// UserRoleField names the claim that lists the user's IdP roles
	// (--oidc-user-role-field). Empty turns the role sync off; when set,
	// every sign-in sets the user's site roles from it (rolesync.go).
	UserRoleField string
	// UserRoleMapping maps an IdP role to the Coder roles it grants
	// (--oidc-user-role-mapping; ParseUserRoleMapping reads it). Nil maps
	// nothing: claim values that name a role here are taken as is.
	UserRoleMapping map[string][]string
}

// Enabled reports whether OIDC sign-in is configured.
func (c OIDCConfig) Enabled() bool { return c.IssuerURL != "" }

// DefaultOIDCTrustHint is OIDCConfig.TrustHint's default.
const DefaultOIDCTrustHint = "import the identity provider's CA certificate into the deployment's trust store with `coder certs import FILE --dir DIR` and restart `coder appliance up` (for `coder server`, add it to the system's trust store or point SSL_CERT_FILE at a bundle holding it)"

func (c *OIDCConfig) setDefaults() {
	if len(c.Scopes) == 0 {
		c.Scopes = []string{oidc.ScopeOpenID, "profile", "email"}
	}
	if c.UsernameField == "" {
		c.UsernameField = "preferred_username"
	}
	if c.EmailField == "" {
		c.EmailField = "email"
	}
	if c.SignInText == "" {
		c.SignInText = "OpenID Connect"
	}
	if c.HTTPClient == nil {
		c.HTTPClient = http.DefaultClient
	}
	if c.TrustHint == "" {
		c.TrustHint = DefaultOIDCTrustHint
	}
}

// oidcProvider is the discovered provider. Discovery happens at the first
// sign-in and again after a failure, so a provider that is down at start,
// or a CA imported later, needs no restart of coderd.
type oidcProvider struct {
	cfg OIDCConfig
	// secret returns the deployment's secret the state cookie's key
	// derives from.
	secret func(context.Context) (string, error)

	mu       sync.Mutex
	provider *oidc.Provider
	verifier *oidc.IDTokenVerifier
	sealer   *oidcSealer
	// tokens seals the IdP's refresh tokens at rest (oidcrefresh.go).
	tokens cipher.AEAD

	// refreshes runs one IdP refresh per user at a time; fresh holds, per
	// user id, the expiry (time.Time) of an IdP token known unexpired, so
	// requests before it ask neither the database nor the IdP.
	refreshes singleflight.Group
	fresh     sync.Map

	confMu sync.Mutex
	conf   *oauth2.Config
}

func (p *oidcProvider) ctx(ctx context.Context) context.Context {
	return oidc.ClientContext(ctx, p.cfg.HTTPClient)
}

// discover returns the provider, discovering it first when needed.
func (p *oidcProvider) discover(ctx context.Context) (*oidc.Provider, *oidc.IDTokenVerifier, *oidcSealer, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.provider != nil {
		return p.provider, p.verifier, p.sealer, nil
	}
	secret, err := p.secret(ctx)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("read the deployment's OIDC secret: %w", err)
	}
	sealer, err := newOIDCSealer(secret)
	if err != nil {
		return nil, nil, nil, err
	}
	tokens, err := deploymentAEAD(secret, oidcTokenPurpose)
	if err != nil {
		return nil, nil, nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	provider, err := oidc.NewProvider(p.ctx(ctx), p.cfg.IssuerURL)
	if err != nil {
		return nil, nil, nil, p.explain("OIDC discovery at "+strings.TrimSuffix(p.cfg.IssuerURL, "/")+"/.well-known/openid-configuration", err)
	}
	p.provider, p.sealer, p.tokens = provider, sealer, tokens
	p.verifier = provider.Verifier(&oidc.Config{ClientID: p.cfg.ClientID})
	return p.provider, p.verifier, p.sealer, nil
}

// oauth2 returns the client's configuration, one kept for the provider:
// x/oauth2 remembers in it how the token endpoint took the client's
// credentials, so a refresh the IdP refuses is not retried with the other
// method (which would hide the refusal behind invalid_client).
func (p *oidcProvider) oauth2(provider *oidc.Provider, redirectURL string) *oauth2.Config {
	p.confMu.Lock()
	defer p.confMu.Unlock()
	if p.conf == nil || p.conf.Endpoint != provider.Endpoint() || p.conf.RedirectURL != redirectURL {
		p.conf = &oauth2.Config{
			ClientID: p.cfg.ClientID, ClientSecret: p.cfg.ClientSecret, Endpoint: provider.Endpoint(),
			RedirectURL: redirectURL, Scopes: p.cfg.Scopes,
		}
	}
	return p.conf
}

// explain wraps a request error to the provider, naming what to do about
// a certificate the deployment does not trust or a host the egress guard
// refuses.
func (p *oidcProvider) explain(what string, err error) error {
	var unknown x509.UnknownAuthorityError
	var verify *tls.CertificateVerificationError
	var hostname x509.HostnameError
	var invalid x509.CertificateInvalidError
	var refused *egress.RefusedError
	switch {
	case errors.As(err, &unknown), errors.As(err, &invalid), errors.As(err, &verify):
		return fmt.Errorf("%s: %w; %s", what, err, p.cfg.TrustHint)
	case errors.As(err, &hostname):
		return fmt.Errorf("%s: %w; the identity provider's certificate does not name the issuer's host: use the issuer URL its certificate was issued for", what, err)
	case errors.As(err, &refused):
		return fmt.Errorf("%s: %w", what, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// authMethods answers GET /api/v2/users/authmethods.
func (api *API) authMethods(c *gin.Context) error {
	m := codersdk.AuthMethods{Password: codersdk.AuthMethod{Enabled: !api.opts.DisablePasswordAuth}}
	if api.opts.OIDC.Enabled() {
		m.OIDC = codersdk.OIDCAuthMethod{AuthMethod: codersdk.AuthMethod{Enabled: true}, SignInText: api.opts.OIDC.SignInText, IconURL: api.opts.OIDC.IconURL}
	}
	c.JSON(http.StatusOK, m)
	return nil
}

// oidcCallback answers GET /api/v2/users/oidc/callback.
func (api *API) oidcCallback(c *gin.Context) error {
	if !api.opts.OIDC.Enabled() {
		return notFound("OIDC sign-in (not configured)")
	}
	if c.Query("code") == "" && c.Query("error") == "" {
		return api.oidcStart(c)
	}
	e := api.audit(c, codersdk.AuditActionLogin, codersdk.AuditResourceUser).field("login_type", loginTypeOIDC).field("issuer", api.opts.OIDC.IssuerURL)
	user, key, redirect, err := api.oidcFinish(c, e)
	var r *oidcRefusal
	if errors.As(err, &r) {
		e.field("refused", r.Reason)
		api.log.Info("oidc sign-in refused", "reason", r.Reason, "message", r.Message)
		api.oidcErrorPage(c, http.StatusForbidden, r.Message)
		return nil
	}
	if err != nil {
		if errors.Is(err, c.Request.Context().Err()) && c.Request.Context().Err() != nil {
			return err
		}
		api.log.Error("oidc sign-in", "err", err)
		e.field("error", err.Error())
		api.oidcErrorPage(c, http.StatusBadGateway, err.Error())
		return nil
	}
	e.actor(user).resource(user.ID, user.Username).field("key_id", key)
	http.Redirect(c.Writer, c.Request, redirect, http.StatusTemporaryRedirect)
	return nil
}

// oidcStart remembers where to return (?redirect=, a local path) and
// sends the browser to the provider. A login_hint parameter is passed on
// (standard OIDC: the provider may preselect or skip its account choice).
func (api *API) oidcStart(c *gin.Context) error {
	p := api.oidc
	provider, _, sealer, err := p.discover(c.Request.Context())
	if err != nil {
		api.log.Error("oidc discovery", "err", err)
		api.oidcErrorPage(c, http.StatusBadGateway, err.Error())
		return nil
	}
	st := oidcState{
		State: randomString(32), Nonce: randomString(32), Verifier: oauth2.GenerateVerifier(),
		Redirect: site.LocalRedirect(c.Query("redirect")), Expires: api.now().Add(oidcStateLifetime),
	}
	sealed, err := sealer.seal(st)
	if err != nil {
		return err
	}
	http.SetCookie(c.Writer, &http.Cookie{
		Name: oidcStateCookie, Value: sealed, Path: codersdk.OIDCCallbackPath, MaxAge: int(oidcStateLifetime.Seconds()),
		HttpOnly: true, SameSite: http.SameSiteLaxMode, Secure: c.Request.TLS != nil || api.opts.AccessURL.Scheme == "https",
	})
	opts := []oauth2.AuthCodeOption{oidc.Nonce(st.Nonce), oauth2.S256ChallengeOption(st.Verifier)}
	if hint := c.Query("login_hint"); hint != "" {
		opts = append(opts, oauth2.SetAuthURLParam("login_hint", hint))
	}
	http.Redirect(c.Writer, c.Request, p.oauth2(provider, api.oidcRedirectURL()).AuthCodeURL(st.State, opts...), http.StatusTemporaryRedirect)
	return nil
}

func (api *API) oidcRedirectURL() string {
	return api.opts.AccessURL.ResolveReference(&url.URL{Path: codersdk.OIDCCallbackPath}).String()
}

// oidcFinish checks the callback, signs the user in (session cookie set)
// and returns the user, the new key's id and where to go. A refusal is an
// *oidcRefusal.
func (api *API) oidcFinish(c *gin.Context, e *auditEntry) (database.User, string, string, error) {
	ctx := c.Request.Context()
	p := api.oidc
	provider, verifier, sealer, err := p.discover(ctx)
	if err != nil {
		return database.User{}, "", "", err
	}
	http.SetCookie(c.Writer, &http.Cookie{Name: oidcStateCookie, Path: codersdk.OIDCCallbackPath, MaxAge: -1, HttpOnly: true})
	if msg := c.Query("error"); msg != "" {
		if d := c.Query("error_description"); d != "" {
			msg += ": " + d
		}
		return database.User{}, "", "", refuse("provider_error", "The identity provider refused the sign-in (%s)", msg)
	}
	cookie, err := c.Cookie(oidcStateCookie)
	if err != nil {
		return database.User{}, "", "", refuse("state", "%v", errOIDCState)
	}
	st, err := sealer.open(cookie, c.Query("state"), api.now())
	if err != nil {
		return database.User{}, "", "", refuse("state", "%v", err)
	}
	token, err := p.oauth2(provider, api.oidcRedirectURL()).Exchange(p.ctx(ctx), c.Query("code"), oauth2.VerifierOption(st.Verifier))
	if err != nil {
		return database.User{}, "", "", p.explain("exchange the authorization code", err)
	}
	rawID, _ := token.Extra("id_token").(string)
	if rawID == "" {
		return database.User{}, "", "", errors.New("the identity provider's token response holds no id_token: is the openid scope in --oidc-scopes?")
	}
	idToken, err := verifier.Verify(p.ctx(ctx), rawID)
	if err != nil {
		return database.User{}, "", "", p.explain("verify the ID token", err)
	}
	if idToken.Nonce != st.Nonce {
		return database.User{}, "", "", refuse("nonce", "The ID token's nonce does not match this sign-in; start the sign-in again")
	}
	e.field("subject", idToken.Subject)
	claims := map[string]any{}
	if err := idToken.Claims(&claims); err != nil {
		return database.User{}, "", "", fmt.Errorf("read ID token claims: %w", err)
	}
	if provider.UserInfoEndpoint() != "" {
		info, err := provider.UserInfo(p.ctx(ctx), oauth2.StaticTokenSource(token))
		if err != nil {
			return database.User{}, "", "", p.explain("read userinfo", err)
		}
		if info.Subject != idToken.Subject {
			return database.User{}, "", "", fmt.Errorf("userinfo is about subject %q, the ID token about %q", info.Subject, idToken.Subject)
		}
		infoClaims := map[string]any{}
		if err := info.Claims(&infoClaims); err != nil {
			return database.User{}, "", "", fmt.Errorf("read userinfo claims: %w", err)
		}
		claims = mergeClaims(claims, infoClaims)
	}
	id, err := identityFromClaims(api.opts.OIDC, idToken.Subject, claims)
	e.field("email", id.Email)
	if err != nil {
		return database.User{}, "", "", err
	}
	sync, err := api.oidcSyncClaims(claims)
	if err != nil {
		return database.User{}, "", "", err
	}
	user, how, err := api.oidcUser(ctx, idToken.Issuer, id)
	e.field("user_link", how)
	if err != nil {
		return database.User{}, "", "", err
	}
	if user.Status != database.UserStatusActive {
		return user, "", "", refuse("suspended", "Your account %s is %s; ask an owner to activate it", user.Username, user.Status)
	}
	origin := GroupSyncAudit{IP: sourceIP(c.Request), UserAgent: c.Request.UserAgent(), Issuer: idToken.Issuer, Subject: idToken.Subject}
	if user, err = api.oidcSync(ctx, e, user, sync, origin); err != nil {
		return user, "", "", err
	}
	if err := api.keepOIDCToken(ctx, user.ID, token); err != nil {
		return user, "", "", err
	}
	tok, key, err := api.newAPIKey(ctx, user.ID, loginTypeOIDC, "", api.opts.SessionDuration)
	if err != nil {
		return user, "", "", err
	}
	api.setSessionCookie(c, tok, int(api.opts.SessionDuration.Seconds()))
	return user, key.ID, st.Redirect, nil
}

// oidcClaimSync is what the group and role claims say, read before the
// user is looked up so that a refused sign-in creates nobody.
type oidcClaimSync struct {
	groups, roles         []string
	syncGroups, syncRoles bool
}

// oidcSyncClaims reads the group claim (when GroupField is set), refusing
// a user in none of the allowed groups, and the role claim (when
// UserRoleField is set).
func (api *API) oidcSyncClaims(claims map[string]any) (oidcClaimSync, error) {
	cfg := api.opts.OIDC
	var s oidcClaimSync
	if cfg.GroupField != "" {
		groups, err := claimStrings(claims, cfg.GroupField)
		if err != nil {
			return s, refuse("group_claim", "The identity provider's group claim is not a list of names (%v); ask an owner to check --oidc-group-field", err)
		}
		if err := cfg.GroupSync.CheckAllowed(groups); err != nil {
			return s, refuse("not_in_allowed_group", "You are %v", err)
		}
		s.groups, s.syncGroups = groups, true
	}
	if cfg.UserRoleField != "" {
		roles, err := claimStrings(claims, cfg.UserRoleField)
		if err != nil {
			return s, refuse("role_claim", "The identity provider's role claim is not a list of names (%v); ask an owner to check --oidc-user-role-field", err)
		}
		s.roles, s.syncRoles = roles, true
	}
	return s, nil
}

// oidcSync applies the group and role claims to the user (groupsync.go,
// rolesync.go) and notes the changes in the sign-in's audit record.
func (api *API) oidcSync(ctx context.Context, e *auditEntry, user database.User, s oidcClaimSync, origin GroupSyncAudit) (database.User, error) {
	if s.syncGroups {
		added, removed, err := api.syncOIDCGroups(ctx, user.ID, s.groups, api.opts.OIDC.GroupSync, origin)
		if err != nil {
			return user, err
		}
		e.field("idp_groups", s.groups)
		if len(added) > 0 {
			e.field("groups_added", added)
		}
		if len(removed) > 0 {
			e.field("groups_removed", removed)
		}
	}
	if s.syncRoles {
		before := user.Roles
		u, err := api.syncOIDCRoles(ctx, user.ID, s.roles, api.opts.OIDC.UserRoleMapping, origin)
		if err != nil {
			return user, err
		}
		user = u
		e.field("idp_roles", s.roles)
		if !slices.Equal(before, user.Roles) {
			e.field("previous_roles", before).field("roles", user.Roles)
		}
	}
	return user, nil
}

// oidcUser finds the user of an identity: the one linked to its subject,
// else the one with its email (verified, unless --oidc-ignore-email-verified
// said not to care), which is linked now, else a new
// one when signups are allowed. how says which ("linked", "link", "signup").
func (api *API) oidcUser(ctx context.Context, issuer string, id oidcIdentity) (database.User, string, error) {
	link, err := api.db.UserLinkBySubject(ctx, issuer, id.Subject)
	if err == nil {
		u, err := api.db.UserByID(ctx, link.UserID)
		return u, "linked", err
	}
	if !errors.Is(err, database.ErrNotFound) {
		return database.User{}, "", err
	}
	newLink := database.UserLink{LoginType: loginTypeOIDC, Issuer: issuer, Subject: id.Subject}
	u, err := api.db.UserByEmailOrUsername(ctx, id.Email, "")
	switch {
	case err == nil:
		if l, err := api.db.UserLinkByUser(ctx, u.ID); err == nil && (l.Issuer != issuer || l.Subject != id.Subject) {
			return u, "", refuse("linked_elsewhere", "The account %s is linked to another identity at the identity provider", u.Username)
		}
		newLink.UserID = u.ID
		err = api.db.InTx(ctx, func(tx *database.DB) error {
			_, err := tx.UpsertUserLink(ctx, newLink)
			return err
		})
		return u, "link", err
	case !errors.Is(err, database.ErrNotFound):
		return u, "", err
	}
	// The first user is the owner, made on /setup with a password (the
	// way back in when the IdP fails); a sign-up before it would leave a
	// deployment with a member and no owner, and no setup page.
	if n, err := api.db.CountUsers(ctx); err != nil {
		return u, "", err
	} else if n == 0 {
		return u, "", refuse("no_owner", "This deployment has no owner yet: create the first user at /setup, then sign in with single sign-on")
	}
	if !api.opts.OIDC.AllowSignups {
		return u, "", refuse("signups_disabled", "There is no account for %s here, and sign-ups are disabled: ask an owner to create your account", id.Email)
	}
	err = api.db.InTx(ctx, func(tx *database.DB) error {
		username, err := freeUsername(ctx, tx, id.Username)
		if err != nil {
			return err
		}
		u, err = tx.InsertUser(ctx, database.InsertUserParams{Email: id.Email, Username: username, Name: id.Name, HashedPassword: []byte{}})
		if err != nil {
			return err
		}
		newLink.UserID = u.ID
		_, err = tx.UpsertUserLink(ctx, newLink)
		return err
	})
	if err == nil {
		api.log.Info("user created by oidc sign-in", "username", u.Username, "subject", id.Subject)
	}
	return u, "signup", err
}

// freeUsername returns base, or base with a random suffix when it is taken
// or empty.
func freeUsername(ctx context.Context, tx *database.DB, base string) (string, error) {
	if base == "" || base == codersdk.Me {
		base = "user"
	}
	name := base
	for range 10 {
		_, err := tx.UserByEmailOrUsername(ctx, "", name)
		if errors.Is(err, database.ErrNotFound) {
			return name, nil
		}
		if err != nil {
			return "", err
		}
		name = strings.TrimRight(base[:min(len(base), 25)], "-") + "-" + strings.ToLower(randomString(6))
	}
	return "", errors.New("find a free username")
}

var oidcErrorTemplate = template.Must(template.New("oidc-error").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Sign-in failed</title></head>
<body><main><h1>Sign-in failed</h1><p id="error">{{.}}</p><p><a href="/login">Back to sign in</a></p></main></body></html>
`))

// oidcErrorPage answers a browser with what went wrong.
func (api *API) oidcErrorPage(c *gin.Context, status int, msg string) {
	c.Header("Content-Type", "text/html; charset=utf-8")
	c.Header("Cache-Control", "no-store")
	c.Status(status)
	_ = oidcErrorTemplate.Execute(c.Writer, msg)
}
