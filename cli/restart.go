package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"airgapcoder/codersdk"
)

func (inv *invocation) restartCmd() *cobra.Command {
	var yes bool
	cmd := &cobra.Command{
		Use:   "restart NAME",
		Short: "Restart a workspace: a stop build, then a start build",
		Long: `Restart a workspace: build its stop transition, then its start transition, with
the version and parameter values of its latest build, streaming both builds'
logs. A stopped workspace is only started. Exits non-zero if a build fails.`,
		Args: exactArgs(1, "NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			client, w, err := inv.workspaceArg(cmd, args[0])
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			latest := w.LatestBuild
			if latest.Transition == codersdk.WorkspaceTransitionDelete {
				return fmt.Errorf("workspace %s is deleted", w.Name)
			}
			if err := inv.confirm(yes, fmt.Sprintf("Restart workspace %s?", w.Name)); err != nil {
				return err
			}
			if latest.Transition == codersdk.WorkspaceTransitionStart {
				if _, err := inv.build(ctx, client, w, codersdk.CreateWorkspaceBuildRequest{Transition: codersdk.WorkspaceTransitionStop}); err != nil {
					return err
				}
			}
			if _, err := inv.build(ctx, client, w, codersdk.CreateWorkspaceBuildRequest{Transition: codersdk.WorkspaceTransitionStart}); err != nil {
				return err
			}
			fmt.Fprintf(inv.stdout, "Workspace %s restarted.\n", w.Name)
			return nil
		},
	}
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "Skip the confirmation prompt")
	return cmd
}
