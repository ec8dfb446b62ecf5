package testidp

import (
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
)

// The login and consent app. Hydra sends the browser to /login with a
// login_challenge; the app asks Hydra's admin API what is being asked,
// accepts it for a registered user (from the form, or at once for a
// login_hint naming one), and sends the browser back to where Hydra says.
// Consent follows the same way at /consent and is always given, for every
// requested scope, with the user's claims in the ID token session (which
// Hydra's userinfo serves too). Logins are not remembered: every
// authorization request without a login_hint shows the form.

// errorHandler is an http.Handler that returns its error; serve renders it.
type errorHandler func(w http.ResponseWriter, r *http.Request) error

func (h errorHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if err := h(w, r); err != nil {
		http.Error(w, "testidp: "+err.Error(), http.StatusInternalServerError)
	}
}

func (p *IdP) loginApp() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /login", errorHandler(p.loginPage))
	mux.Handle("POST /login", errorHandler(p.loginSubmit))
	mux.Handle("GET /consent", errorHandler(p.consent))
	mux.Handle("GET /error", errorHandler(errorPage))
	mux.Handle("GET /logout", errorHandler(p.logout))
	return mux
}

// loginRequest is what Hydra's admin API says of a login challenge.
type loginRequest struct {
	Skip        bool   `json:"skip"`
	Subject     string `json:"subject"`
	OIDCContext struct {
		LoginHint string `json:"login_hint"`
	} `json:"oidc_context"`
}

// redirect is the answer to accepting a challenge.
type redirect struct {
	RedirectTo string `json:"redirect_to"`
}

func (p *IdP) loginPage(w http.ResponseWriter, r *http.Request) error {
	challenge := r.URL.Query().Get("login_challenge")
	if challenge == "" {
		return errors.New("no login_challenge")
	}
	var lr loginRequest
	if err := p.call(r.Context(), http.MethodGet, "/admin/oauth2/auth/requests/login?"+challengeQuery("login", challenge), nil, &lr); err != nil {
		return fmt.Errorf("get login request: %w", err)
	}
	if lr.Skip {
		// Hydra already authenticated this subject; it must be accepted
		// as it is. Not a login of the app's.
		return p.acceptLogin(w, r, challenge, User{Subject: lr.Subject}, false)
	}
	if u, ok := p.user(lr.OIDCContext.LoginHint); ok {
		return p.acceptLogin(w, r, challenge, u, true)
	}
	return renderLogin(w, http.StatusOK, loginForm{Challenge: challenge, Username: lr.OIDCContext.LoginHint})
}

func (p *IdP) loginSubmit(w http.ResponseWriter, r *http.Request) error {
	if err := r.ParseForm(); err != nil {
		return err
	}
	challenge, username := r.PostForm.Get("login_challenge"), r.PostForm.Get("username")
	u, ok := p.user(username)
	if !ok {
		return renderLogin(w, http.StatusUnauthorized, loginForm{
			Challenge: challenge, Username: username, Error: fmt.Sprintf("Unknown user %q.", username),
		})
	}
	return p.acceptLogin(w, r, challenge, u, true)
}

// acceptLogin tells Hydra who signed in and sends the browser on. The
// username rides in the login context to consent, which reads the user's
// claims then.
func (p *IdP) acceptLogin(w http.ResponseWriter, r *http.Request, challenge string, u User, count bool) error {
	var next redirect
	body := map[string]any{
		"subject":  u.Subject,
		"remember": false,
		"context":  map[string]string{"username": u.Username},
	}
	if err := p.call(r.Context(), http.MethodPut, "/admin/oauth2/auth/requests/login/accept?"+challengeQuery("login", challenge), body, &next); err != nil {
		return fmt.Errorf("accept login: %w", err)
	}
	if count {
		p.mu.Lock()
		p.logins++
		p.mu.Unlock()
	}
	http.Redirect(w, r, next.RedirectTo, http.StatusSeeOther)
	return nil
}

// consentRequest is what Hydra's admin API says of a consent challenge.
type consentRequest struct {
	Subject           string   `json:"subject"`
	RequestedScope    []string `json:"requested_scope"`
	RequestedAudience []string `json:"requested_access_token_audience"`
	Context           struct {
		Username string `json:"username"`
	} `json:"context"`
}

