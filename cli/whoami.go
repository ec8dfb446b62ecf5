package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"airgapcoder/codersdk"
)

// whoamiRow is what `coder whoami -o json` prints, in the shape of Coder's.
type whoamiRow struct {
	URL             string              `json:"url"`
	Username        string              `json:"username"`
	UserID          string              `json:"user_id"`
	OrganizationIDs []string            `json:"organization_ids"`
	Roles           map[string][]string `json:"roles"`
}

func (inv *invocation) whoamiCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "whoami",
		Short: "Show which deployment you are signed in to, and as whom",
		Long: `Show which deployment you are signed in to, and as whom: the URL and your
username; -o table adds your id and roles, -o json prints all of it.`,
	}
	var out string
	formatFlag(cmd, &out, "text", "table", "json")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		client, err := inv.client()
		if err != nil {
			return err
		}
		u, err := client.User(cmd.Context(), codersdk.Me)
		if err != nil {
			return err
		}
		row := whoamiRow{URL: client.URL.String(), Username: u.Username, UserID: u.ID, OrganizationIDs: u.OrganizationIDs,
			Roles: map[string][]string{"*": roleNamesOf(u.Roles)}}
		if row.OrganizationIDs == nil {
			row.OrganizationIDs = []string{}
		}
		if out == "text" {
			fmt.Fprintf(inv.stdout, "Coder is running at %s, You're authenticated as %s !\n", row.URL, row.Username)
			return nil
		}
		return render(inv.stdout, out, row, []string{"URL", "USERNAME", "ID", "ROLES"}, func() [][]string {
			return [][]string{{row.URL, row.Username, row.UserID, roleList(u.Roles)}}
		})
	}
	return cmd
}

// roleNamesOf names a user's roles; a user without any is a member.
func roleNamesOf(rs []codersdk.Role) []string {
	names := []string{codersdk.RoleMember}
	for _, r := range rs {
		if r.Name != codersdk.RoleMember {
			names = append(names, r.Name)
		}
	}
	return names
}
