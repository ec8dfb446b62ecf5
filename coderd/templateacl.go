package coderd

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sort"

	"github.com/gin-gonic/gin"

	"airgapcoder/coderd/database"
	"airgapcoder/codersdk"
)

// Template ACLs, as Coder keeps them: besides owners and template admins
// (who may do anything with any template), a user may use a template
// ("use": create workspaces from it and start their builds) or administer
// it ("admin": also change its active version and its ACL) through an
// entry for the user or for a group the user is in. Every template starts
// with the Everyone group on "use" (database.InsertTemplate, and migration
// 000010 for the templates that existed before), so nothing changes for
// anyone until an admin narrows it.

// templateRoleRank orders roles: a user holding several gets the highest.
var templateRoleRank = map[codersdk.TemplateRole]int{codersdk.TemplateRoleUse: 1, codersdk.TemplateRoleAdmin: 2}

// templateRole is what u may do with t: admin for owners and template
// admins, else the highest role of u's entry and its groups' entries ("" for
// none).
func (api *API) templateRole(ctx context.Context, u database.User, t database.Template) (codersdk.TemplateRole, error) {
	if can(u, resTemplate, actUpdate, "") {
		return codersdk.TemplateRoleAdmin, nil
	}
	acl, err := api.db.TemplateACLByID(ctx, t.ID)
	if err != nil {
		return "", err
	}
	best := codersdk.TemplateRole(acl.Users[u.ID])
	consider := func(r string) {
		if templateRoleRank[codersdk.TemplateRole(r)] > templateRoleRank[best] {
			best = codersdk.TemplateRole(r)
		}
	}
	consider(acl.Groups[api.org.ID]) // Everyone
	groups, err := api.db.GroupsOfUser(ctx, u.ID)
	if err != nil {
		return "", err
	}
	for _, g := range groups {
		consider(acl.Groups[g.ID])
	}
	if templateRoleRank[best] == 0 {
		return "", nil
	}
	return best, nil
}

// requireTemplateRole fails with 403 unless the caller holds at least role
// on t.
func (api *API) requireTemplateRole(c *gin.Context, t database.Template, role codersdk.TemplateRole) error {
	have, err := api.templateRole(c.Request.Context(), actor(c), t)
	if err != nil {
		return err
	}
	if templateRoleRank[have] >= templateRoleRank[role] {
		return nil
	}
	return errorf(http.StatusForbidden, "", "You may not %s template %s: ask a template admin to share it with you or one of your groups (coder templates permissions)",
		map[codersdk.TemplateRole]string{codersdk.TemplateRoleUse: "use", codersdk.TemplateRoleAdmin: "administer"}[role], t.Name)
}

// canSeeTemplate reports whether the caller holds any role on t: as in
// Coder, a template a user may not use is left out of lists and reads as
// not found (its name and versions are not the user's business).
func (api *API) canSeeTemplate(c *gin.Context, t database.Template) (bool, error) {
	have, err := api.templateRole(c.Request.Context(), actor(c), t)
	return have != "", err
}

// templateAdminParam loads the :template the caller may administer.
func (api *API) templateAdminParam(c *gin.Context) (database.Template, error) {
	t, err := api.templateParam(c, actRead)
	if err != nil {
		return t, err
	}
	return t, api.requireTemplateRole(c, t, codersdk.TemplateRoleAdmin)
}

func (api *API) templateACL(c *gin.Context) error {
	t, err := api.templateAdminParam(c)
	if err != nil {
		return err
	}
	ctx := c.Request.Context()
	acl, err := api.db.TemplateACLByID(ctx, t.ID)
	if err != nil {
		return err
	}
	out := codersdk.TemplateACL{Users: []codersdk.TemplateUser{}, Groups: []codersdk.TemplateGroup{}}
	for id, role := range acl.Users {
		u, err := api.db.UserByID(ctx, id)
		if errors.Is(err, database.ErrNotFound) {
			continue // a deleted user
		}
		if err != nil {
			return err
		}
		out.Users = append(out.Users, codersdk.TemplateUser{ReducedUser: reduceUser(u), Role: codersdk.TemplateRole(role)})
	}
	sort.Slice(out.Users, func(i, j int) bool { return out.Users[i].Username < out.Users[j].Username })
	var gs []database.Group
	for id := range acl.Groups {
		if id == api.org.ID {
			gs = append(gs, api.everyone())
			continue
		}
		g, err := api.db.GroupByID(ctx, id)
		if errors.Is(err, database.ErrNotFound) {
			continue
		}
		if err != nil {
			return err
		}
		gs = append(gs, g)
	}
	cgs, err := api.convertGroups(ctx, gs)
	if err != nil {
		return err
	}
	for _, g := range cgs {
		out.Groups = append(out.Groups, codersdk.TemplateGroup{Group: g, Role: codersdk.TemplateRole(acl.Groups[g.ID])})
	}
	sort.Slice(out.Groups, func(i, j int) bool { return out.Groups[i].Name < out.Groups[j].Name })
	c.JSON(http.StatusOK, out)
	return nil
}

