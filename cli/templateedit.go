package cli

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"airgapcoder/codersdk"
)

// coder templates edit NAME: a template's schedule defaults and dormancy,
// with Coder's flag names (docs/schedules.md).

func (inv *invocation) templateEditCmd() *cobra.Command {
	var defaultTTL, activityBump, dormancy, autoDelete, maxTTL string
	cmd := &cobra.Command{
		Use:   "edit NAME",
		Short: "Edit a template's schedule defaults and dormancy rules",
		Long: `Change the schedule settings of a template (template admins). Only the
flags given change; 0 turns a setting off. Durations are Go durations
(8h, 90m, 1h30m) or whole days (30d).

  --default-ttl             the TTL of a workspace created without --stop-after
  --activity-bump           how far activity moves a running workspace's
                            deadline (0: by the workspace's TTL)
  --dormancy-threshold      a stopped workspace unused this long is marked
                            dormant and does not start until made active
  --dormancy-auto-deletion  a dormant workspace is deleted after this long
  --max-ttl                 the longest TTL a workspace may ask for, and the
                            longest a workspace runs after it started, activity
                            or not (Coder's max_ttl); applies from each
                            workspace's next start`,
		Args: exactArgs(1, "NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			var req codersdk.UpdateTemplateMeta
			for _, f := range []struct {
				flag, value string
				field       **int64
			}{
				{"default-ttl", defaultTTL, &req.DefaultTTLMillis},
				{"activity-bump", activityBump, &req.ActivityBumpMillis},
				{"dormancy-threshold", dormancy, &req.TimeTilDormantMillis},
				{"dormancy-auto-deletion", autoDelete, &req.TimeTilDormantAutoDeleteMillis},
				{"max-ttl", maxTTL, &req.MaxTTLMillis},
			} {
				if !cmd.Flags().Changed(f.flag) {
					continue
				}
				d, err := parseEditDuration(f.value)
				if err != nil {
					return usageErrorf("--%s: %v", f.flag, err)
				}
				ms := d.Milliseconds()
				*f.field = &ms
			}
			if req == (codersdk.UpdateTemplateMeta{}) {
				return usageErrorf("nothing to change: give at least one of --default-ttl, --activity-bump, --dormancy-threshold, --dormancy-auto-deletion, --max-ttl")
			}
			client, t, err := inv.templateArg(cmd, args[0])
			if err != nil {
				return err
			}
			t, err = client.UpdateTemplateMeta(cmd.Context(), t.ID, req)
			if err != nil {
				return fmt.Errorf("edit template %s: %w", args[0], err)
			}
			fmt.Fprintf(inv.stdout, "Updated template %s: default TTL %s, activity bump %s, dormancy threshold %s, dormancy auto-deletion %s, max TTL %s.\n",
				t.Name, offOr(t.DefaultTTLMillis), offOr(t.ActivityBumpMillis), offOr(t.TimeTilDormantMillis), offOr(t.TimeTilDormantAutoDeleteMillis), offOr(t.MaxTTLMillis))
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&defaultTTL, "default-ttl", "", "TTL of workspaces created without one (0: none)")
	f.StringVar(&activityBump, "activity-bump", "", "how far activity moves a deadline (0: by the workspace's TTL)")
	f.StringVar(&dormancy, "dormancy-threshold", "", "mark stopped workspaces unused this long dormant (0: never)")
	f.StringVar(&autoDelete, "dormancy-auto-deletion", "", "delete dormant workspaces after this long (0: never)")
	f.StringVar(&maxTTL, "max-ttl", "", "longest TTL and longest run of a workspace after it started (0: no limit)")
	return cmd
}

// parseEditDuration is parseScheduleDuration that also takes 0 (off).
func parseEditDuration(s string) (time.Duration, error) {
	if s == "0" {
		return 0, nil
	}
	return parseScheduleDuration(s)
}

// offOr prints a duration in milliseconds, "off" for 0.
func offOr(ms int64) string {
	if ms == 0 {
		return "off"
	}
	return humanDuration(time.Duration(ms) * time.Millisecond)
}

// describeDormancy is coder show's line for a dormant workspace; "" for one
// that is not.
func describeDormancy(w codersdk.Workspace) string {
	if w.DormantAt == nil {
		return ""
	}
	line := "Dormant: since " + timeOr(w.DormantAt, "") + ", unused for too long; it starts again once made active with `coder dormant off " + w.Name + "`"
	if w.DeletingAt != nil {
		line += "; deleted at " + timeOr(w.DeletingAt, "") + " unless made active"
	}
	return line
}
