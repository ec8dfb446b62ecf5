package externalauth_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"airgapcoder/coderd/externalauth"
)

func TestDefaults(t *testing.T) {
	tests := []struct {
		name string
		in   externalauth.Config
		want externalauth.Config
	}{
		{
			name: "github.com",
			in:   externalauth.Config{Type: "github"},
			want: externalauth.Config{
				ID: "github", Type: "github", AuthURL: "https://github.com/login/oauth/authorize",
				TokenURL: "https://github.com/login/oauth/access_token", ValidateURL: "https://api.github.com/user",
				Regex: `^(https?://)?github\.com(/.*)?$`, Scopes: []string{"repo", "workflow"}, DisplayName: "GitHub", DisplayIcon: "/icon/github.svg",
			},
		},
		{
			name: "github enterprise",
			in:   externalauth.Config{Type: "GitHub", AuthURL: "https://ghe.corp.internal/login/oauth/authorize"},
			want: externalauth.Config{
				ID: "github", Type: "github", AuthURL: "https://ghe.corp.internal/login/oauth/authorize",
				TokenURL: "https://ghe.corp.internal/login/oauth/access_token", ValidateURL: "https://ghe.corp.internal/api/v3/user",
				Regex: `^(https?://)?ghe\.corp\.internal(/.*)?$`, Scopes: []string{"repo", "workflow"}, DisplayName: "GitHub", DisplayIcon: "/icon/github.svg",
			},
		},
		{
			name: "gitlab self-managed",
			in:   externalauth.Config{ID: "gl", Type: "gitlab", AuthURL: "https://gitlab.corp.internal:8443/oauth/authorize"},
			want: externalauth.Config{
				ID: "gl", Type: "gitlab", AuthURL: "https://gitlab.corp.internal:8443/oauth/authorize",
				TokenURL: "https://gitlab.corp.internal:8443/oauth/token", ValidateURL: "https://gitlab.corp.internal:8443/oauth/token/info",
				Regex: `^(https?://)?gitlab\.corp\.internal:8443(/.*)?$`, Scopes: []string{"write_repository", "read_api"}, DisplayName: "GitLab", DisplayIcon: "/icon/gitlab.svg",
			},
		},
		{
			name: "gitea",
			in:   externalauth.Config{Type: "gitea", AuthURL: "https://git.corp.internal/login/oauth/authorize", DisplayName: "Corp Git"},
			want: externalauth.Config{
				ID: "gitea", Type: "gitea", AuthURL: "https://git.corp.internal/login/oauth/authorize",
				TokenURL: "https://git.corp.internal/login/oauth/access_token", ValidateURL: "https://git.corp.internal/login/oauth/userinfo",
				Regex: `^(https?://)?git\.corp\.internal(/.*)?$`, Scopes: []string{"read:repository", "write:repository", "read:user"}, DisplayName: "Corp Git", DisplayIcon: "/icon/gitea.svg",
			},
		},
		{
			name: "gitea.com",
			in:   externalauth.Config{Type: "gitea"},
			want: externalauth.Config{
				ID: "gitea", Type: "gitea", AuthURL: "https://gitea.com/login/oauth/authorize",
				TokenURL: "https://gitea.com/login/oauth/access_token", ValidateURL: "https://gitea.com/login/oauth/userinfo",
				Regex: `^(https?://)?gitea\.com(/.*)?$`, Scopes: []string{"read:repository", "write:repository", "read:user"}, DisplayName: "Gitea", DisplayIcon: "/icon/gitea.svg",
			},
		},
		{
			name: "bitbucket server",
			in:   externalauth.Config{Type: "bitbucket-server", AuthURL: "https://bitbucket.corp.internal/rest/oauth2/latest/authorize"},
			want: externalauth.Config{
				ID: "bitbucket-server", Type: "bitbucket-server", AuthURL: "https://bitbucket.corp.internal/rest/oauth2/latest/authorize",
				TokenURL: "https://bitbucket.corp.internal/rest/oauth2/latest/token", ValidateURL: "https://bitbucket.corp.internal/rest/api/latest/inbox/pull-requests/count",
				Regex: `^(https?://)?bitbucket\.corp\.internal(/.*)?$`, Scopes: []string{"PUBLIC_REPOS", "REPO_READ", "REPO_WRITE"}, DisplayName: "Bitbucket Server", DisplayIcon: "/icon/bitbucket.svg",
			},
		},
		{
			name: "azure devops",
			in:   externalauth.Config{Type: "azure-devops"},
			want: externalauth.Config{
				ID: "azure-devops", Type: "azure-devops", AuthURL: "https://app.vssps.visualstudio.com/oauth2/authorize",
				TokenURL: "https://app.vssps.visualstudio.com/oauth2/token", Regex: `^(https?://)?dev\.azure\.com(/.*)?$`,
				Scopes: []string{"vso.code_write"}, DisplayName: "Azure DevOps", DisplayIcon: "/icon/azure-devops.svg",
			},
		},
		{
			name: "generic",
			in:   externalauth.Config{Type: "jira", AuthURL: "https://a/auth", TokenURL: "https://a/token"},
			want: externalauth.Config{ID: "jira", Type: "jira", AuthURL: "https://a/auth", TokenURL: "https://a/token", DisplayName: "jira", DisplayIcon: "/emojis/1f511.png"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := externalauth.Defaults(tc.in)
			gj, _ := json.Marshal(got)
			wj, _ := json.Marshal(tc.want)
			if string(gj) != string(wj) {
				t.Errorf("got  %s\nwant %s", gj, wj)
			}
		})
	}
}

