package coderd

import (
	"slices"

	"airgapcoder/coderd/database"
	"airgapcoder/codersdk"
)

// The authorization model: three roles, owner ⊃ template-admin ⊃ member.
// Every endpoint names the resource and action it touches; policy says which
// roles may do it. Actions on a user's own things (workspaces, tokens) are
// allowed to that user through ownedBy.

type resource string

const (
	resUser            resource = "user"
	resAPIKey          resource = "api_key"
	resFile            resource = "file"
	resWorkspaceProxy  resource = "workspace_proxy"
	resTemplate        resource = "template"
	resWorkspace       resource = "workspace"
	resProvisionerd    resource = "provisioner_daemon"
	resOrganization    resource = "organization"
	resDeploymentStats resource = "deployment_stats"
	resAuditLog        resource = "audit_log"
	resReplica         resource = "replica"
	resAppliance       resource = "appliance"
	resGroup           resource = "group"
)

type action string

const (
	actRead   action = "read"
	actCreate action = "create"
	actUpdate action = "update"
	actDelete action = "delete"
)

var (
	allRoles   = []string{codersdk.RoleOwner, codersdk.RoleTemplateAdmin, codersdk.RoleMember}
	adminRoles = []string{codersdk.RoleOwner, codersdk.RoleTemplateAdmin}
	ownerOnly  = []string{codersdk.RoleOwner}
)

// policy: resource -> action -> roles allowed on anyone's objects.
var policy = map[resource]map[action][]string{
	resUser:            {actRead: adminRoles, actCreate: ownerOnly, actUpdate: ownerOnly, actDelete: ownerOnly},
	resAPIKey:          {actRead: ownerOnly, actCreate: ownerOnly, actDelete: ownerOnly},
	resFile:            {actRead: adminRoles, actCreate: adminRoles},
	resTemplate:        {actRead: allRoles, actCreate: adminRoles, actUpdate: adminRoles, actDelete: adminRoles},
	resWorkspace:       {actRead: adminRoles, actCreate: ownerOnly, actUpdate: ownerOnly, actDelete: ownerOnly},
	resProvisionerd:    {actRead: adminRoles, actCreate: adminRoles},
	resOrganization:    {actRead: allRoles},
	resDeploymentStats: {actRead: ownerOnly},
	resAuditLog:        {actRead: ownerOnly},
	resReplica:         {actRead: ownerOnly},
	resAppliance:       {actRead: ownerOnly},
	// Workspace proxies are the deployment's topology: owners change and
	// list them; members see the healthy ones as regions.
	resWorkspaceProxy: {actRead: ownerOnly, actCreate: ownerOnly, actDelete: ownerOnly},
	// Groups: owners manage them (this deployment has no user-admin role);
	// template admins read them to share templates; a member reads only
	// the groups it is in (groups.go).
	resGroup: {actRead: adminRoles, actCreate: ownerOnly, actUpdate: ownerOnly, actDelete: ownerOnly},
}

// selfActions are what every user may do on objects they own.
var selfActions = map[resource][]action{
	resUser:      {actRead, actUpdate}, // update: the profile (name, username); roles need an owner
	resAPIKey:    {actRead, actCreate, actDelete},
	resWorkspace: {actRead, actCreate, actUpdate, actDelete},
	// Files: anyone may upload a template tar and read it back (as in
	// Coder), so a user with "admin" on one template can push its versions.
	resFile: {actRead, actCreate},
}

// roles returns the effective roles of a user: what it holds, plus member.
func roles(u database.User) []string {
	out := append([]string{codersdk.RoleMember}, u.Roles...)
	return out
}

// can reports whether actor may act on a resource owned by ownerID ("" for
// resources nobody owns).
func can(actor database.User, res resource, act action, ownerID string) bool {
	if ownerID != "" && ownerID == actor.ID && slices.Contains(selfActions[res], act) {
		return true
	}
	for _, r := range roles(actor) {
		if slices.Contains(policy[res][act], r) {
			return true
		}
	}
	return false
}

// validRole reports whether name is a role a user can be given.
func validRole(name string) bool {
	return name == codersdk.RoleOwner || name == codersdk.RoleTemplateAdmin || name == codersdk.RoleMember
}
