package coderd

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"

	"github.com/gin-gonic/gin"

	"airgapcoder/coderd/database"
	"airgapcoder/codersdk"
)

// Groups, in Coder's API shape. Groups are rows of the groups table, with
// one exception: the implicit Everyone group, whose id is the
// organization's and whose members are every user. It is computed, never
// stored, so it cannot drift from the users table; it cannot be renamed,
// deleted or have members added or removed.
//
// Owners manage groups; template admins read them (to share templates);
// a member reads only the groups it is in, Everyone included.

var groupNameRe = regexp.MustCompile(`^[a-zA-Z0-9](?:[a-zA-Z0-9_.-]{0,62}[a-zA-Z0-9])?$`)

// everyone is the implicit group of all users.
func (api *API) everyone() database.Group {
	return database.Group{
		ID: api.org.ID, OrganizationID: api.org.ID, Name: codersdk.EveryoneGroup, Source: database.GroupSourceUser,
		CreatedAt: api.org.CreatedAt, UpdatedAt: api.org.CreatedAt,
	}
}

func isEveryoneName(name string) bool { return strings.EqualFold(name, codersdk.EveryoneGroup) }

func reduceUser(u database.User) codersdk.ReducedUser {
	return codersdk.ReducedUser{ID: u.ID, Username: u.Username, Name: u.Name, Email: u.Email, CreatedAt: u.CreatedAt, LastSeenAt: u.LastSeenAt, Status: u.Status}
}

// convertGroups converts groups with their members, in one query for all
// of them (and one for the users when Everyone is among them).
func (api *API) convertGroups(ctx context.Context, gs []database.Group) ([]codersdk.Group, error) {
	ids := make([]string, 0, len(gs))
	var all []database.User
	for _, g := range gs {
		if g.ID != api.org.ID {
			ids = append(ids, g.ID)
			continue
		}
		var err error
		if all, err = api.db.Users(ctx); err != nil {
			return nil, err
		}
	}
	members, err := api.db.GroupMembers(ctx, ids)
	if err != nil {
		return nil, err
	}
	allowances, err := api.db.QuotaAllowances(ctx, api.org.ID) // quotas.go
	if err != nil {
		return nil, err
	}
	out := make([]codersdk.Group, 0, len(gs))
	for _, g := range gs {
		cg := codersdk.Group{
			ID: g.ID, Name: g.Name, DisplayName: g.DisplayName, OrganizationID: g.OrganizationID, Source: codersdk.GroupSource(g.Source),
			QuotaAllowance: int(allowances[g.ID]), OrganizationName: api.org.Name, OrganizationDisplayName: api.org.DisplayName, Members: []codersdk.ReducedUser{},
		}
		if g.ID == api.org.ID {
			for _, u := range all {
				cg.Members = append(cg.Members, reduceUser(u))
			}
		} else {
			for _, m := range members[g.ID] {
				cg.Members = append(cg.Members, reduceUser(m.User))
			}
		}
		cg.TotalMemberCount = len(cg.Members)
		out = append(out, cg)
	}
	return out, nil
}

// writeGroup answers with g, its members included, and status.
func (api *API) writeGroup(c *gin.Context, status int, g database.Group) error {
	out, err := api.convertGroups(c.Request.Context(), []database.Group{g})
	if err != nil {
		return err
	}
	c.JSON(status, out[0])
	return nil
}

// visibleGroups are the groups the caller may read: every group for those
// who may read groups, else Everyone and the groups the caller is in.
func (api *API) visibleGroups(c *gin.Context) ([]database.Group, error) {
	ctx := c.Request.Context()
	me := actor(c)
	out := []database.Group{api.everyone()}
	if can(me, resGroup, actRead, "") {
		gs, err := api.db.Groups(ctx, api.org.ID)
		return append(out, gs...), err
	}
	ms, err := api.db.GroupsOfUser(ctx, me.ID)
	for _, m := range ms {
		out = append(out, m.Group)
	}
	return out, err
}

// authorizeGroupRead allows those who may read groups, and members of g.
func (api *API) authorizeGroupRead(c *gin.Context, g database.Group) error {
	me := actor(c)
	if g.ID == api.org.ID || can(me, resGroup, actRead, "") {
		return nil
	}
	ms, err := api.db.GroupsOfUser(c.Request.Context(), me.ID)
	if err != nil {
		return err
	}
	if slices.ContainsFunc(ms, func(m database.UserGroupMembership) bool { return m.ID == g.ID }) {
		return nil
	}
	// A group the caller may not see is as good as missing.
	return notFound("Group")
}

