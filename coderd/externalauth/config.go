// Package externalauth owns the deployment's external auth providers
// (issue 33): OAuth2 applications on the site's Git server or similar,
// configured as Coder's CODER_EXTERNAL_AUTH_<n>_* options are, with the
// defaults Coder gives each provider type. It exchanges, refreshes and
// validates tokens; it does not store them (coderd does, sealed) and does
// not serve HTTP.
package externalauth

// Config is one provider, as CODER_EXTERNAL_AUTH_<n>_<FIELD> (and
// appliance.yaml's external-auth list) give it. Empty fields take the
// type's defaults (see Defaults).
type Config struct {
	// ID names the provider in URLs, templates (data "coder_external_auth"
	// id) and the CLI; default: Type.
	ID string
	// Type is gitea, gitlab, github, bitbucket-server, azure-devops, or
	// anything else for a generic OAuth2 provider.
	Type         string
	ClientID     string
	ClientSecret string
	AuthURL      string
	TokenURL     string
	// ValidateURL answers 200 for a valid token (and says whose it is).
	ValidateURL string
	// Regex matches the Git remote URLs the tokens are for.
	Regex       string
	Scopes      []string
	DisplayName string
	DisplayIcon string
	// NoRefresh: the provider's tokens do not expire or are not refreshed.
	NoRefresh bool
	// ExtraTokenKeys are token response fields kept as token_extra.
	ExtraTokenKeys []string
}