func TestNewRefuses(t *testing.T) {
	ok := externalauth.Config{ID: "a", Type: "generic", ClientID: "c", AuthURL: "https://a/auth", TokenURL: "https://a/token"}
	with := func(f func(*externalauth.Config)) externalauth.Config {
		c := ok
		f(&c)
		return c
	}
	tests := []struct {
		name    string
		configs []externalauth.Config
		want    string
	}{
		{"duplicate id", []externalauth.Config{ok, ok}, "IDs must be unique"},
		{"duplicate default id", []externalauth.Config{{Type: "gitea", ClientID: "c"}, {Type: "gitea", ClientID: "d"}}, `provider 1 (gitea): the ID is also provider 0's`},
		{"no client id", []externalauth.Config{with(func(c *externalauth.Config) { c.ClientID = "" })}, "CLIENT_ID is required"},
		{"bad regex", []externalauth.Config{with(func(c *externalauth.Config) { c.Regex = "(" })}, `REGEX "(" does not compile`},
		{"no id nor type", []externalauth.Config{with(func(c *externalauth.Config) { c.ID, c.Type = "", "" })}, "set its ID or TYPE"},
		{"id not url-safe", []externalauth.Config{with(func(c *externalauth.Config) { c.ID = "a/b" })}, "the ID must be"},
		{"generic without token url", []externalauth.Config{with(func(c *externalauth.Config) { c.TokenURL = "" })}, `TOKEN_URL is required for type "generic"`},
		{"relative auth url", []externalauth.Config{with(func(c *externalauth.Config) { c.AuthURL = "/auth" })}, `AUTH_URL "/auth" is not an absolute http(s) URL`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := externalauth.New(tc.configs, externalauth.Options{AccessURL: &url.URL{Scheme: "https", Host: "coder.test"}})
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "externalauth: ") {
				t.Errorf("got %v, want an error saying %q", err, tc.want)
			}
		})
	}
	if ps, err := externalauth.New([]externalauth.Config{ok}, externalauth.Options{AccessURL: &url.URL{Scheme: "https", Host: "coder.test"}}); err != nil || len(ps) != 1 {
		t.Fatalf("valid config: got %v, %v", ps, err)
	} else if got, want := ps[0].RedirectURL(), "https://coder.test/external-auth/a/callback"; got != want {
		t.Errorf("redirect URL: got %s, want %s", got, want)
	}
}

// fakeProvider is an OAuth2 server that records what it was sent.
type fakeProvider struct {
	srv *httptest.Server
	mu  sync.Mutex
	// forms are the token endpoint's requests.
	forms []url.Values
	// refuse makes refreshes fail with invalid_grant; down with a 503.
	refuse, down bool
}