func (api *API) groups(c *gin.Context) error {
	if err := api.orgParam(c); err != nil {
		return err
	}
	gs, err := api.visibleGroups(c)
	if err != nil {
		return err
	}
	out, err := api.convertGroups(c.Request.Context(), gs)
	if err != nil {
		return err
	}
	c.JSON(http.StatusOK, out)
	return nil
}

func (api *API) postGroup(c *gin.Context) error {
	e := api.audit(c, codersdk.AuditActionCreate, codersdk.AuditResourceGroup)
	if err := api.orgParam(c); err != nil {
		return err
	}
	if err := authorize(c, resGroup, actCreate, ""); err != nil {
		return err
	}
	var req codersdk.CreateGroupRequest
	if err := decode(c, &req); err != nil {
		return err
	}
	e.resource("", req.Name)
	if req.QuotaAllowance < 0 || req.QuotaAllowance > maxQuotaAllowance {
		return validation("quota_allowance", "must be 0 to 1000000")
	}
	if !groupNameRe.MatchString(req.Name) {
		return validation("name", "must be 1-64 letters, digits, '_', '.' or inner '-'")
	}
	if isEveryoneName(req.Name) {
		return conflict("%q is the implicit group of all users; choose another name", codersdk.EveryoneGroup)
	}
	ctx := c.Request.Context()
	var g database.Group
	err := e.inTx(ctx, http.StatusCreated, func(tx *database.DB) error {
		var err error
		g, err = tx.InsertGroup(ctx, database.Group{OrganizationID: api.org.ID, Name: req.Name, DisplayName: req.DisplayName, Source: database.GroupSourceUser})
		e.resource(g.ID, "").field("display_name", req.DisplayName)
		if err != nil || req.QuotaAllowance == 0 {
			return err
		}
		e.field("quota_allowance", req.QuotaAllowance)
		return tx.SetQuotaAllowance(ctx, api.org.ID, g.ID, int32(req.QuotaAllowance))
	})
	if errors.Is(err, database.ErrConflict) {
		return conflict("A group named %q already exists", req.Name)
	}
	if err != nil {
		return err
	}
	return api.writeGroup(c, http.StatusCreated, g)
}

// groupParam loads the :group (an id) the caller may read.
func (api *API) groupParam(c *gin.Context) (database.Group, error) {
	id := c.Param("group")
	if id == api.org.ID {
		return api.everyone(), nil
	}
	g, err := api.db.GroupByID(c.Request.Context(), id)
	if err != nil {
		return g, notFoundAs("Group", err)
	}
	return g, api.authorizeGroupRead(c, g)
}

func (api *API) groupByName(c *gin.Context) error {
	if err := api.orgParam(c); err != nil {
		return err
	}
	name := c.Param("name")
	g := api.everyone()
	if !isEveryoneName(name) {
		var err error
		g, err = api.db.GroupByName(c.Request.Context(), api.org.ID, name)
		if err != nil {
			return notFoundAs(fmt.Sprintf("Group %q", name), err)
		}
		if err := api.authorizeGroupRead(c, g); err != nil {
			return notFound(fmt.Sprintf("Group %q", name))
		}
	}
	return api.writeGroup(c, http.StatusOK, g)
}

func (api *API) group(c *gin.Context) error {
	g, err := api.groupParam(c)
	if err != nil {
		return err
	}
	return api.writeGroup(c, http.StatusOK, g)
}

// lookupUsers resolves users named by id, username or email; a name that
// matches nobody is a validation error on field.
func (api *API) lookupUsers(ctx context.Context, field string, names []string) ([]database.User, error) {
	out := make([]database.User, 0, len(names))
	for _, n := range names {
		u, err := api.lookupUser(ctx, n)
		if errors.Is(err, database.ErrNotFound) {
			return nil, validation(field, fmt.Sprintf("no user %q", n))
		}
		if err != nil {
			return nil, err
		}
		out = append(out, u)
	}
	return out, nil
}

