package coderd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"airgapcoder/coderd/database"
	"airgapcoder/codersdk"
)

// The OIDC group sync: on each sign-in, the groups named in the ID token's
// group claim decide the user's groups, as Coder's options say
// (--oidc-group-mapping, --oidc-group-auto-create,
// --oidc-group-regex-filter, --oidc-allowed-groups).
//
// The sync only ever changes memberships it made itself (source 'oidc'):
// a user an owner added to a group by hand stays in it whatever the claim
// says, and a group the claim names that the user is already in by hand
// keeps that membership as it is. Groups it creates have source 'oidc'.

// GroupSyncOptions configure the OIDC group sync. The zero value syncs
// the claim's groups by name, creating none.
type GroupSyncOptions struct {
	// Mapping maps an IdP group (as the claim names it) to the name of a
	// Coder group (--oidc-group-mapping, a JSON object). IdP groups not in
	// the map keep their name.
	Mapping map[string]string
	// AutoCreate creates a group the claim names that does not exist yet
	// (--oidc-group-auto-create); otherwise such names are ignored.
	AutoCreate bool
	// RegexFilter, when set, ignores every group whose name, after the
	// mapping, it does not match (--oidc-group-regex-filter).
	RegexFilter *regexp.Regexp
	// AllowedGroups, when not empty, refuses the sign-in of a user whose
	// claim names none of these groups (--oidc-allowed-groups; checked by
	// CheckAllowed as Coder does: after the mapping, before the regex
	// filter, so a mapped group is named by its Coder name).
	AllowedGroups []string
}

// ParseGroupSyncOptions builds the options from the flags' values: mapping
// is --oidc-group-mapping's JSON object ("" for none), regexFilter
// --oidc-group-regex-filter ("" for none). Errors name the flag.
func ParseGroupSyncOptions(mapping string, autoCreate bool, regexFilter string, allowedGroups []string) (GroupSyncOptions, error) {
	o := GroupSyncOptions{AutoCreate: autoCreate, AllowedGroups: allowedGroups}
	if strings.TrimSpace(mapping) != "" {
		if err := json.Unmarshal([]byte(mapping), &o.Mapping); err != nil {
			return o, fmt.Errorf("--oidc-group-mapping must be a JSON object of IdP group to Coder group names: %w", err)
		}
	}
	if regexFilter != "" {
		re, err := regexp.Compile(regexFilter)
		if err != nil {
			return o, fmt.Errorf("--oidc-group-regex-filter: %w", err)
		}
		o.RegexFilter = re
	}
	return o, nil
}

// CheckAllowed returns nil when AllowedGroups is empty or the claim names
// one of them (after the mapping), else an error that says which groups
// would be let in.
func (o GroupSyncOptions) CheckAllowed(claimGroups []string) error {
	if len(o.AllowedGroups) == 0 {
		return nil
	}
	for _, g := range claimGroups {
		if m, ok := o.Mapping[g]; ok {
			g = m
		}
		if slices.Contains(o.AllowedGroups, strings.TrimSpace(g)) {
			return nil
		}
	}
	return fmt.Errorf("not in an allowed group: sign-in needs membership of one of %s at the identity provider", strings.Join(o.AllowedGroups, ", "))
}

// wanted is the Coder group names the claim asks for: mapped, filtered,
// deduplicated case-insensitively, Everyone left out (everyone is in it).
func (o GroupSyncOptions) wanted(claimGroups []string) []string {
	var out []string
	seen := map[string]bool{}
	for _, g := range claimGroups {
		name := strings.TrimSpace(g)
		if m, ok := o.Mapping[g]; ok {
			name = strings.TrimSpace(m)
		}
		if name == "" || isEveryoneName(name) || (o.RegexFilter != nil && !o.RegexFilter.MatchString(name)) {
			continue
		}
		if key := strings.ToLower(name); !seen[key] {
			seen[key] = true
			out = append(out, name)
		}
	}
	return out
}

// GroupSyncAudit is what the sync's audit records say about the sign-in
// that caused it.
type GroupSyncAudit struct {
	IP, UserAgent string
	// Issuer and Subject are the IdP account's (the ID token's iss and sub).
	Issuer, Subject string
}

// syncOIDCGroups makes the user's OIDC-sourced group memberships what
// claimGroups (the ID token's group claim) says under opts, in one
// transaction with its audit records: one per group created, and one per
// group whose membership changed. It returns the names of the groups the
// user was added to and removed from. It does not check AllowedGroups:
// call opts.CheckAllowed first and refuse the sign-in when it fails.
func (api *API) syncOIDCGroups(ctx context.Context, userID string, claimGroups []string, opts GroupSyncOptions, origin GroupSyncAudit) (added, removed []string, err error) {
	want := opts.wanted(claimGroups)
	err = api.db.InTx(ctx, func(tx *database.DB) error {
		added, removed = nil, nil
		user, err := tx.UserByID(ctx, userID)
		if err != nil {
			return fmt.Errorf("group sync: load user %s: %w", userID, err)
		}
		record := func(action codersdk.AuditAction, g database.Group, fields map[string]any) error {
			fields["source"] = "oidc_group_sync"
			fields["idp_issuer"], fields["idp_subject"] = origin.Issuer, origin.Subject
			raw, err := json.Marshal(fields)
			if err != nil {
				return err
			}
			row := database.AuditLog{
				UserID: user.ID, Username: user.Username, IP: origin.IP, UserAgent: origin.UserAgent,
				Action: string(action), ResourceType: string(codersdk.AuditResourceGroup), ResourceID: g.ID, ResourceTarget: g.Name,
				StatusCode: 200, Success: true, AdditionalFields: raw,
			}
			row.Description = describe(row) + " (OIDC group sync)"
			_, err = tx.InsertAuditLog(ctx, row)
			return err
		}
		current, err := tx.GroupsOfUser(ctx, user.ID)
		if err != nil {
			return err
		}
		keep := map[string]bool{} // group ids the claim asks for
		for _, name := range want {
			g, err := tx.GroupByName(ctx, api.org.ID, name)
			switch {
			case err == nil:
			case !errors.Is(err, database.ErrNotFound):
				return err
			case !opts.AutoCreate:
				continue // a group nobody made: ignored, as in Coder
			default:
				var created bool
				if g, created, err = tx.EnsureGroup(ctx, api.org.ID, name, database.GroupSourceOIDC); err != nil {
					return err
				}
				if created {
					if err := record(codersdk.AuditActionCreate, g, map[string]any{"auto_created": true}); err != nil {
						return err
					}
				}
			}
			keep[g.ID] = true
			ok, err := tx.AddGroupMember(ctx, g.ID, user.ID, database.GroupSourceOIDC)
			if err != nil {
				return err
			}
			if ok {
				added = append(added, g.Name)
				if err := record(codersdk.AuditActionWrite, g, map[string]any{"added_users": []string{user.Username}}); err != nil {
					return err
				}
			}
		}
		for _, m := range current {
			if m.MemberSource != database.GroupSourceOIDC || keep[m.ID] {
				continue
			}
			ok, err := tx.RemoveGroupMember(ctx, m.ID, user.ID)
			if err != nil {
				return err
			}
			if ok {
				removed = append(removed, m.Name)
				if err := record(codersdk.AuditActionWrite, m.Group, map[string]any{"removed_users": []string{user.Username}}); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	return added, removed, nil
}
