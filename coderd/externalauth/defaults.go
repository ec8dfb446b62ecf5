package externalauth

import (
	"fmt"
	"net/url"
	"regexp"
	"strings"
)

// Provider types with defaults of their own (Coder's names). Any other
// type is a generic OAuth2 provider: every URL must be configured.
const (
	TypeGitea           = "gitea"
	TypeGitLab          = "gitlab"
	TypeGitHub          = "github"
	TypeBitbucketServer = "bitbucket-server"
	TypeAzureDevOps     = "azure-devops"
)

// defaultIcon is Coder's icon for a provider type it has none for (a key).
const defaultIcon = "/emojis/1f511.png"

// Defaults returns c with the empty fields its type gives defaults for
// filled in, as Coder does: the URLs of the public service (github.com,
// gitlab.com, Azure DevOps) or, for a self-hosted server, the URLs Coder
// derives from the AuthURL's host (GitLab, Gitea, Bitbucket Server; GitHub
// Enterprise too, which Coder leaves to the configuration); the regex that
// matches that host; the scopes the Git operations need; a display name
// and icon. ID defaults to Type, DisplayName to Type.
//
// Set fields are never changed. Defaults does not validate: New does.
func Defaults(c Config) Config {
	c.Type = strings.ToLower(strings.TrimSpace(c.Type))
	d := typeDefaults(c)
	fill(&c.AuthURL, d.AuthURL)
	fill(&c.TokenURL, d.TokenURL)
	fill(&c.ValidateURL, d.ValidateURL)
	fill(&c.Regex, d.Regex)
	fill(&c.DisplayName, d.DisplayName)
	fill(&c.DisplayIcon, d.DisplayIcon)
	if len(c.Scopes) == 0 {
		c.Scopes = d.Scopes
	}
	fill(&c.ID, c.Type)
	fill(&c.DisplayName, c.Type)
	fill(&c.DisplayIcon, defaultIcon)
	return c
}

func fill(s *string, def string) {
	if *s == "" {
		*s = def
	}
}

// pkceSupported reports whether the provider type takes a PKCE (S256)
// challenge; Coder sends none to Bitbucket Server and Azure DevOps.
func pkceSupported(typ string) bool {
	switch typ {
	case TypeBitbucketServer, TypeAzureDevOps:
		return false
	}
	return true
}

// typeDefaults are the defaults of c's type, some derived from c.AuthURL.
func typeDefaults(c Config) Config {
	switch c.Type {
	case TypeGitHub:
		d := Config{
			AuthURL: "https://github.com/login/oauth/authorize", TokenURL: "https://github.com/login/oauth/access_token",
			ValidateURL: "https://api.github.com/user", Regex: hostRegex("github.com"),
			Scopes: []string{"repo", "workflow"}, DisplayName: "GitHub", DisplayIcon: "/icon/github.svg",
		}
		// GitHub Enterprise Server: the same paths on its host, its API
		// under /api/v3.
		if base, ok := selfHosted(c.AuthURL, "github.com"); ok {
			d.AuthURL = ""
			d.TokenURL = resolve(base, "/login/oauth/access_token")
			d.ValidateURL = resolve(base, "/api/v3/user")
			d.Regex = hostRegex(base.Host)
		}
		return d
	case TypeGitLab:
		d := Config{
			AuthURL: "https://gitlab.com/oauth/authorize", TokenURL: "https://gitlab.com/oauth/token",
			ValidateURL: "https://gitlab.com/oauth/token/info", Regex: hostRegex("gitlab.com"),
			Scopes: []string{"write_repository", "read_api"}, DisplayName: "GitLab", DisplayIcon: "/icon/gitlab.svg",
		}
		if base, ok := selfHosted(c.AuthURL, "gitlab.com"); ok {
			d.AuthURL = resolve(base, "/oauth/authorize")
			d.TokenURL = resolve(base, "/oauth/token")
			d.ValidateURL = resolve(base, "/oauth/token/info")
			d.Regex = hostRegex(base.Host)
		}
		return d
	case TypeGitea:
		d := Config{
			Scopes: []string{"read:repository", "write:repository", "read:user"}, DisplayName: "Gitea", DisplayIcon: "/icon/gitea.svg",
		}
		auth := c.AuthURL
		if auth == "" {
			auth = "https://gitea.com/login/oauth/authorize"
			d.AuthURL = auth
		}
		if base, err := url.Parse(auth); err == nil && base.Host != "" {
			d.TokenURL = resolve(base, "/login/oauth/access_token")
			d.ValidateURL = resolve(base, "/login/oauth/userinfo")
			d.Regex = hostRegex(base.Host)
		}
		return d
	case TypeBitbucketServer:
		d := Config{
			Scopes: []string{"PUBLIC_REPOS", "REPO_READ", "REPO_WRITE"}, DisplayName: "Bitbucket Server", DisplayIcon: "/icon/bitbucket.svg",
		}
		// No public service: everything derives from the AuthURL.
		if base, err := url.Parse(c.AuthURL); err == nil && base.Host != "" {
			d.TokenURL = resolve(base, "/rest/oauth2/latest/token")
			// 200 signed in, 401 not: the count of the user's open
			// pull requests.
			d.ValidateURL = resolve(base, "/rest/api/latest/inbox/pull-requests/count")
			d.Regex = hostRegex(base.Host)
		}
		return d
	case TypeAzureDevOps:
		return Config{
			AuthURL: "https://app.vssps.visualstudio.com/oauth2/authorize", TokenURL: "https://app.vssps.visualstudio.com/oauth2/token",
			Regex: hostRegex("dev.azure.com"), Scopes: []string{"vso.code_write"},
			DisplayName: "Azure DevOps", DisplayIcon: "/icon/azure-devops.svg",
		}
	}
	return Config{}
}

// selfHosted parses authURL when it names a host other than the public
// service's.
func selfHosted(authURL, public string) (*url.URL, bool) {
	if authURL == "" {
		return nil, false
	}
	u, err := url.Parse(authURL)
	if err != nil || u.Host == "" || strings.EqualFold(u.Hostname(), public) {
		return nil, false
	}
	return u, true
}

func resolve(base *url.URL, path string) string {
	return base.ResolveReference(&url.URL{Path: path}).String()
}

// hostRegex matches remote URLs on host, with or without a scheme (git
// asks "Username for 'https://host':").
func hostRegex(host string) string {
	return fmt.Sprintf(`^(https?://)?%s(/.*)?$`, regexp.QuoteMeta(host))
}