func (p *IdP) consent(w http.ResponseWriter, r *http.Request) error {
	challenge := r.URL.Query().Get("consent_challenge")
	if challenge == "" {
		return errors.New("no consent_challenge")
	}
	var cr consentRequest
	if err := p.call(r.Context(), http.MethodGet, "/admin/oauth2/auth/requests/consent?"+challengeQuery("consent", challenge), nil, &cr); err != nil {
		return fmt.Errorf("get consent request: %w", err)
	}
	u, ok := p.user(cr.Context.Username)
	if !ok {
		u, ok = p.userBySubject(cr.Subject)
	}
	if !ok {
		return p.rejectConsent(w, r, challenge, fmt.Sprintf("testidp: no user with subject %q", cr.Subject))
	}
	var next redirect
	body := map[string]any{
		"grant_scope":                 cr.RequestedScope,
		"grant_access_token_audience": cr.RequestedAudience,
		"remember":                    false,
		"session": map[string]any{
			"id_token":     u.claims(),
			"access_token": map[string]any{},
		},
	}
	if err := p.call(r.Context(), http.MethodPut, "/admin/oauth2/auth/requests/consent/accept?"+challengeQuery("consent", challenge), body, &next); err != nil {
		return fmt.Errorf("accept consent: %w", err)
	}
	http.Redirect(w, r, next.RedirectTo, http.StatusFound)
	return nil
}

func (p *IdP) rejectConsent(w http.ResponseWriter, r *http.Request, challenge, reason string) error {
	var next redirect
	body := map[string]any{"error": "access_denied", "error_description": reason}
	if err := p.call(r.Context(), http.MethodPut, "/admin/oauth2/auth/requests/consent/reject?"+challengeQuery("consent", challenge), body, &next); err != nil {
		return fmt.Errorf("reject consent: %w", err)
	}
	http.Redirect(w, r, next.RedirectTo, http.StatusFound)
	return nil
}

// logout accepts an RP-initiated logout at once.
func (p *IdP) logout(w http.ResponseWriter, r *http.Request) error {
	challenge := r.URL.Query().Get("logout_challenge")
	if challenge == "" {
		return errors.New("no logout_challenge")
	}
	var next redirect
	if err := p.call(r.Context(), http.MethodPut, "/admin/oauth2/auth/requests/logout/accept?"+challengeQuery("logout", challenge), nil, &next); err != nil {
		return fmt.Errorf("accept logout: %w", err)
	}
	http.Redirect(w, r, next.RedirectTo, http.StatusFound)
	return nil
}

// errorPage shows the error Hydra redirected with.
func errorPage(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(http.StatusBadRequest)
	return pageTemplate.ExecuteTemplate(w, "error", map[string]string{
		"Error": q.Get("error"), "Description": q.Get("error_description"), "Hint": q.Get("error_hint"),
	})
}

func (p *IdP) user(username string) (User, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	u, ok := p.users[username]
	return u, ok && username != ""
}

func (p *IdP) userBySubject(subject string) (User, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, u := range p.users {
		if u.Subject == subject {
			return u, true
		}
	}
	return User{}, false
}

// claims are the ID token (and userinfo) claims of u, beside the "sub"
// Hydra sets from the login.
func (u User) claims() map[string]any {
	c := map[string]any{
		"preferred_username": u.Username,
		"email_verified":     u.EmailVerified,
	}
	if u.Email != "" {
		c["email"] = u.Email
	}
	if u.Name != "" {
		c["name"] = u.Name
	}
	if u.Groups != nil {
		c["groups"] = u.Groups
	}
	if u.Roles != nil {
		c["roles"] = u.Roles
	}
	return c
}

func challengeQuery(kind, challenge string) string {
	return url.Values{kind + "_challenge": {challenge}}.Encode()
}

// loginForm fills the login page.
type loginForm struct {
	Challenge string
	Username  string
	Error     string
}

func renderLogin(w http.ResponseWriter, status int, f loginForm) error {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	return pageTemplate.ExecuteTemplate(w, "login", f)
}

// pageTemplate holds the login page (an input "username" and a button
// "sign-in", for a browser to fill) and the error page.
var pageTemplate = template.Must(template.New("").Parse(`
{{define "login"}}<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Test IdP: sign in</title></head>
<body>
<h1>Sign in to the test identity provider</h1>
{{if .Error}}<p id="error" role="alert">{{.Error}}</p>{{end}}
<form method="post" action="/login">
<input type="hidden" name="login_challenge" value="{{.Challenge}}">
<label for="username">Username</label>
<input id="username" name="username" type="text" autocomplete="username" value="{{.Username}}" autofocus>
<button id="sign-in" type="submit">Sign in</button>
</form>
</body></html>
{{end}}
{{define "error"}}<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Test IdP: error</title></head>
<body>
<h1>Sign-in error</h1>
<p id="error">{{.Error}}</p>
<p id="error-description">{{.Description}}</p>
{{if .Hint}}<p id="error-hint">{{.Hint}}</p>{{end}}
</body></html>
{{end}}`))
