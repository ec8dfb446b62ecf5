package codersdk

import (
	"context"
	"net/http"
	"net/url"
)

// The calls admins script (coder users delete, coder templates archive,
// coder templates versions archive|unarchive, coder state push), in the
// shape of Coder's API.

// DeleteUser deletes a user (owners only): DELETE /api/v2/users/{user}.
// coderd refuses a user who still owns workspaces, and the caller itself.
func (c *Client) DeleteUser(ctx context.Context, user string) error {
	return c.do(ctx, http.MethodDelete, "/api/v2/users/"+url.PathEscape(user), nil, nil, http.StatusOK, http.StatusNoContent)
}

// TemplateVersionsIncludingArchived lists a template's versions, newest
// first, archived ones included (?include_archived=true); without it
// coderd leaves them out.
func (c *Client) TemplateVersionsIncludingArchived(ctx context.Context, template string) ([]TemplateVersion, error) {
	return doJSON[[]TemplateVersion](ctx, c, http.MethodGet, "/api/v2/templates/"+url.PathEscape(template)+"/versions?include_archived=true", nil)
}

// ArchiveTemplateVersionsRequest says which unused versions of a template
// to archive: the failed ones, or with All every one that no workspace's
// latest build uses and that is not active.
type ArchiveTemplateVersionsRequest struct {
	All bool `json:"all"`
}

// ArchiveTemplateVersionsResponse names the versions archived.
type ArchiveTemplateVersionsResponse struct {
	TemplateID  string   `json:"template_id"`
	ArchivedIDs []string `json:"archived_ids"`
}

// ArchiveTemplateVersions archives the unused versions of a template:
// POST /api/v2/templates/{template}/versions/archive.
func (c *Client) ArchiveTemplateVersions(ctx context.Context, template string, all bool) (ArchiveTemplateVersionsResponse, error) {
	var resp ArchiveTemplateVersionsResponse
	return resp, c.do(ctx, http.MethodPost, "/api/v2/templates/"+url.PathEscape(template)+"/versions/archive",
		ArchiveTemplateVersionsRequest{All: all}, &resp)
}

// SetArchiveTemplateVersion archives (or unarchives) one version:
// POST /api/v2/templateversions/{version}/archive|unarchive. An archived
// version is left out of the template's version list; the active version
// and versions in use cannot be archived.
func (c *Client) SetArchiveTemplateVersion(ctx context.Context, version string, archive bool) error {
	verb := "unarchive"
	if archive {
		verb = "archive"
	}
	return c.do(ctx, http.MethodPost, "/api/v2/templateversions/"+url.PathEscape(version)+"/"+verb, nil, nil)
}

// UpdateWorkspaceBuildStateRequest replaces the Terraform state a build
// recorded.
type UpdateWorkspaceBuildStateRequest struct {
	State []byte `json:"state"`
}

// UpdateWorkspaceBuildState replaces the Terraform state of a build
// (owners only): PUT /api/v2/workspacebuilds/{build}/state. The
// workspace's next build starts from it.
func (c *Client) UpdateWorkspaceBuildState(ctx context.Context, build string, state []byte) error {
	return c.do(ctx, http.MethodPut, "/api/v2/workspacebuilds/"+url.PathEscape(build)+"/state",
		UpdateWorkspaceBuildStateRequest{State: state}, nil, http.StatusOK, http.StatusNoContent)
}
