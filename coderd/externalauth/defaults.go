package externalauth

import (
	"fmt"
	"net/url"
	"regexp"
	"slices"
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

// providerType is what a provider type gives as defaults.
type providerType struct {
	// public holds the display name, icon and scopes, and the URLs of the
	// public service (none for a type without one).
	public Config
	// publicHost is the public service's Git host, which its Regex
	// matches; "" for a type without a public service.
	publicHost string
	// tokenPath and validatePath are where a self-hosted server (one whose
	// AuthURL names another host than publicHost) answers on the AuthURL's
	// host; "" for a type that is never self-hosted.
	tokenPath, validatePath string
}

// providerTypes are the types with defaults of their own, as Coder has them.
var providerTypes = map[string]providerType{
	// GitHub Enterprise Server: the same paths on its host, its API under
	// /api/v3.
	TypeGitHub: {
		public: Config{
			AuthURL: "https://github.com/login/oauth/authorize", TokenURL: "https://github.com/login/oauth/access_token",
			ValidateURL: "https://api.github.com/user", Scopes: []string{"repo", "workflow"}, DisplayName: "GitHub", DisplayIcon: "/icon/github.svg",
		},
		publicHost: "github.com", tokenPath: "/login/oauth/access_token", validatePath: "/api/v3/user",
	},
	TypeGitLab: {
		public: Config{
			AuthURL: "https://gitlab.com/oauth/authorize", TokenURL: "https://gitlab.com/oauth/token",
			ValidateURL: "https://gitlab.com/oauth/token/info", Scopes: []string{"write_repository", "read_api"}, DisplayName: "GitLab", DisplayIcon: "/icon/gitlab.svg",
		},
		publicHost: "gitlab.com", tokenPath: "/oauth/token", validatePath: "/oauth/token/info",
	},
	TypeGitea: {
		public: Config{
			AuthURL: "https://gitea.com/login/oauth/authorize", TokenURL: "https://gitea.com/login/oauth/access_token",
			ValidateURL: "https://gitea.com/login/oauth/userinfo", Scopes: []string{"read:repository", "write:repository", "read:user"},
			DisplayName: "Gitea", DisplayIcon: "/icon/gitea.svg",
		},
		publicHost: "gitea.com", tokenPath: "/login/oauth/access_token", validatePath: "/login/oauth/userinfo",
	},
	// No public service: everything derives from the AuthURL. It validates
	// with the count of the user's open pull requests (200 signed in, 401
	// not).
	TypeBitbucketServer: {
		public:    Config{Scopes: []string{"PUBLIC_REPOS", "REPO_READ", "REPO_WRITE"}, DisplayName: "Bitbucket Server", DisplayIcon: "/icon/bitbucket.svg"},
		tokenPath: "/rest/oauth2/latest/token", validatePath: "/rest/api/latest/inbox/pull-requests/count",
	},
	TypeAzureDevOps: {
		public: Config{
			AuthURL: "https://app.vssps.visualstudio.com/oauth2/authorize", TokenURL: "https://app.vssps.visualstudio.com/oauth2/token",
			Scopes: []string{"vso.code_write"}, DisplayName: "Azure DevOps", DisplayIcon: "/icon/azure-devops.svg",
		},
		publicHost: "dev.azure.com",
	},
}

// typeDefaults are the defaults of c's type: the public service's, or a
// self-hosted server's derived from c.AuthURL.
func typeDefaults(c Config) Config {
	p, ok := providerTypes[c.Type]
	if !ok {
		return Config{}
	}
	d := p.public
	d.Scopes = slices.Clone(p.public.Scopes)
	if p.publicHost != "" {
		d.Regex = hostRegex(p.publicHost)
	}
	if p.tokenPath == "" {
		return d
	}
	if base, ok := selfHosted(c.AuthURL, p.publicHost); ok {
		d.AuthURL = "" // c's own, which named the server
		d.TokenURL = resolve(base, p.tokenPath)
		d.ValidateURL = resolve(base, p.validatePath)
		d.Regex = hostRegex(base.Host)
	}
	return d
}

// selfHosted parses authURL when it names a host other than the public
// service's (any host, for a type without one).
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
