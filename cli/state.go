package cli

import (
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"airgapcoder/codersdk"
	"airgapcoder/internal/atomicfile"
)

func (inv *invocation) stateCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "state",
		Short: "Read and replace a workspace's Terraform state, to repair a broken workspace",
	}
	cmd.AddCommand(inv.statePullCmd(), inv.statePushCmd())
	return cmd
}

// stateBuildArg resolves what pull and push work on: the workspace NAME
// names and its build numbered n (--build), or its latest build for 0.
func (inv *invocation) stateBuildArg(cmd *cobra.Command, name string, n int) (*codersdk.Client, codersdk.Workspace, codersdk.WorkspaceBuild, error) {
	client, w, err := inv.workspaceArg(cmd, name)
	if err != nil {
		return nil, w, codersdk.WorkspaceBuild{}, err
	}
	if n == 0 || int(w.LatestBuild.BuildNumber) == n {
		return client, w, w.LatestBuild, nil
	}
	bs, err := client.WorkspaceBuilds(cmd.Context(), w.ID)
	if err != nil {
		return nil, w, codersdk.WorkspaceBuild{}, err
	}
	for _, b := range bs {
		if int(b.BuildNumber) == n {
			return client, w, b, nil
		}
	}
	return nil, w, codersdk.WorkspaceBuild{}, fmt.Errorf("workspace %s has no build #%d (its latest is #%d)", w.Name, n, w.LatestBuild.BuildNumber)
}

func (inv *invocation) statePullCmd() *cobra.Command {
	var build int
	cmd := &cobra.Command{
		Use:   "pull NAME [FILE]",
		Short: "Write the Terraform state of a workspace's latest (or another) build to stdout or FILE",
		Long: `Write the Terraform state a workspace's build recorded to stdout, or to FILE
(created with mode 0600: state can hold secrets). --build picks a build by
its number; the default is the latest.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) < 1 || len(args) > 2 {
				return usageErrorf("%s needs NAME and optionally FILE (see --help)", cmd.CommandPath())
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			client, w, b, err := inv.stateBuildArg(cmd, args[0], build)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			state, err := client.WorkspaceBuildState(ctx, b.ID)
			if err != nil {
				return fmt.Errorf("read the state of build #%d of workspace %s: %w", b.BuildNumber, w.Name, err)
			}
			if len(args) == 1 {
				_, err = inv.stdout.Write(state)
				return err
			}
			return atomicfile.Write(args[1], state, 0o600)
		},
	}
	cmd.Flags().IntVarP(&build, "build", "b", 0, "Number of the build whose state to pull (default: the latest)")
	return cmd
}

func (inv *invocation) statePushCmd() *cobra.Command {
	var build int
	var noBuild, yes bool
	cmd := &cobra.Command{
		Use:   "push NAME FILE",
		Short: "Replace the Terraform state of a workspace and build it from there (owners only)",
		Long: `Replace the Terraform state of a workspace's latest build with FILE ("-" reads
stdin), then run a build with that build's transition and template version,
which starts from the new state, streaming its logs (owners only).

--no-build only replaces the state; --build N with --no-build replaces the
state of build N instead of the latest.`,
		Args: exactArgs(2, "NAME", "FILE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			client, w, b, err := inv.stateBuildArg(cmd, args[0], build)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			if b.ID != w.LatestBuild.ID && !noBuild {
				return usageErrorf("--build %d is not the latest build: the next build starts from the latest build's state; add --no-build to only replace the state of build #%d", build, build)
			}
			var state []byte
			if args[1] == "-" {
				state, err = io.ReadAll(inv.stdin)
			} else {
				state, err = os.ReadFile(args[1])
			}
			if err != nil {
				return fmt.Errorf("read state: %w", err)
			}
			if err := inv.confirm(yes, fmt.Sprintf("Replace the state of build #%d of workspace %s?", b.BuildNumber, w.Name)); err != nil {
				return err
			}
			if err := client.UpdateWorkspaceBuildState(ctx, b.ID, state); err != nil {
				return fmt.Errorf("replace the state of build #%d of workspace %s: %w", b.BuildNumber, w.Name, err)
			}
			fmt.Fprintf(inv.stderr, "Replaced the state of build #%d of workspace %s.\n", b.BuildNumber, w.Name)
			if noBuild {
				return nil
			}
			nb, err := inv.build(ctx, client, w, codersdk.CreateWorkspaceBuildRequest{
				TemplateVersionID: b.TemplateVersionID, Transition: b.Transition,
			})
			if err != nil {
				return fmt.Errorf("build from the new state: %w", err)
			}
			fmt.Fprintf(inv.stdout, "Workspace %s built (#%d, %s) from the pushed state.\n", w.Name, nb.BuildNumber, nb.Transition)
			return nil
		},
	}
	cmd.Flags().IntVarP(&build, "build", "b", 0, "Number of the build whose state to replace, with --no-build (default: the latest)")
	cmd.Flags().BoolVar(&noBuild, "no-build", false, "Only replace the state; run no build")
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "Skip the confirmation prompt")
	return cmd
}
