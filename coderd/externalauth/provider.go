package externalauth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"

	"golang.org/x/oauth2"

	"airgapcoder/codersdk"
)

// Provider is one configured provider, its defaults applied and its
// configuration checked: it builds the authorization URL, exchanges a code,
// refreshes and validates tokens over its HTTP client. Safe for concurrent
// use.
type Provider struct {
	cfg    Config
	regex  *regexp.Regexp // nil: the provider matches no remote URL
	pkce   bool
	oauth  *oauth2.Config
	client *http.Client
}

// Options are what every provider shares.
type Options struct {
	// AccessURL is the deployment's URL: a provider's redirect URI is
	// AccessURL + codersdk.ExternalAuthCallbackPath(id). Required.
	AccessURL *url.URL
	// HTTPClient makes every request to the providers (it carries the
	// appliance's trust store and egress guard); nil means
	// http.DefaultClient.
	HTTPClient *http.Client
}

var idRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// New applies each config's defaults (Defaults) and checks the result: an
// ID (or Type) that is URL-safe and unique, a client ID, auth and token
// URLs that are absolute http(s) URLs, and a regex that compiles. The
// error names the provider (by index and ID) and the field.
func New(configs []Config, opts Options) ([]*Provider, error) {
	if opts.AccessURL == nil {
		return nil, errors.New("externalauth: Options.AccessURL is required")
	}
	client := opts.HTTPClient
	if client == nil {
		client = http.DefaultClient
	}
	seen := map[string]int{}
	out := make([]*Provider, 0, len(configs))
	for i, raw := range configs {
		c := Defaults(raw)
		fail := func(format string, args ...any) error {
			return fmt.Errorf("externalauth: provider %d (%s): %s", i, c.ID, fmt.Sprintf(format, args...))
		}
		switch {
		case c.ID == "":
			return nil, fmt.Errorf("externalauth: provider %d: set its ID or TYPE", i)
		case !idRe.MatchString(c.ID):
			return nil, fail("the ID must be letters, digits, '.', '_' or '-' (it is part of URLs)")
		case c.ClientID == "":
			return nil, fail("CLIENT_ID is required")
		}
		if j, dup := seen[c.ID]; dup {
			return nil, fail("the ID is also provider %d's: IDs must be unique (set ID when two providers share a type)", j)
		}
		seen[c.ID] = i
		for _, f := range []struct{ name, value string }{{"AUTH_URL", c.AuthURL}, {"TOKEN_URL", c.TokenURL}, {"VALIDATE_URL", c.ValidateURL}} {
			if f.value == "" && f.name == "VALIDATE_URL" {
				continue
			}
			if f.value == "" {
				return nil, fail("%s is required for type %q (no default derives it)", f.name, c.Type)
			}
			if u, err := url.Parse(f.value); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
				return nil, fail("%s %q is not an absolute http(s) URL", f.name, f.value)
			}
		}
		p := &Provider{cfg: c, pkce: pkceSupported(c.Type), client: client}
		if c.Regex != "" {
			re, err := regexp.Compile(c.Regex)
			if err != nil {
				return nil, fail("REGEX %q does not compile: %v", c.Regex, err)
			}
			p.regex = re
		}
		p.oauth = &oauth2.Config{
			ClientID: c.ClientID, ClientSecret: c.ClientSecret, Scopes: c.Scopes,
			Endpoint:    oauth2.Endpoint{AuthURL: c.AuthURL, TokenURL: c.TokenURL},
			RedirectURL: opts.AccessURL.ResolveReference(&url.URL{Path: codersdk.ExternalAuthCallbackPath(c.ID)}).String(),
		}
		out = append(out, p)
	}
	return out, nil
}

// Config is the provider's configuration with its defaults applied.
func (p *Provider) Config() Config { return p.cfg }

// ID names the provider.
func (p *Provider) ID() string { return p.cfg.ID }

// PKCE reports whether the code flow sends a PKCE (S256) challenge.
func (p *Provider) PKCE() bool { return p.pkce }

