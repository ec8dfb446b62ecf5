package database

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
)

// Group sources: who made a group, or who added a membership.
const (
	GroupSourceUser = "user"
	GroupSourceOIDC = "oidc"
)

// Group is a row of groups. The implicit Everyone group is no row (coderd
// computes it).
type Group struct {
	ID             string `db:"id"`
	OrganizationID string `db:"organization_id"`
	Name           string `db:"name"`
	DisplayName    string `db:"display_name"`
	// Source is GroupSourceUser or GroupSourceOIDC.
	Source    string    `db:"source"`
	CreatedAt time.Time `db:"created_at"`
	UpdatedAt time.Time `db:"updated_at"`
}

// groupColumns are the columns of groups a Group holds.
const groupColumns = `id, organization_id, name, display_name, source, created_at, updated_at`

// InsertGroup creates a group; a name taken (case-insensitively) is
// ErrConflict.
func (db *DB) InsertGroup(ctx context.Context, g Group) (Group, error) {
	now := db.now()
	if g.Source == "" {
		g.Source = GroupSourceUser
	}
	return collectOne[Group](db.q().Query(ctx, `INSERT INTO groups (`+groupColumns+`) VALUES ($1, $2, $3, $4, $5, $6, $6) RETURNING `+groupColumns,
		uuid.NewString(), g.OrganizationID, g.Name, g.DisplayName, g.Source, now))
}

// GroupByID returns a group.
func (db *DB) GroupByID(ctx context.Context, id string) (Group, error) {
	if uuid.Validate(id) != nil {
		return Group{}, ErrNotFound
	}
	return collectOne[Group](db.q().Query(ctx, `SELECT `+groupColumns+` FROM groups WHERE id = $1`, id))
}

// GroupByName returns the organization's group by name, case-insensitively.
func (db *DB) GroupByName(ctx context.Context, organizationID, name string) (Group, error) {
	return collectOne[Group](db.q().Query(ctx, `SELECT `+groupColumns+` FROM groups WHERE organization_id = $1 AND lower(name) = lower($2)`,
		organizationID, name))
}

// Groups lists the organization's groups by name.
func (db *DB) Groups(ctx context.Context, organizationID string) ([]Group, error) {
	return collectAll[Group](db.q().Query(ctx, `SELECT `+groupColumns+` FROM groups WHERE organization_id = $1 ORDER BY lower(name)`, organizationID))
}

// UpdateGroup renames a group and sets its display name.
func (db *DB) UpdateGroup(ctx context.Context, id, name, displayName string) (Group, error) {
	return collectOne[Group](db.q().Query(ctx, `UPDATE groups SET name = $2, display_name = $3, updated_at = $4 WHERE id = $1 RETURNING `+groupColumns,
		id, name, displayName, db.now()))
}

// DeleteGroup deletes a group, its memberships, and its entries in every
// template's ACL.
func (db *DB) DeleteGroup(ctx context.Context, id string) error {
	return db.InTx(ctx, func(tx *DB) error {
		if err := tx.execOne(ctx, `DELETE FROM groups WHERE id = $1`, id); err != nil {
			return err
		}
		_, err := tx.q().Exec(ctx, `UPDATE templates SET group_acl = group_acl - $1::text WHERE group_acl ? $1::text`, id)
		return err
	})
}

// GroupMember is a user in a group, with the membership's source.
type GroupMember struct {
	User
	// Source is who added the membership: GroupSourceUser or
	// GroupSourceOIDC.
	Source string `db:"source"`
}

// GroupMembers lists the members of groups by group id, each by username.
// Deleted users are left out.
func (db *DB) GroupMembers(ctx context.Context, groupIDs []string) (map[string][]GroupMember, error) {
	type memberRow struct {
		GroupID string `db:"group_id"`
		GroupMember
	}
	list, err := collectAll[memberRow](db.q().Query(ctx, `SELECT m.group_id, m.source, `+qualified("u", userColumns)+`
		FROM group_members m JOIN users u ON u.id = m.user_id
		WHERE m.group_id = ANY($1::uuid[]) AND NOT u.deleted ORDER BY u.username`, groupIDs))
	if err != nil {
		return nil, err
	}
	out := map[string][]GroupMember{}
	for _, m := range list {
		out[m.GroupID] = append(out[m.GroupID], m.GroupMember)
	}
	return out, nil
}

