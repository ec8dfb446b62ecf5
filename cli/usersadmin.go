package cli

import (
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"airgapcoder/codersdk"
)

// The user commands admins script besides create, list, suspend and
// activate: show, delete and edit-roles, as Coder's.

func (inv *invocation) usersShowCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "show USER",
		Short: "Show a user: yourself (me), or anyone for owners and template admins",
		Long:  "Show a user's name, email, roles and status.\n\nUSER is a username, a user id or \"me\".",
		Args:  exactArgs(1, "USER"),
	}
	out := outputFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		client, err := inv.client()
		if err != nil {
			return err
		}
		u, err := client.User(cmd.Context(), url.PathEscape(args[0]))
		if err != nil {
			return err
		}
		return render(inv.stdout, *out, u, []string{"USERNAME", "NAME", "EMAIL", "ROLES", "STATUS", "CREATED", "LAST SEEN"}, func() [][]string {
			name := u.Name
			if name == "" {
				name = "-"
			}
			return [][]string{{u.Username, name, u.Email, roleList(u.Roles), u.Status, u.CreatedAt.Format(time.RFC3339), ago(u.LastSeenAt)}}
		})
	}
	return cmd
}

func (inv *invocation) usersDeleteCmd() *cobra.Command {
	var yes bool
	cmd := &cobra.Command{
		Use:   "delete USER",
		Short: "Delete a user (owners only)",
		Long: `Delete a user (owners only). Their sessions and API tokens end at once, and
their username and email can be used again.

coderd refuses a user who still owns workspaces (delete those first) and
refuses to delete you. USER is a username or a user id.`,
		Args: exactArgs(1, "USER"),
		RunE: func(cmd *cobra.Command, args []string) error {
			client, err := inv.client()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			u, err := client.User(ctx, url.PathEscape(args[0]))
			if err != nil {
				return err
			}
			if err := inv.confirm(yes, fmt.Sprintf("Delete user %s (%s)?", u.Username, u.Email)); err != nil {
				return err
			}
			if err := client.DeleteUser(ctx, u.ID); err != nil {
				return err
			}
			fmt.Fprintf(inv.stdout, "User %s deleted.\n", u.Username)
			return nil
		},
	}
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "Skip the confirmation prompt")
	return cmd
}

func (inv *invocation) usersEditRolesCmd() *cobra.Command {
	var roles []string
	var yes bool
	cmd := &cobra.Command{
		Use:   "edit-roles USER --roles ROLE[,ROLE]",
		Short: "Replace a user's roles (owners only)",
		Long: `Replace a user's roles (owners only) with those given: owner, template-admin,
member. Every user is a member; --roles "" leaves only that. An owner cannot
take the owner role from themselves. USER is a username or a user id.`,
		Args: exactArgs(1, "USER"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !cmd.Flags().Changed("roles") {
				return usageErrorf("--roles is required: the roles the user is to have, e.g. --roles template-admin")
			}
			var rs []string
			for _, r := range roles {
				if r = strings.TrimSpace(r); r != "" && r != codersdk.RoleMember {
					rs = append(rs, r)
				}
			}
			for _, r := range rs {
				if r != codersdk.RoleOwner && r != codersdk.RoleTemplateAdmin {
					return usageErrorf("--roles: unknown role %q: use owner, template-admin or member", r)
				}
			}
			client, err := inv.client()
			if err != nil {
				return err
			}
			if err := inv.confirm(yes, fmt.Sprintf("Give %s the roles %s?", args[0], strings.Join(append([]string{codersdk.RoleMember}, rs...), ","))); err != nil {
				return err
			}
			if rs == nil {
				rs = []string{}
			}
			u, err := client.UpdateUserRoles(cmd.Context(), url.PathEscape(args[0]), rs)
			if err != nil {
				return err
			}
			fmt.Fprintf(inv.stdout, "User %s now has the roles %s.\n", u.Username, strings.Join(roleNamesOf(u.Roles), ","))
			return nil
		},
	}
	cmd.Flags().StringSliceVar(&roles, "roles", nil, "The user's roles, comma-separated: owner, template-admin, member")
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "Skip the confirmation prompt")
	return cmd
}

// confirm asks question on a terminal unless yes; without a terminal (a
// script) the command goes ahead. A "no" ends the command with exit 1.
func (inv *invocation) confirm(yes bool, question string) error {
	ask := inv.interactive()
	if yes || ask == nil {
		return nil
	}
	ok, err := ask.confirm(question)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("nothing done: answer yes, or pass -y")
	}
	return nil
}