// RedirectURL is the callback the provider sends the browser back to.
func (p *Provider) RedirectURL() string { return p.oauth.RedirectURL }

// Matches reports whether a Git remote URL is the provider's (its regex
// matches); a provider without a regex matches nothing.
func (p *Provider) Matches(remote string) bool {
	return p.regex != nil && p.regex.MatchString(remote)
}

// AuthCodeURL is where the browser goes to authorize: with state, and the
// S256 challenge of verifier when the provider takes PKCE. A loginHint is
// passed on as login_hint (providers that know it preselect the account).
func (p *Provider) AuthCodeURL(state, verifier, loginHint string) string {
	var opts []oauth2.AuthCodeOption
	if p.pkce && verifier != "" {
		opts = append(opts, oauth2.S256ChallengeOption(verifier))
	}
	if loginHint != "" {
		opts = append(opts, oauth2.SetAuthURLParam("login_hint", loginHint))
	}
	if p.cfg.Type == TypeAzureDevOps {
		opts = append(opts, oauth2.SetAuthURLParam("response_type", "Assertion"))
	}
	return p.oauth.AuthCodeURL(state, opts...)
}

func (p *Provider) ctx(ctx context.Context) context.Context {
	return context.WithValue(ctx, oauth2.HTTPClient, p.client)
}

// Exchange trades the callback's code (and the flow's PKCE verifier) for a
// token.
func (p *Provider) Exchange(ctx context.Context, code, verifier string) (*oauth2.Token, error) {
	var opts []oauth2.AuthCodeOption
	if p.pkce && verifier != "" {
		opts = append(opts, oauth2.VerifierOption(verifier))
	}
	if p.cfg.Type == TypeAzureDevOps {
		// Azure DevOps takes the code as a JWT bearer assertion and the
		// client secret as the client assertion.
		opts = append(opts,
			oauth2.SetAuthURLParam("client_assertion_type", "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"),
			oauth2.SetAuthURLParam("client_assertion", p.cfg.ClientSecret),
			oauth2.SetAuthURLParam("assertion", code),
			oauth2.SetAuthURLParam("grant_type", "urn:ietf:params:oauth:grant-type:jwt-bearer"),
			oauth2.SetAuthURLParam("code", ""))
	}
	tok, err := p.oauth.Exchange(p.ctx(ctx), code, opts...)
	if err != nil {
		return nil, fmt.Errorf("exchange the code at %s: %w", p.cfg.TokenURL, err)
	}
	return tok, nil
}

// RefusedError is a refresh the provider refused (the grant was revoked,
// the refresh token expired or was used already): the link is stale and
// the user must link again. Other refresh errors (the provider is down) are
// not RefusedErrors.
type RefusedError struct {
	// Reason is the provider's error code and description, or the HTTP
	// status.
	Reason string
}

func (e *RefusedError) Error() string {
	return "the provider refused to refresh the token: " + e.Reason
}

// ErrNoRefresh is the refresh of a provider configured with NoRefresh, or
// of a link without a refresh token: the user must link again.
var ErrNoRefresh = &RefusedError{Reason: "the token expired and cannot be refreshed (no refresh token, or refresh is disabled for the provider)"}

// Refresh asks the provider for a new token with a refresh token. The new
// token keeps the old refresh token when the provider sends none.
func (p *Provider) Refresh(ctx context.Context, refreshToken string) (*oauth2.Token, error) {
	if p.cfg.NoRefresh || refreshToken == "" {
		return nil, ErrNoRefresh
	}
	// Only the refresh token: x/oauth2 then always asks the provider.
	tok, err := p.oauth.TokenSource(p.ctx(ctx), &oauth2.Token{RefreshToken: refreshToken}).Token()
	if err == nil {
		return tok, nil
	}
	var re *oauth2.RetrieveError
	if errors.As(err, &re) && re.Response != nil {
		status := re.Response.StatusCode
		// GitHub answers a bad refresh token with 200 and an error code.
		if re.ErrorCode != "" || status == http.StatusBadRequest || status == http.StatusUnauthorized || status == http.StatusForbidden {
			reason := re.ErrorCode
			if reason == "" {
				reason = "HTTP " + strconv.Itoa(status)
			}
			if re.ErrorDescription != "" {
				reason += ": " + re.ErrorDescription
			}
			return nil, &RefusedError{Reason: reason}
		}
	}
	return nil, fmt.Errorf("refresh the token at %s: %w", p.cfg.TokenURL, err)
}