func validTemplateRole(r codersdk.TemplateRole) bool {
	return slices.Contains([]codersdk.TemplateRole{codersdk.TemplateRoleUse, codersdk.TemplateRoleAdmin, codersdk.TemplateRoleDeleted}, r)
}

// resolveTemplatePerms checks the roles of an ACL change's field (user_perms
// or group_perms, naming users or groups of kind) and resolves the names
// with lookup, which answers an id and the name as stored. It returns the
// roles by id and, for the audit record, by stored name.
func resolveTemplatePerms(field, kind string, perms map[string]codersdk.TemplateRole,
	lookup func(name string) (id, stored string, err error),
) (byID, byName map[string]codersdk.TemplateRole, err error) {
	byID, byName = map[string]codersdk.TemplateRole{}, map[string]codersdk.TemplateRole{}
	for name, role := range perms {
		if !validTemplateRole(role) {
			return nil, nil, validation(field, fmt.Sprintf("role of %q must be \"use\", \"admin\" or \"\" (remove)", name))
		}
		id, stored, err := lookup(name)
		if errors.Is(err, database.ErrNotFound) {
			return nil, nil, validation(field, fmt.Sprintf("no %s %q", kind, name))
		}
		if err != nil {
			return nil, nil, err
		}
		byID[id], byName[stored] = role, role
	}
	return byID, byName, nil
}

func (api *API) patchTemplateACL(c *gin.Context) error {
	e, t, err := api.auditTemplate(c, codersdk.AuditActionWrite, api.templateAdminParam)
	if err != nil {
		return err
	}
	var req codersdk.UpdateTemplateACL
	if err := decode(c, &req); err != nil {
		return err
	}
	ctx := c.Request.Context()
	userPerms, userNames, err := resolveTemplatePerms("user_perms", "user", req.UserPerms, func(name string) (string, string, error) {
		u, err := api.lookupUser(ctx, name)
		return u.ID, u.Username, err
	})
	if err != nil {
		return err
	}
	groupPerms, groupNames, err := resolveTemplatePerms("group_perms", "group", req.GroupPerms, func(name string) (string, string, error) {
		g, err := api.lookupGroup(ctx, name)
		return g.ID, g.Name, err
	})
	if err != nil {
		return err
	}
	e.field("user_perms", userNames).field("group_perms", groupNames)
	err = e.inTx(ctx, http.StatusOK, func(tx *database.DB) error {
		acl, err := tx.TemplateACLByID(ctx, t.ID)
		if err != nil {
			return err
		}
		apply(acl.Users, userPerms)
		apply(acl.Groups, groupPerms)
		return tx.UpdateTemplateACL(ctx, t.ID, acl)
	})
	if err != nil {
		return err
	}
	c.JSON(http.StatusOK, codersdk.Response{Message: "Successfully updated template ACL list."})
	return nil
}

// apply sets (or, for TemplateRoleDeleted, removes) entries of an ACL.
func apply(acl map[string]string, perms map[string]codersdk.TemplateRole) {
	for id, role := range perms {
		if role == codersdk.TemplateRoleDeleted {
			delete(acl, id)
			continue
		}
		acl[id] = string(role)
	}
}

// lookupGroup finds a group by id or name; "Everyone" (or the
// organization's id) is the implicit group of all users.
func (api *API) lookupGroup(ctx context.Context, name string) (database.Group, error) {
	if name == api.org.ID || isEveryoneName(name) {
		return api.everyone(), nil
	}
	g, err := api.db.GroupByID(ctx, name)
	if errors.Is(err, database.ErrNotFound) {
		g, err = api.db.GroupByName(ctx, api.org.ID, name)
	}
	return g, err
}
