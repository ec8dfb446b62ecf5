package cli

import (
	"strings"

	"github.com/spf13/cobra"

	"airgapcoder/codersdk"
)

// `coder templates permissions`: the template ACL. Coder's CLI has no
// command for it (its dashboard edits it through PATCH
// /api/v2/templates/{id}/acl); this is that API call from the command
// line.

func (inv *invocation) templatesPermissionsCmd() *cobra.Command {
	var users, groups []string
	cmd := &cobra.Command{
		Use:     "permissions TEMPLATE",
		Aliases: []string{"acl"},
		Short:   "Show or change who may use or administer a template",
		Long: `Show or change who may use or administer a template, besides owners and template admins.
A role is "use" (create workspaces from the template and start them), "admin" (also change
its active version and these permissions) or "none" (remove the entry). New templates give
the "Everyone" group "use". Then print the permissions.

  coder templates permissions docker --group Everyone=none --group devs=use --user alice=admin`,
		Args: exactArgs(1, "TEMPLATE"),
	}
	f := cmd.Flags()
	f.StringArrayVar(&groups, "group", nil, "GROUP=ROLE: set a group's role (use, admin or none); repeatable")
	f.StringArrayVar(&users, "user", nil, "USER=ROLE: set a user's role (use, admin or none); repeatable")
	out := outputFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		userPerms, err := templateRoles("user", users)
		if err != nil {
			return err
		}
		groupPerms, err := templateRoles("group", groups)
		if err != nil {
			return err
		}
		client, t, err := inv.templateArg(cmd, args[0])
		if err != nil {
			return err
		}
		ctx := cmd.Context()
		if len(userPerms)+len(groupPerms) > 0 {
			if err := client.UpdateTemplateACL(ctx, t.ID, codersdk.UpdateTemplateACL{UserPerms: userPerms, GroupPerms: groupPerms}); err != nil {
				return err
			}
		}
		acl, err := client.TemplateACL(ctx, t.ID)
		if err != nil {
			return err
		}
		return render(inv.stdout, *out, acl, []string{"TYPE", "NAME", "ROLE", "MEMBERS"}, func() [][]string {
			rows := [][]string{}
			for _, g := range acl.Groups {
				rows = append(rows, []string{"group", g.Name, string(g.Role), memberList(g.Group)})
			}
			for _, u := range acl.Users {
				rows = append(rows, []string{"user", u.Username, string(u.Role), ""})
			}
			return rows
		})
	}
	return cmd
}

// templateRoles parses NAME=ROLE values of --flag.
func templateRoles(flag string, in []string) (map[string]codersdk.TemplateRole, error) {
	kv, err := parseKeyValuesLastWins(flag, in)
	if err != nil {
		return nil, err
	}
	out := map[string]codersdk.TemplateRole{}
	for k, v := range kv {
		switch strings.ToLower(v) {
		case "use":
			out[k] = codersdk.TemplateRoleUse
		case "admin":
			out[k] = codersdk.TemplateRoleAdmin
		case "none", "":
			out[k] = codersdk.TemplateRoleDeleted
		default:
			return nil, usageErrorf("--%s %s=%s: the role must be use, admin or none", flag, k, v)
		}
	}
	return out, nil
}
