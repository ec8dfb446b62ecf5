package cli

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"airgapcoder/codersdk"
)

func (inv *invocation) usersCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "users", Short: "Manage users"}
	cmd.AddCommand(inv.usersCreateCmd(), inv.usersListCmd(),
		inv.usersStatusCmd("suspend", "Suspend a user (owners only)",
			"Their password logins, sessions and API tokens are refused until an owner activates them again.\nAn owner cannot suspend themselves.",
			(*codersdk.Client).SuspendUser),
		inv.usersStatusCmd("activate", "Activate a suspended user (owners only)",
			"They can log in again, and their sessions and API tokens that have not expired work again.",
			(*codersdk.Client).ActivateUser),
		inv.usersShowCmd(), inv.usersDeleteCmd(), inv.usersEditRolesCmd())
	return cmd
}

// usersStatusCmd is `coder users suspend|activate USER`: it calls set and
// prints the user's new status in one line.
func (inv *invocation) usersStatusCmd(verb, short, long string, set func(*codersdk.Client, context.Context, string) (codersdk.User, error)) *cobra.Command {
	return &cobra.Command{
		Use:   verb + " USER",
		Short: short,
		Long:  short + ".\n" + long + "\n\nUSER is a username or a user id.",
		Args:  exactArgs(1, "USER"),
		RunE: func(cmd *cobra.Command, args []string) error {
			client, err := inv.client()
			if err != nil {
				return err
			}
			u, err := set(client, cmd.Context(), url.PathEscape(args[0]))
			if err != nil {
				return err
			}
			fmt.Fprintf(inv.stdout, "User %s is %s.\n", u.Username, u.Status)
			return nil
		},
	}
}

func (inv *invocation) usersCreateCmd() *cobra.Command {
	var req codersdk.CreateUserRequest
	var role string
	out := new(string)
	cmd := &cobra.Command{
		Use:   "create",
		Short: "Create a user (owners only)",
		RunE: func(cmd *cobra.Command, _ []string) error {
			if req.Username == "" || req.Email == "" || req.Password == "" {
				return usageErrorf("--username, --email and --password are required")
			}
			switch role {
			case codersdk.RoleMember:
			case codersdk.RoleOwner, codersdk.RoleTemplateAdmin:
				req.Roles = []string{role}
			default:
				return usageErrorf("--role %q: use member, template-admin or owner", role)
			}
			client, err := inv.client()
			if err != nil {
				return err
			}
			u, err := client.CreateUser(cmd.Context(), req)
			if err != nil {
				return err
			}
			return render(inv.stdout, *out, u, []string{"ID", "USERNAME", "EMAIL", "ROLES"}, func() [][]string {
				return [][]string{{u.ID, u.Username, u.Email, roleList(u.Roles)}}
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&req.Username, "username", "", "Username")
	f.StringVar(&req.Name, "full-name", "", "Full name (optional; templates read it as coder_workspace_owner.full_name)")
	f.StringVar(&req.Email, "email", "", "Email")
	f.StringVar(&req.Password, "password", "", "Password (at least 8 characters)")
	f.StringVar(&role, "role", codersdk.RoleMember, "Role: member, template-admin or owner")
	out = outputFlag(cmd)
	return cmd
}

func roleList(rs []codersdk.Role) string {
	names := []string{}
	for _, r := range rs {
		names = append(names, r.Name)
	}
	if len(names) == 0 {
		return codersdk.RoleMember
	}
	return strings.Join(names, ",")
}

func (inv *invocation) usersListCmd() *cobra.Command {
	return listCommand(inv, &cobra.Command{Use: "list", Short: "List users (owners and template admins)"},
		func(ctx context.Context, client *codersdk.Client) ([]codersdk.User, error) {
			resp, err := client.Users(ctx)
			return resp.Users, err
		},
		[]string{"USERNAME", "EMAIL", "ROLES", "STATUS", "CREATED"},
		func(u codersdk.User) []string {
			return []string{u.Username, u.Email, roleList(u.Roles), u.Status, u.CreatedAt.Format(time.RFC3339)}
		})
}

func (inv *invocation) tokensCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "tokens", Short: "Manage API tokens"}
	var lifetime time.Duration
	var name string
	create := &cobra.Command{
		Use:   "create",
		Short: "Create an API token; prints only the token",
		RunE: func(cmd *cobra.Command, _ []string) error {
			client, err := inv.client()
			if err != nil {
				return err
			}
			resp, err := client.CreateToken(cmd.Context(), codersdk.Me, codersdk.CreateTokenRequest{Lifetime: lifetime, TokenName: name})
			if err != nil {
				return err
			}
			fmt.Fprintln(inv.stdout, resp.Key)
			return nil
		},
	}
	create.Flags().DurationVar(&lifetime, "lifetime", 30*24*time.Hour, "How long the token is valid")
	create.Flags().StringVarP(&name, "name", "n", "", "Token name (default: generated)")

	list := listCommand(inv, &cobra.Command{Use: "list", Short: "List your API tokens"},
		func(ctx context.Context, client *codersdk.Client) ([]codersdk.APIKey, error) {
			return client.Tokens(ctx, codersdk.Me)
		},
		[]string{"ID", "NAME", "EXPIRES", "LAST USED"},
		func(k codersdk.APIKey) []string {
			return []string{k.ID, k.TokenName, k.ExpiresAt.Format(time.RFC3339), ago(k.LastUsed)}
		})
	remove := &cobra.Command{
		Use:   "remove ID",
		Short: "Delete an API token",
		Args:  exactArgs(1, "ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			client, err := inv.client()
			if err != nil {
				return err
			}
			if err := client.DeleteAPIKey(cmd.Context(), codersdk.Me, args[0]); err != nil {
				return err
			}
			fmt.Fprintf(inv.stdout, "Token %s deleted.\n", args[0])
			return nil
		},
	}
	cmd.AddCommand(create, list, remove)
	return cmd
}