func (api *API) lookupUser(ctx context.Context, name string) (database.User, error) {
	u, err := api.db.UserByID(ctx, name)
	if errors.Is(err, database.ErrNotFound) {
		u, err = api.db.UserByEmailOrUsername(ctx, name, name)
	}
	return u, err
}

func (api *API) patchGroup(c *gin.Context) error {
	e, g, err := api.auditGroup(c, codersdk.AuditActionWrite)
	if err != nil {
		return err
	}
	if err := authorize(c, resGroup, actUpdate, ""); err != nil {
		return err
	}
	var req codersdk.PatchGroupRequest
	if err := decode(c, &req); err != nil {
		return err
	}
	if req.QuotaAllowance != nil && (*req.QuotaAllowance < 0 || *req.QuotaAllowance > maxQuotaAllowance) {
		return validation("quota_allowance", "must be 0 to 1000000")
	}
	if g.ID == api.org.ID && req.QuotaAllowance != nil && req.Name == "" && req.DisplayName == nil && len(req.AddUsers) == 0 && len(req.RemoveUsers) == 0 {
		// The Everyone group takes a quota allowance, nothing else.
		return api.patchQuotaAllowance(c, e, g, *req.QuotaAllowance) // quotas.go
	}
	if g.ID == api.org.ID {
		return badRequest("The %s group holds every user; it cannot be renamed or have members added or removed", codersdk.EveryoneGroup)
	}
	ctx := c.Request.Context()
	name, display := g.Name, g.DisplayName
	if req.Name != "" && req.Name != g.Name {
		if !groupNameRe.MatchString(req.Name) {
			return validation("name", "must be 1-64 letters, digits, '_', '.' or inner '-'")
		}
		if isEveryoneName(req.Name) {
			return conflict("%q is the implicit group of all users; choose another name", codersdk.EveryoneGroup)
		}
		name = req.Name
		e.field("old_name", g.Name).field("name", name)
	}
	if req.DisplayName != nil {
		display = *req.DisplayName
		e.field("display_name", display)
	}
	add, err := api.lookupUsers(ctx, "add_users", req.AddUsers)
	if err != nil {
		return err
	}
	remove, err := api.lookupUsers(ctx, "remove_users", req.RemoveUsers)
	if err != nil {
		return err
	}
	var added, removed []string
	err = e.inTx(ctx, http.StatusOK, func(tx *database.DB) error {
		var err error
		if g, err = tx.UpdateGroup(ctx, g.ID, name, display); err != nil {
			return err
		}
		for _, u := range add {
			ok, err := tx.AddGroupMember(ctx, g.ID, u.ID, database.GroupSourceUser)
			if err != nil {
				return err
			}
			if ok {
				added = append(added, u.Username)
			}
		}
		for _, u := range remove {
			ok, err := tx.RemoveGroupMember(ctx, g.ID, u.ID)
			if err != nil {
				return err
			}
			if ok {
				removed = append(removed, u.Username)
			}
		}
		e.resource("", g.Name).field("added_users", nonNilStrings(added)).field("removed_users", nonNilStrings(removed))
		if req.QuotaAllowance != nil {
			e.field("quota_allowance", *req.QuotaAllowance)
			return tx.SetQuotaAllowance(ctx, api.org.ID, g.ID, int32(*req.QuotaAllowance))
		}
		return nil
	})
	if errors.Is(err, database.ErrConflict) {
		return conflict("A group named %q already exists", name)
	}
	if err != nil {
		return err
	}
	return api.writeGroup(c, http.StatusOK, g)
}

func (api *API) deleteGroup(c *gin.Context) error {
	e, g, err := api.auditGroup(c, codersdk.AuditActionDelete)
	if err != nil {
		return err
	}
	if err := authorize(c, resGroup, actDelete, ""); err != nil {
		return err
	}
	if g.ID == api.org.ID {
		return badRequest("The %s group cannot be deleted", codersdk.EveryoneGroup)
	}
	ctx := c.Request.Context()
	err = e.inTx(ctx, http.StatusOK, func(tx *database.DB) error { return tx.DeleteGroup(ctx, g.ID) })
	if err != nil {
		return err
	}
	c.JSON(http.StatusOK, codersdk.Response{Message: "Group deleted"})
	return nil
}

func nonNilStrings(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