// TokenExtra is the token response's fields named by ExtraTokenKeys (nil
// when none are).
func (p *Provider) TokenExtra(tok *oauth2.Token) map[string]any {
	if len(p.cfg.ExtraTokenKeys) == 0 {
		return nil
	}
	out := make(map[string]any, len(p.cfg.ExtraTokenKeys))
	for _, k := range p.cfg.ExtraTokenKeys {
		out[k] = tok.Extra(k)
	}
	return out
}

// maxValidateBody caps what is read of the validate URL's answer.
const maxValidateBody = 1 << 20

// Validate asks the validate URL whether an access token is good: 200 is
// valid (and its JSON body, when it is one, says whose token it is), 401 is
// not; any other answer is an error, as the token's state is unknown. A
// provider without a validate URL takes every token as valid.
func (p *Provider) Validate(ctx context.Context, accessToken string) (bool, *codersdk.ExternalAuthUser, error) {
	if p.cfg.ValidateURL == "" {
		return true, nil, nil
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.cfg.ValidateURL, nil)
	if err != nil {
		return false, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+accessToken)
	req.Header.Set("Accept", "application/json")
	res, err := p.client.Do(req)
	if err != nil {
		return false, nil, fmt.Errorf("validate the token at %s: %w", p.cfg.ValidateURL, err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(io.LimitReader(res.Body, maxValidateBody))
	if err != nil {
		return false, nil, fmt.Errorf("validate the token at %s: read the answer: %w", p.cfg.ValidateURL, err)
	}
	switch res.StatusCode {
	case http.StatusOK:
		return true, parseUser(body), nil
	case http.StatusUnauthorized:
		return false, nil, nil
	}
	return false, nil, fmt.Errorf("validate the token at %s: %s: %s", p.cfg.ValidateURL, res.Status, strings.TrimSpace(string(body[:min(len(body), 200)])))
}

// parseUser reads the account a validate URL's answer describes: GitHub's
// and Gitea's user objects, OpenID Connect userinfo. Nil when it names
// nobody.
func parseUser(body []byte) *codersdk.ExternalAuthUser {
	var m map[string]any
	if json.Unmarshal(body, &m) != nil {
		return nil
	}
	str := func(keys ...string) string {
		for _, k := range keys {
			if s, ok := m[k].(string); ok && s != "" {
				return s
			}
		}
		return ""
	}
	u := &codersdk.ExternalAuthUser{
		Login:      str("login", "preferred_username", "username", "sub"),
		AvatarURL:  str("avatar_url", "picture"),
		ProfileURL: str("html_url", "profile", "web_url"),
		Name:       str("name", "full_name"),
	}
	if id, ok := m["id"].(float64); ok {
		u.ID = int64(id)
	}
	if u.Login == "" && u.Name == "" && u.ID == 0 {
		return nil
	}
	return u
}

// GitCredentials are what git is told for a token, by Coder's rule per
// provider type: GitLab takes "oauth2" and the token, Bitbucket
// "x-token-auth" and the token, every other provider the token as the
// username and an empty password.
func (p *Provider) GitCredentials(accessToken string) (username, password string) {
	switch p.cfg.Type {
	case TypeGitLab:
		return "oauth2", accessToken
	case TypeBitbucketServer, "bitbucket-cloud":
		return "x-token-auth", accessToken
	}
	return accessToken, ""
}