// AddGroupMember adds a user to a group with a source; a user already in
// the group keeps the membership (and its source) it has. It reports
// whether the user was added.
func (db *DB) AddGroupMember(ctx context.Context, groupID, userID, source string) (bool, error) {
	tag, err := db.q().Exec(ctx, `INSERT INTO group_members (group_id, user_id, source, created_at) VALUES ($1, $2, $3, $4)
		ON CONFLICT (group_id, user_id) DO NOTHING`, groupID, userID, source, db.now())
	if err != nil {
		return false, mapErr(err)
	}
	return tag.RowsAffected() > 0, nil
}

// RemoveGroupMember removes a user from a group and reports whether the
// user was in it.
func (db *DB) RemoveGroupMember(ctx context.Context, groupID, userID string) (bool, error) {
	tag, err := db.q().Exec(ctx, `DELETE FROM group_members WHERE group_id = $1 AND user_id = $2`, groupID, userID)
	if err != nil {
		return false, err
	}
	return tag.RowsAffected() > 0, nil
}

// UserGroupMembership is one group a user is in, with the membership's
// source.
type UserGroupMembership struct {
	Group
	MemberSource string `db:"member_source"`
}

// GroupsOfUser lists the groups a user is in (the Everyone group aside),
// by name.
func (db *DB) GroupsOfUser(ctx context.Context, userID string) ([]UserGroupMembership, error) {
	return collectAll[UserGroupMembership](db.q().Query(ctx, `SELECT `+qualified("g", groupColumns)+`, m.source AS member_source
		FROM group_members m JOIN groups g ON g.id = m.group_id WHERE m.user_id = $1 ORDER BY lower(g.name)`, userID))
}

// TemplateACL is a template's access list: user or group id -> role
// ("use" or "admin").
type TemplateACL struct {
	Users  map[string]string
	Groups map[string]string
}

// TemplateACLByID returns a template's ACL.
func (db *DB) TemplateACLByID(ctx context.Context, templateID string) (TemplateACL, error) {
	type aclRow struct {
		Users  []byte `db:"user_acl"`
		Groups []byte `db:"group_acl"`
	}
	row, err := collectOne[aclRow](db.q().Query(ctx, `SELECT user_acl, group_acl FROM templates WHERE id = $1`, templateID))
	if err != nil {
		return TemplateACL{}, err
	}
	acl := TemplateACL{Users: map[string]string{}, Groups: map[string]string{}}
	if err := json.Unmarshal(row.Users, &acl.Users); err != nil {
		return acl, fmt.Errorf("decode user_acl of template %s: %w", templateID, err)
	}
	if err := json.Unmarshal(row.Groups, &acl.Groups); err != nil {
		return acl, fmt.Errorf("decode group_acl of template %s: %w", templateID, err)
	}
	return acl, nil
}

// UpdateTemplateACL replaces a template's ACL.
func (db *DB) UpdateTemplateACL(ctx context.Context, templateID string, acl TemplateACL) error {
	users, err := json.Marshal(nonNil(acl.Users))
	if err != nil {
		return err
	}
	groups, err := json.Marshal(nonNil(acl.Groups))
	if err != nil {
		return err
	}
	_, err = db.q().Exec(ctx, `UPDATE templates SET user_acl = $2, group_acl = $3, updated_at = $4 WHERE id = $1`, templateID, users, groups, db.now())
	return err
}

func nonNil(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

// EnsureGroup returns the organization's group named name (matched
// case-insensitively), creating it with source when there is none;
// created says whether it did. Concurrent calls agree on one group.
func (db *DB) EnsureGroup(ctx context.Context, organizationID, name, source string) (g Group, created bool, err error) {
	now := db.now()
	g, err = collectOne[Group](db.q().Query(ctx, `INSERT INTO groups (`+groupColumns+`) VALUES ($1, $2, $3, '', $4, $5, $5)
		ON CONFLICT (organization_id, lower(name)) DO NOTHING RETURNING `+groupColumns,
		uuid.NewString(), organizationID, name, source, now))
	if err == nil {
		return g, true, nil
	}
	if !errors.Is(err, ErrNotFound) {
		return g, false, err
	}
	g, err = db.GroupByName(ctx, organizationID, name)
	return g, false, err
}
