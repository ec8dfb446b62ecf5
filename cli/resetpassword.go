package cli

import (
	"bufio"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"airgapcoder/appliance"
)

// applianceResetPasswordCmd recovers a lost password on the host.
func (inv *invocation) applianceResetPasswordCmd() *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:   "reset-password USER --dir DIR",
		Short: "Set a user's password in the appliance's database (local recovery; audited)",
		Long: `Set the password of USER (a user name or email) directly in the appliance's
database, for an admin who lost theirs: it needs no session, only the host.
The new password is read from standard input (one line; prompted for on a
terminal). The user's sessions and tokens are revoked. It works whether the
appliance runs or not, and is recorded in the audit log.`,
		Args: exactArgs(1, "USER"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if dir == "" {
				return usageErrorf("--dir is required")
			}
			fmt.Fprintf(inv.stderr, "New password for %s: ", args[0])
			line, err := bufio.NewReader(inv.stdin).ReadString('\n')
			password := strings.TrimRight(line, "\r\n")
			if password == "" {
				if err != nil {
					return usageErrorf("no password on standard input")
				}
				return usageErrorf("the password is empty")
			}
			if err := appliance.ResetPassword(cmd.Context(), dir, args[0], password, inv.logger()); err != nil {
				return err
			}
			fmt.Fprintf(inv.stdout, "Password of %s reset; their sessions are revoked.\n", args[0])
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "Appliance folder")
	return cmd
}
