package coderd

import (
	"context"
	"encoding/json"
	"fmt"
	"html/template"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"airgapcoder/coderd/database"
	"airgapcoder/coderd/externalauth"
	"airgapcoder/codersdk"
)

// External auth where workspaces meet it: the agent's token endpoint, the
// providers a template version declares, the refusal of builds whose
// owner has not linked a required provider, and the tokens a build's job
// carries. Every token handed to a workspace is audited (never the token).

var externalAuthErrorTemplate = template.Must(template.New("external-auth-error").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Linking {{.Name}} failed</title></head>
<body><main><h1>Linking {{.Name}} failed</h1><p id="error">{{.Message}}</p><p><a href="{{.Page}}">Back to {{.Name}}</a></p></main></body></html>
`))

// templateVersionProviders reads the providers a version declares.
func (api *API) templateVersionProviders(ctx context.Context, versionID string) ([]codersdk.TemplateVersionExternalAuthProvider, error) {
	raw, err := api.db.TemplateVersionExternalAuthProviders(ctx, versionID)
	if err != nil {
		return nil, err
	}
	var out []codersdk.TemplateVersionExternalAuthProvider
	if err := unmarshalList(raw, &out); err != nil {
		return nil, fmt.Errorf("decode external auth providers of version %s: %w", versionID, err)
	}
	return out, nil
}

// templateVersionExternalAuth answers GET
// /api/v2/templateversions/{id}/external-auth for the caller.
func (api *API) templateVersionExternalAuth(c *gin.Context) error {
	v, err := api.versionParam(c)
	if err != nil {
		return err
	}
	ctx := c.Request.Context()
	declared, err := api.templateVersionProviders(ctx, v.ID)
	if err != nil {
		return err
	}
	out := []codersdk.TemplateVersionExternalAuth{}
	for _, d := range declared {
		p, err := api.extAuth.provider(d.ID)
		if err != nil {
			return errorf(http.StatusBadRequest, "", "Template version %s declares external auth provider %q, which this deployment does not configure; ask an owner to add it (CODER_EXTERNAL_AUTH_<n>_ID)", v.Name, d.ID)
		}
		tok, err := api.externalAuthToken(ctx, actor(c), p)
		if err != nil {
			return err
		}
		cfg := p.Config()
		out = append(out, codersdk.TemplateVersionExternalAuth{
			ID: cfg.ID, Type: cfg.Type, DisplayName: cfg.DisplayName, DisplayIcon: cfg.DisplayIcon,
			Authenticated: tok.linked, AuthenticateURL: api.extAuthPageURL(cfg.ID), Optional: d.Optional,
		})
	}
	c.JSON(http.StatusOK, out)
	return nil
}

// requireExternalAuth refuses a build of v for owner (a workspace's
// creation or start) while owner has no valid link to a provider v
// requires: before any job is queued, with the page that links it.
func (api *API) requireExternalAuth(c *gin.Context, v database.TemplateVersion, owner database.User) error {
	ctx := c.Request.Context()
	declared, err := api.templateVersionProviders(ctx, v.ID)
	if err != nil {
		return err
	}
	for _, d := range declared {
		if d.Optional {
			continue
		}
		p, err := api.extAuth.provider(d.ID)
		if err != nil {
			return errorf(http.StatusBadRequest, "", "Template version %s requires external auth provider %q, which this deployment does not configure; ask an owner to add it", v.Name, d.ID)
		}
		tok, err := api.externalAuthToken(ctx, owner, p)
		if err != nil {
			return err
		}
		if tok.linked {
			continue
		}
		who := "You have"
		if actor(c).ID != owner.ID {
			who = "The workspace owner " + owner.Username + " has"
		}
		e := errorf(http.StatusForbidden, tok.validateError, "%s not linked %s (external auth provider %q), which template version %s requires: link it at %s, then try again",
			who, p.Config().DisplayName, p.ID(), v.Name, api.extAuthPageURL(p.ID()))
		e.Validations = []codersdk.ValidationError{{Field: "external_auth." + p.ID(), Detail: api.extAuthPageURL(p.ID())}}
		return e
	}
	return nil
}

// buildExternalAuthTokens are the owner's fresh tokens for the providers
// of a build's version, each audited as handed to the workspace. Providers
// the owner has not linked are left out (optional ones: a build needing
// one was refused when queued; a link deleted since shows as the
// template's own error).
func (api *API) buildExternalAuthTokens(ctx context.Context, w database.Workspace, b database.WorkspaceBuild) ([]codersdk.ExternalAuthProviderToken, error) {
	declared, err := api.templateVersionProviders(ctx, b.TemplateVersionID)
	if err != nil || len(declared) == 0 {
		return nil, err
	}
	owner, err := api.db.UserByID(ctx, w.OwnerID)
	if err != nil {
		return nil, fmt.Errorf("load workspace owner: %w", err)
	}
	var out []codersdk.ExternalAuthProviderToken
	for _, d := range declared {
		p, err := api.extAuth.provider(d.ID)
		if err != nil {
			continue // not configured: the template sees no token
		}
		tok, err := api.externalAuthToken(ctx, owner, p)
		if err != nil {
			return nil, fmt.Errorf("external auth token of %s for %s: %w", owner.Username, p.ID(), err)
		}
		if !tok.linked {
			continue
		}
		out = append(out, codersdk.ExternalAuthProviderToken{ID: p.ID(), AccessToken: tok.access})
		raw, _ := json.Marshal(map[string]any{"provider": p.ID(), "via": "build", "build_id": b.ID, "transition": b.Transition, "expires": tok.expiry})
		row := database.AuditLog{
			UserID: owner.ID, Username: owner.Username, Action: string(auditActionHandToken),
			ResourceType: string(auditResourceExternalAuth), ResourceID: p.ID(), ResourceTarget: p.ID(),
			WorkspaceOwner: w.OwnerName, WorkspaceName: w.Name, StatusCode: http.StatusOK, Success: true, AdditionalFields: raw,
		}
		row.Description = describe(row) + " to build #" + strconv.Itoa(int(b.BuildNumber)) + " of " + w.OwnerName + "/" + w.Name
		api.writeAudit(ctx, row)
	}
	return out, nil
}

// setImportExternalAuth stores the providers an import found.
func setImportExternalAuth(ctx context.Context, tx *database.DB, versionID string, providers []codersdk.TemplateVersionExternalAuthProvider) error {
	if providers == nil {
		providers = []codersdk.TemplateVersionExternalAuthProvider{}
	}
	for _, p := range providers {
		if p.ID == "" {
			return validation("external_auth_providers", "every provider needs an id")
		}
	}
	raw, err := json.Marshal(providers)
	if err != nil {
		return err
	}
	return tx.SetTemplateVersionExternalAuthProviders(ctx, versionID, raw)
}

// agentExternalAuth answers the agent's GET
// /api/v2/workspaceagents/me/external-auth?id=|match=&listen=: the
// workspace owner's fresh token for the provider named by id, or whose
// regex matches the Git remote URL match. Without a valid link the answer
// is the page that links it and no token; with listen=true it waits until
// the owner links (or the request ends).
func (api *API) agentExternalAuth(c *gin.Context) error {
	a := agentFrom(c)
	id, match := c.Query("id"), c.Query("match")
	listen, _ := strconv.ParseBool(c.Query("listen"))
	var p *externalauth.Provider
	switch {
	case id != "":
		var err error
		if p, err = api.extAuth.provider(id); err != nil {
			return err
		}
	case match != "":
		if api.extAuth != nil {
			for _, q := range api.extAuth.providers {
				if q.Matches(match) {
					p = q
					break
				}
			}
		}
		if p == nil {
			return notFound(fmt.Sprintf("External auth provider for %q (no provider's regex matches it)", match))
		}
	default:
		return validation("id", "id or match (a Git remote URL) is required")
	}
	ctx := c.Request.Context()
	owner, err := api.db.UserByID(ctx, a.OwnerID)
	if err != nil {
		return err
	}
	var poll <-chan time.Time
	for {
		wake := api.extAuth.linkedChan()
		tok, err := api.externalAuthToken(ctx, owner, p)
		if err != nil {
			return err
		}
		if tok.linked {
			return api.handAgentToken(c, a, owner, p, tok)
		}
		if !listen {
			cfg := p.Config()
			c.JSON(http.StatusOK, codersdk.ExternalAuthResponse{URL: api.extAuthPageURL(p.ID()), Type: cfg.Type})
			return nil
		}
		if poll == nil {
			t := api.opts.Clock.NewTicker(extAuthListenPoll, "coderd", "externalAuth", "poll")
			defer t.Stop()
			poll = t.C
		}
		select {
		case <-wake:
		case <-poll:
		case <-api.closing:
			return errorf(http.StatusServiceUnavailable, "", "The server is shutting down; ask again")
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// handAgentToken answers the agent with the token and audits it.
func (api *API) handAgentToken(c *gin.Context, a database.WorkspaceAgent, owner database.User, p *externalauth.Provider, tok extAuthToken) error {
	e := api.audit(c, auditActionHandToken, auditResourceExternalAuth).actor(owner).resource(p.ID(), p.ID()).workspace(a.OwnerName, a.WorkspaceName)
	e.field("provider", p.ID()).field("via", "agent").field("agent", a.Name).field("expires", tok.expiry)
	if m := c.Query("match"); m != "" {
		e.field("match", redactURL(m))
	}
	user, pass := p.GitCredentials(tok.access)
	cfg := p.Config()
	c.JSON(http.StatusOK, codersdk.ExternalAuthResponse{
		AccessToken: tok.access, TokenExtra: tok.extra, Type: cfg.Type, Username: user, Password: pass,
	})
	return nil
}

// redactURL drops the user information of a remote URL for the audit log
// (a remote may carry a password).
func redactURL(s string) string {
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok {
		return s
	}
	if at := strings.LastIndex(strings.SplitN(rest, "/", 2)[0], "@"); at >= 0 {
		rest = rest[at+1:]
	}
	return scheme + "://" + rest
}
