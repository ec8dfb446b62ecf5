package coderd

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"airgapcoder/coderd/database"
	"airgapcoder/codersdk"
)

// The OIDC role sync, as Coder's --oidc-user-role-field and
// --oidc-user-role-mapping: when a role field is configured, each sign-in
// sets the user's site roles to what the role claim says. A claim value
// named in the mapping becomes the mapped roles (none when mapped to an
// empty list or ""); any other value is taken as a role name. Names that
// are not roles here (owner, template-admin; member is everyone's) are
// ignored. A user whose claim maps to no role becomes a plain member.
//
// The last active owner is never demoted: the sync keeps the owner role
// of a user whom no other active owner would outlive, and says so in the
// audit record.

// ParseUserRoleMapping reads --oidc-user-role-mapping: a JSON object of
// IdP role to the list of Coder roles it grants ("" or "{}" for none).
// Every Coder role named must exist here.
func ParseUserRoleMapping(mapping string) (map[string][]string, error) {
	if strings.TrimSpace(mapping) == "" {
		return nil, nil
	}
	var m map[string][]string
	if err := json.Unmarshal([]byte(mapping), &m); err != nil {
		return nil, fmt.Errorf("--oidc-user-role-mapping must be a JSON object of IdP role to a list of Coder roles, e.g. {\"idp-admins\": [\"template-admin\"]}: %w", err)
	}
	for idp, rs := range m {
		for _, r := range rs {
			if r != "" && !validRole(r) {
				return nil, fmt.Errorf("--oidc-user-role-mapping: %q maps to %q, which is not a role here; roles are owner, template-admin, member", idp, r)
			}
		}
	}
	return m, nil
}

// mapRoles returns the site roles claimRoles grant under mapping (sorted,
// member left out) and the claim values that named no role.
func mapRoles(claimRoles []string, mapping map[string][]string) (roles, ignored []string) {
	add := func(r string) {
		if r == "" || r == codersdk.RoleMember || slices.Contains(roles, r) {
			return
		}
		roles = append(roles, r)
	}
	for _, c := range claimRoles {
		if m, ok := mapping[c]; ok {
			for _, r := range m {
				add(r)
			}
			continue
		}
		if validRole(c) {
			add(c)
			continue
		}
		ignored = append(ignored, c)
	}
	slices.Sort(roles)
	if roles == nil {
		roles = []string{}
	}
	return roles, ignored
}

// syncOIDCRoles sets the user's site roles to what claimRoles grant under
// mapping, in one transaction with its audit record (only when the roles
// change). It returns the user as it is afterwards.
func (api *API) syncOIDCRoles(ctx context.Context, userID string, claimRoles []string, mapping map[string][]string, origin GroupSyncAudit) (database.User, error) {
	want, ignored := mapRoles(claimRoles, mapping)
	var user database.User
	changed := false
	err := api.db.InTx(ctx, func(tx *database.DB) error {
		var err error
		user, err = tx.UserByID(ctx, userID)
		if err != nil {
			return fmt.Errorf("role sync: load user %s: %w", userID, err)
		}
		fields := map[string]any{
			"source": "oidc_role_sync", "idp_issuer": origin.Issuer, "idp_subject": origin.Subject,
			"previous_roles": user.Roles, "claim_roles": claimRoles,
		}
		if len(ignored) > 0 {
			fields["ignored_claim_roles"] = ignored
		}
		if slices.Contains(user.Roles, codersdk.RoleOwner) && !slices.Contains(want, codersdk.RoleOwner) {
			owners, err := tx.LockActiveOwners(ctx)
			if err != nil {
				return err
			}
			if !slices.ContainsFunc(owners, func(id string) bool { return id != user.ID }) {
				want = append(want, codersdk.RoleOwner)
				slices.Sort(want)
				fields["kept_owner"] = "the last active owner keeps the owner role"
			}
		}
		have := slices.Clone(user.Roles)
		slices.Sort(have)
		if slices.Equal(have, want) {
			return nil
		}
		changed = true
		if user, err = tx.UpdateUserRoles(ctx, user.ID, want); err != nil {
			return err
		}
		fields["roles"] = want
		raw, err := json.Marshal(fields)
		if err != nil {
			return err
		}
		row := database.AuditLog{
			UserID: user.ID, Username: user.Username, IP: origin.IP, UserAgent: origin.UserAgent,
			Action: string(codersdk.AuditActionWrite), ResourceType: string(codersdk.AuditResourceUser), ResourceID: user.ID, ResourceTarget: user.Username,
			StatusCode: 200, Success: true, AdditionalFields: raw,
		}
		row.Description = describe(row) + " (OIDC role sync)"
		_, err = tx.InsertAuditLog(ctx, row)
		return err
	})
	if changed && err == nil {
		api.authChanged()
	}
	return user, err
}

// claimStrings reads a claim that holds a list of strings or a single
// string. A missing or null claim is an empty list: an IdP that leaves the
// claim out of the token of a user in no group or role means none.
func claimStrings(claims map[string]any, field string) ([]string, error) {
	switch v := claims[field].(type) {
	case nil:
		return nil, nil
	case string:
		if v == "" {
			return nil, nil
		}
		return []string{v}, nil
	case []any:
		out := make([]string, 0, len(v))
		for _, e := range v {
			s, ok := e.(string)
			if !ok {
				return nil, fmt.Errorf("claim %q holds %v (%T), not a string", field, e, e)
			}
			out = append(out, s)
		}
		return out, nil
	default:
		return nil, fmt.Errorf("claim %q is %T, want a list of strings or a string", field, v)
	}
}
