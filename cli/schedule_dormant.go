package cli

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"airgapcoder/codersdk"
)

// coder dormant list|off|on: the dormancy of workspaces (docs/schedules.md).
// Coder's CLI has no such command (its dashboard has an "Activate" button);
// this is the same API call, PUT /api/v2/workspaces/{id}/dormant.

func (inv *invocation) dormantCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "dormant",
		Short: "List dormant workspaces and make them active again",
		Long: `A stopped workspace unused for its template's dormancy threshold is marked
dormant: it does not start (by hand or by its schedule) until it is made
active again, and it is deleted at its deleting_at time when the template
sets a dormancy auto-deletion (coder templates edit --dormancy-*).

  coder dormant list               your dormant workspaces and when each is deleted
  coder dormant off NAME           make NAME active again (the dashboard's "Activate")
  coder dormant on NAME            mark NAME dormant now`,
		Args: noArgs,
	}
	cmd.AddCommand(inv.dormantListCmd(), inv.dormantSetCmd(false), inv.dormantSetCmd(true))
	return cmd
}

// dormantRow is one dormant workspace, as list prints it.
type dormantRow struct {
	Workspace  string     `json:"workspace"`
	DormantAt  time.Time  `json:"dormant_at"`
	DeletingAt *time.Time `json:"deleting_at,omitempty"`
}

func (inv *invocation) dormantListCmd() *cobra.Command {
	var all bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List dormant workspaces and when they are deleted",
		Args:  noArgs,
	}
	out := outputFlag(cmd)
	allFlag(cmd, &all)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		ws, err := inv.listWorkspaces(cmd.Context(), all)
		if err != nil {
			return err
		}
		rows := []dormantRow{}
		for _, w := range ws {
			if w.DormantAt != nil {
				rows = append(rows, dormantRow{Workspace: w.OwnerName + "/" + w.Name, DormantAt: *w.DormantAt, DeletingAt: w.DeletingAt})
			}
		}
		now := time.Now()
		return renderList(inv.stdout, *out, rows, []string{"WORKSPACE", "DORMANT SINCE", "DELETING AT"}, func(r dormantRow) []string {
			deleting := "never"
			if r.DeletingAt != nil {
				deleting = fmt.Sprintf("%s (in %s)", timeOr(r.DeletingAt, ""), humanDuration(max(r.DeletingAt.Sub(now), 0).Round(time.Minute)))
			}
			return []string{r.Workspace, timeOr(&r.DormantAt, ""), deleting}
		})
	}
	return cmd
}

// dormantSetCmd is `coder dormant off` (dormant false) or `on` (true).
func (inv *invocation) dormantSetCmd(dormant bool) *cobra.Command {
	use, short, aliases := "off NAME", "Make a dormant workspace active again, so that it starts and is not deleted", []string{"activate"}
	if dormant {
		use, short, aliases = "on NAME", "Mark a stopped workspace dormant now (deleted after the template's dormancy auto-deletion)", nil
	}
	return &cobra.Command{
		Use:     use,
		Aliases: aliases,
		Short:   short,
		Args:    exactArgs(1, "NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			client, w, err := inv.workspaceArg(cmd, args[0])
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			if !dormant && w.DormantAt == nil {
				fmt.Fprintf(inv.stdout, "Workspace %s is not dormant.\n", w.Name)
				return nil
			}
			if err := client.UpdateWorkspaceDormancy(ctx, w.ID, codersdk.UpdateWorkspaceDormancy{Dormant: dormant}); err != nil {
				if dormant {
					return fmt.Errorf("mark %s dormant: %w", w.Name, err)
				}
				return fmt.Errorf("make %s active: %w", w.Name, err)
			}
			if !dormant {
				fmt.Fprintf(inv.stdout, "Workspace %s is active again; start it with `coder start %s`.\n", w.Name, w.Name)
				return nil
			}
			w, err = workspaceByName(ctx, client, args[0])
			if err != nil {
				return err
			}
			if w.DeletingAt != nil {
				fmt.Fprintf(inv.stdout, "Workspace %s is dormant; it is deleted at %s unless made active with `coder dormant off %s`.\n",
					w.Name, timeOr(w.DeletingAt, ""), w.Name)
				return nil
			}
			fmt.Fprintf(inv.stdout, "Workspace %s is dormant (its template deletes no dormant workspace); make it active with `coder dormant off %s`.\n", w.Name, w.Name)
			return nil
		},
	}
}