func newFakeProvider(t *testing.T) *fakeProvider {
	f := &fakeProvider{}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /token", func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		f.mu.Lock()
		f.forms = append(f.forms, r.PostForm)
		refuse, down := f.refuse, f.down
		f.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch {
		case down:
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{}`))
		case refuse && r.PostForm.Get("grant_type") == "refresh_token":
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte(`{"error":"invalid_grant","error_description":"revoked"}`))
		default:
			_, _ = w.Write([]byte(`{"access_token":"at-` + r.PostForm.Get("grant_type") + `","refresh_token":"rt-2","token_type":"bearer","expires_in":3600,"slack_user":"u1"}`))
		}
	})
	mux.HandleFunc("GET /user", func(w http.ResponseWriter, r *http.Request) {
		switch r.Header.Get("Authorization") {
		case "Bearer good":
			_, _ = w.Write([]byte(`{"id":42,"login":"alice","avatar_url":"https://a/av.png","html_url":"https://a/alice","name":"Alice"}`))
		case "Bearer broken":
			http.Error(w, "boom", http.StatusInternalServerError)
		default:
			http.Error(w, "no", http.StatusUnauthorized)
		}
	})
	f.srv = httptest.NewServer(mux)
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeProvider) provider(t *testing.T, typ string, mutate ...func(*externalauth.Config)) *externalauth.Provider {
	t.Helper()
	c := externalauth.Config{
		ID: "p", Type: typ, ClientID: "cid", ClientSecret: "secret", AuthURL: f.srv.URL + "/authorize",
		TokenURL: f.srv.URL + "/token", ValidateURL: f.srv.URL + "/user", Regex: `^https://git\.test/`,
	}
	for _, m := range mutate {
		m(&c)
	}
	ps, err := externalauth.New([]externalauth.Config{c}, externalauth.Options{AccessURL: &url.URL{Scheme: "https", Host: "coder.test"}, HTTPClient: f.srv.Client()})
	if err != nil {
		t.Fatal(err)
	}
	return ps[0]
}

func TestCodeFlow(t *testing.T) {
	f := newFakeProvider(t)
	ctx := context.Background()
	for _, tc := range []struct {
		typ  string
		pkce bool
	}{{"generic", true}, {"gitea", true}, {"bitbucket-server", false}} {
		t.Run(tc.typ, func(t *testing.T) {
			p := f.provider(t, tc.typ, func(c *externalauth.Config) { c.ExtraTokenKeys = []string{"slack_user"} })
			u, err := url.Parse(p.AuthCodeURL("st", "verifier-0123456789012345678901234567890123", "alice"))
			if err != nil {
				t.Fatal(err)
			}
			q := u.Query()
			if q.Get("state") != "st" || q.Get("login_hint") != "alice" || q.Get("redirect_uri") != "https://coder.test/external-auth/p/callback" {
				t.Errorf("auth URL %s: want state, login_hint and the callback as redirect_uri", u)
			}
			if got := q.Get("code_challenge_method") == "S256" && q.Get("code_challenge") != ""; got != tc.pkce {
				t.Errorf("PKCE challenge sent: got %v, want %v (%s)", got, tc.pkce, u)
			}
			tok, err := p.Exchange(ctx, "the-code", "verifier-0123456789012345678901234567890123")
			if err != nil {
				t.Fatal(err)
			}
			f.mu.Lock()
			form := f.forms[len(f.forms)-1]
			f.mu.Unlock()
			if form.Get("code") != "the-code" || (form.Get("code_verifier") != "") != tc.pkce {
				t.Errorf("token request %v: want the code, and the verifier only with PKCE (%v)", form, tc.pkce)
			}
			if tok.AccessToken != "at-authorization_code" || tok.RefreshToken != "rt-2" || tok.Expiry.IsZero() {
				t.Errorf("got token %+v", tok)
			}
			if extra := p.TokenExtra(tok); extra["slack_user"] != "u1" {
				t.Errorf("token extra: got %v, want slack_user u1", extra)
			}
		})
	}
}

