package cli

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	"github.com/spf13/cobra"

	"airgapcoder/codersdk"
)

// `coder groups`: Coder's list, create, edit and delete, plus add and
// remove (shorthands for edit --add-users / --rm-users that CONTRACT.md
// promises).

func (inv *invocation) groupsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use: "groups", Aliases: []string{"group"}, Short: "Manage groups",
		Long: `Manage groups. Owners create, edit and delete groups; template admins read them all;
members read the groups they are in. The implicit "Everyone" group holds every user; only
its quota allowance can be edited. Share a template with a group with "coder templates permissions".`,
	}
	cmd.AddCommand(inv.groupsListCmd(), inv.groupsCreateCmd(), inv.groupsEditCmd(), inv.groupsDeleteCmd(),
		inv.groupsMembersCmd("add", "Add users to a group (owners only)", true),
		inv.groupsMembersCmd("remove", "Remove users from a group (owners only)", false))
	return cmd
}

func memberList(g codersdk.Group) string {
	names := []string{}
	for _, m := range g.Members {
		names = append(names, m.Username)
	}
	return strings.Join(names, ",")
}

func (inv *invocation) groupsListCmd() *cobra.Command {
	return listCommand(inv, &cobra.Command{Use: "list", Aliases: []string{"ls"}, Short: "List groups with their members (-o json: every member's details)"},
		func(ctx context.Context, client *codersdk.Client) ([]codersdk.Group, error) {
			return client.Groups(ctx, "default")
		},
		[]string{"NAME", "DISPLAY NAME", "SOURCE", "MEMBERS", "QUOTA ALLOWANCE", "ORGANIZATION ID"},
		func(g codersdk.Group) []string {
			return []string{g.Name, g.DisplayName, string(g.Source), memberList(g), fmt.Sprint(g.QuotaAllowance), g.OrganizationID}
		})
}

func (inv *invocation) groupsCreateCmd() *cobra.Command {
	var req codersdk.CreateGroupRequest
	cmd := &cobra.Command{
		Use:   "create NAME",
		Short: "Create a group (owners only)",
		Args:  exactArgs(1, "NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			client, err := inv.client()
			if err != nil {
				return err
			}
			req.Name = args[0]
			g, err := client.CreateGroup(cmd.Context(), "default", req)
			if err != nil {
				return err
			}
			fmt.Fprintf(inv.stdout, "Successfully created group %s!\n", g.Name)
			return nil
		},
	}
	cmd.Flags().StringVar(&req.DisplayName, "display-name", "", "Display name of the group")
	return cmd
}

// groupByName is the signed-in client and the default organization's group
// called name.
func (inv *invocation) groupByName(cmd *cobra.Command, name string) (*codersdk.Client, codersdk.Group, error) {
	client, err := inv.client()
	if err != nil {
		return nil, codersdk.Group{}, err
	}
	g, err := client.GroupByName(cmd.Context(), "default", url.PathEscape(name))
	if err != nil {
		return nil, g, fmt.Errorf("find group %s: %w", name, err)
	}
	return client, g, nil
}

func (inv *invocation) groupsEditCmd() *cobra.Command {
	var name, displayName string
	var add, remove []string
	var allowance int
	cmd := &cobra.Command{
		Use:   "edit NAME",
		Short: "Rename a group, change its members or its quota allowance (owners only)",
		Long: `Rename a group, change its members or its quota allowance (owners only).
Users are named by username, email or id, e.g.
  coder groups edit devs --add-users alice,bob --rm-users carol
The quota allowance is the credits a day the group adds to each member's workspace
budget; the Everyone group takes an allowance and nothing else, e.g.
  coder groups edit Everyone --quota-allowance 10`,
		Args: exactArgs(1, "NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			client, g, err := inv.groupByName(cmd, args[0])
			if err != nil {
				return err
			}
			req := codersdk.PatchGroupRequest{Name: name, AddUsers: add, RemoveUsers: remove}
			if cmd.Flags().Changed("display-name") {
				req.DisplayName = &displayName
			}
			if cmd.Flags().Changed("quota-allowance") {
				req.QuotaAllowance = &allowance
			}
			if _, err := client.PatchGroup(cmd.Context(), g.ID, req); err != nil {
				return err
			}
			fmt.Fprintf(inv.stdout, "Successfully patched group %s!\n", g.Name)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVarP(&name, "name", "n", "", "New name of the group")
	f.StringVar(&displayName, "display-name", "", "New display name of the group")
	f.StringSliceVarP(&add, "add-users", "a", nil, "Users to add (comma-separated usernames, emails or ids)")
	f.StringSliceVarP(&remove, "rm-users", "r", nil, "Users to remove (comma-separated usernames, emails or ids)")
	f.IntVar(&allowance, "quota-allowance", 0, "Credits a day the group adds to each member's workspace quota budget (0 adds none)")
	return cmd
}

func (inv *invocation) groupsMembersCmd(verb, short string, add bool) *cobra.Command {
	return &cobra.Command{
		Use:   verb + " GROUP USER...",
		Short: short,
		Long:  short + ".\nUsers are named by username, email or id. The same as coder groups edit GROUP --add-users / --rm-users.",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) < 2 {
				return usageErrorf("%s needs a group and at least one user: GROUP USER... (see --help)", cmd.CommandPath())
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			client, g, err := inv.groupByName(cmd, args[0])
			if err != nil {
				return err
			}
			req := codersdk.PatchGroupRequest{RemoveUsers: args[1:]}
			if add {
				req = codersdk.PatchGroupRequest{AddUsers: args[1:]}
			}
			if g, err = client.PatchGroup(cmd.Context(), g.ID, req); err != nil {
				return err
			}
			fmt.Fprintf(inv.stdout, "Group %s: %s\n", g.Name, memberList(g))
			return nil
		},
	}
}

func (inv *invocation) groupsDeleteCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "delete NAME",
		Aliases: []string{"rm"},
		Short:   "Delete a group (owners only); templates shared with it lose that entry",
		Args:    exactArgs(1, "NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			client, g, err := inv.groupByName(cmd, args[0])
			if err != nil {
				return err
			}
			if err := client.DeleteGroup(cmd.Context(), g.ID); err != nil {
				return err
			}
			fmt.Fprintf(inv.stdout, "Successfully deleted group %s!\n", g.Name)
			return nil
		},
	}
}
