package codersdk

import (
	"context"
	"fmt"
	"net/http"
	"time"
)

// GroupSource says who made a group (Coder's values).
type GroupSource string

const (
	// GroupSourceUser: made by an owner through the API or CLI.
	GroupSourceUser GroupSource = "user"
	// GroupSourceOIDC: made by the group sync of an OIDC sign-in.
	GroupSourceOIDC GroupSource = "oidc"
)

// EveryoneGroup is the name of the implicit group of all users; its id is
// the organization's id.
const EveryoneGroup = "Everyone"

// ReducedUser is a user as a group lists it.
type ReducedUser struct {
	ID         string    `json:"id"`
	Username   string    `json:"username"`
	Name       string    `json:"name"`
	Email      string    `json:"email"`
	CreatedAt  time.Time `json:"created_at"`
	LastSeenAt time.Time `json:"last_seen_at"`
	Status     string    `json:"status"`
}

// Group is a set of users, in the shape of Coder's.
type Group struct {
	ID             string `json:"id"`
	Name           string `json:"name"`
	DisplayName    string `json:"display_name"`
	OrganizationID string `json:"organization_id"`
	// Members are the group's users by username; the Everyone group lists
	// every user.
	Members          []ReducedUser `json:"members"`
	TotalMemberCount int           `json:"total_member_count"`
	// AvatarURL is Coder's; always empty here.
	AvatarURL string `json:"avatar_url"`
	// QuotaAllowance is the credits a day the group adds to each member's
	// workspace quota budget (docs/quotas.md); 0 adds none.
	QuotaAllowance int         `json:"quota_allowance"`
	Source         GroupSource `json:"source"`
	// OrganizationName and OrganizationDisplayName name the organization.
	OrganizationName        string `json:"organization_name"`
	OrganizationDisplayName string `json:"organization_display_name"`
}

// IsEveryone reports whether g is the implicit group of all users.
func (g Group) IsEveryone() bool { return g.ID == g.OrganizationID }

// CreateGroupRequest creates a group.
type CreateGroupRequest struct {
	Name        string `json:"name"`
	DisplayName string `json:"display_name,omitempty"`
	// AvatarURL is accepted for Coder's clients and ignored.
	AvatarURL string `json:"avatar_url,omitempty"`
	// QuotaAllowance is the group's quota allowance (credits a day).
	QuotaAllowance int `json:"quota_allowance,omitempty"`
}

// PatchGroupRequest changes a group. Users are named by id, username or
// email; empty fields leave the group as it is.
type PatchGroupRequest struct {
	AddUsers    []string `json:"add_users,omitempty"`
	RemoveUsers []string `json:"remove_users,omitempty"`
	Name        string   `json:"name,omitempty"`
	DisplayName *string  `json:"display_name,omitempty"`
	// AvatarURL is accepted for Coder's clients and ignored.
	AvatarURL *string `json:"avatar_url,omitempty"`
	// QuotaAllowance, when set, sets the group's quota allowance (credits a
	// day); it is the only change the Everyone group takes.
	QuotaAllowance *int `json:"quota_allowance,omitempty"`
}

// Groups lists the organization's groups ("default" names the default
// organization); members see only the groups they are in.
func (c *Client) Groups(ctx context.Context, org string) ([]Group, error) {
	return doJSON[[]Group](ctx, c, http.MethodGet, fmt.Sprintf("/api/v2/organizations/%s/groups", org), nil)
}

// CreateGroup creates a group in the organization.
func (c *Client) CreateGroup(ctx context.Context, org string, req CreateGroupRequest) (Group, error) {
	return doJSON[Group](ctx, c, http.MethodPost, fmt.Sprintf("/api/v2/organizations/%s/groups", org), req, http.StatusCreated)
}

// GroupByName returns the organization's group named name.
func (c *Client) GroupByName(ctx context.Context, org, name string) (Group, error) {
	return doJSON[Group](ctx, c, http.MethodGet, fmt.Sprintf("/api/v2/organizations/%s/groups/%s", org, name), nil)
}

// Group returns a group by id.
func (c *Client) Group(ctx context.Context, id string) (Group, error) {
	return doJSON[Group](ctx, c, http.MethodGet, "/api/v2/groups/"+id, nil)
}

// PatchGroup changes a group and returns it as it is now.
func (c *Client) PatchGroup(ctx context.Context, id string, req PatchGroupRequest) (Group, error) {
	return doJSON[Group](ctx, c, http.MethodPatch, "/api/v2/groups/"+id, req)
}

// DeleteGroup deletes a group.
func (c *Client) DeleteGroup(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, "/api/v2/groups/"+id, nil, nil)
}

// TemplateRole is a role on one template (Coder's values).
type TemplateRole string

const (
	// TemplateRoleUse may create workspaces from the template and build
	// them.
	TemplateRoleUse TemplateRole = "use"
	// TemplateRoleAdmin may also edit the template: push versions, change
	// the active version and the ACL.
	TemplateRoleAdmin TemplateRole = "admin"
	// TemplateRoleDeleted, in an UpdateTemplateACL, removes an entry.
	TemplateRoleDeleted TemplateRole = ""
)

// TemplateUser is a user's entry in a template's ACL.
type TemplateUser struct {
	ReducedUser
	Role TemplateRole `json:"role"`
}

// TemplateGroup is a group's entry in a template's ACL.
type TemplateGroup struct {
	Group
	Role TemplateRole `json:"role"`
}

// TemplateACL is who may use or administer a template besides owners and
// template admins (Coder's shape: the groups are under "group").
type TemplateACL struct {
	Users  []TemplateUser  `json:"users"`
	Groups []TemplateGroup `json:"group"`
}

// UpdateTemplateACL sets entries of a template's ACL: user id (or
// username) or group id (or name) -> role; TemplateRoleDeleted removes the
// entry. Entries not named are left as they are.
type UpdateTemplateACL struct {
	UserPerms  map[string]TemplateRole `json:"user_perms,omitempty"`
	GroupPerms map[string]TemplateRole `json:"group_perms,omitempty"`
}

// TemplateACL returns a template's ACL.
func (c *Client) TemplateACL(ctx context.Context, template string) (TemplateACL, error) {
	return doJSON[TemplateACL](ctx, c, http.MethodGet, "/api/v2/templates/"+template+"/acl", nil)
}

// UpdateTemplateACL changes a template's ACL.
func (c *Client) UpdateTemplateACL(ctx context.Context, template string, req UpdateTemplateACL) error {
	return c.do(ctx, http.MethodPatch, "/api/v2/templates/"+template+"/acl", req, nil)
}