func TestRefresh(t *testing.T) {
	f := newFakeProvider(t)
	ctx := context.Background()
	p := f.provider(t, "generic")
	tok, err := p.Refresh(ctx, "rt-1")
	if err != nil || tok.AccessToken != "at-refresh_token" {
		t.Fatalf("refresh: got %+v, %v", tok, err)
	}
	f.mu.Lock()
	form := f.forms[len(f.forms)-1]
	f.refuse = true
	f.mu.Unlock()
	if form.Get("refresh_token") != "rt-1" {
		t.Errorf("refresh request %v: want refresh_token rt-1", form)
	}
	var refused *externalauth.RefusedError
	_, err = p.Refresh(ctx, "rt-1")
	if !asRefused(err, &refused) || !strings.Contains(refused.Reason, "invalid_grant: revoked") {
		t.Errorf("refused refresh: got %v, want a RefusedError with invalid_grant: revoked", err)
	}
	f.mu.Lock()
	f.refuse, f.down = false, true
	f.mu.Unlock()
	if _, err = p.Refresh(ctx, "rt-1"); err == nil || asRefused(err, &refused) {
		t.Errorf("provider down: got %v, want an error that is not a refusal", err)
	}
	if _, err = p.Refresh(ctx, ""); !asRefused(err, &refused) {
		t.Errorf("no refresh token: got %v, want a refusal", err)
	}
	noRefresh := f.provider(t, "generic", func(c *externalauth.Config) { c.NoRefresh = true })
	if _, err = noRefresh.Refresh(ctx, "rt-1"); !asRefused(err, &refused) {
		t.Errorf("NoRefresh: got %v, want a refusal", err)
	}
}

func asRefused(err error, target **externalauth.RefusedError) bool {
	r, ok := err.(*externalauth.RefusedError)
	if ok {
		*target = r
	}
	return ok
}

func TestValidate(t *testing.T) {
	f := newFakeProvider(t)
	ctx := context.Background()
	p := f.provider(t, "generic")
	valid, who, err := p.Validate(ctx, "good")
	if err != nil || !valid || who == nil || who.Login != "alice" || who.ID != 42 || who.ProfileURL != "https://a/alice" || who.Name != "Alice" {
		t.Errorf("good token: got %v %+v %v, want valid, alice", valid, who, err)
	}
	if valid, _, err := p.Validate(ctx, "revoked"); err != nil || valid {
		t.Errorf("401: got %v, %v, want invalid without error", valid, err)
	}
	if _, _, err := p.Validate(ctx, "broken"); err == nil || !strings.Contains(err.Error(), "500") {
		t.Errorf("500: got %v, want an error naming the status", err)
	}
	none := f.provider(t, "generic", func(c *externalauth.Config) { c.ValidateURL = "" })
	if valid, _, err := none.Validate(ctx, "anything"); !valid || err != nil {
		t.Errorf("no validate URL: got %v, %v, want valid", valid, err)
	}
}

func TestGitCredentialsAndMatch(t *testing.T) {
	f := newFakeProvider(t)
	for _, tc := range []struct{ typ, user, pass string }{
		{"gitlab", "oauth2", "tok"}, {"bitbucket-server", "x-token-auth", "tok"}, {"gitea", "tok", ""}, {"github", "tok", ""}, {"generic", "tok", ""},
	} {
		user, pass := f.provider(t, tc.typ).GitCredentials("tok")
		if user != tc.user || pass != tc.pass {
			t.Errorf("%s: got %q/%q, want %q/%q", tc.typ, user, pass, tc.user, tc.pass)
		}
	}
	p := f.provider(t, "generic")
	for remote, want := range map[string]bool{"https://git.test/org/repo.git": true, "https://other.test/repo": false} {
		if got := p.Matches(remote); got != want {
			t.Errorf("Matches(%s): got %v, want %v", remote, got, want)
		}
	}
	noRegex := f.provider(t, "generic", func(c *externalauth.Config) { c.Regex = "" })
	if noRegex.Matches("https://git.test/x") {
		t.Error("a provider without a regex matched a URL")
	}
}
