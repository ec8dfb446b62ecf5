package cli

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"airgapcoder/coderd/schedule"
	"airgapcoder/codersdk"
)

// coder schedule show|start|stop|extend, as Coder's (docs/schedules.md).

func (inv *invocation) scheduleCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "schedule",
		Short: "Show and change when workspaces start and stop by themselves",
		Long: `A workspace may start on a weekly schedule (autostart) and stop a while after
it started (autostop, its TTL). Activity through coderd (ssh, port-forward,
apps, the web terminal) moves the stop deadline to now plus the TTL.`,
		Args: noArgs,
	}
	cmd.AddCommand(inv.scheduleShowCmd(), inv.scheduleStartCmd(), inv.scheduleStopCmd(), inv.scheduleExtendCmd())
	return cmd
}

// scheduleRow is one workspace's schedule, as show prints it.
type scheduleRow struct {
	Workspace  string     `json:"workspace"`
	StartsAt   string     `json:"starts_at"`
	StartsNext *time.Time `json:"starts_next,omitempty"`
	StopsAfter string     `json:"stops_after"`
	StopsNext  *time.Time `json:"stops_next,omitempty"`
	// MaxDeadline is the latest the running build may run to (its
	// template's maximum TTL after it started).
	MaxDeadline *time.Time `json:"max_deadline,omitempty"`
	// DormantAt and DeletingAt are set for a dormant workspace, which does
	// not start: StartsAt then says "dormant" and StartsNext is empty.
	DormantAt  *time.Time `json:"dormant_at,omitempty"`
	DeletingAt *time.Time `json:"deleting_at,omitempty"`
}

func scheduleOf(w codersdk.Workspace, now time.Time) scheduleRow {
	r := scheduleRow{Workspace: w.OwnerName + "/" + w.Name, StartsAt: "manual", StopsAfter: "manual"}
	if w.AutostartSchedule != nil {
		if s, err := schedule.Weekly(*w.AutostartSchedule); err == nil {
			r.StartsAt = s.Human()
			next := s.Next(now).In(s.Location())
			r.StartsNext = &next
		} else {
			r.StartsAt = *w.AutostartSchedule
		}
	}
	if w.TTLMillis != nil {
		r.StopsAfter = humanDuration(time.Duration(*w.TTLMillis) * time.Millisecond)
	}
	if d := w.LatestBuild.Deadline; d != nil && w.LatestBuild.Status == codersdk.WorkspaceStatusRunning {
		r.StopsNext, r.MaxDeadline = d, w.LatestBuild.MaxDeadline
	}
	if w.DormantAt != nil {
		r.DormantAt, r.DeletingAt, r.StartsNext = w.DormantAt, w.DeletingAt, nil
		r.StartsAt = "dormant"
		if w.DeletingAt != nil {
			r.StartsAt = "dormant, deleted " + timeOr(w.DeletingAt, "")
		}
	}
	return r
}

func timeOr(t *time.Time, none string) string {
	if t == nil {
		return none
	}
	return t.Local().Format("Mon Jan 2 15:04 MST")
}

// humanDuration prints a TTL as people write it: 8h, 1h30m, 45m, 90s.
func humanDuration(d time.Duration) string {
	s := d.Round(time.Second).String() // e.g. 1h30m0s, 8h0m0s, 45m0s, 0s
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

func (inv *invocation) scheduleShowCmd() *cobra.Command {
	var all bool
	cmd := &cobra.Command{
		Use:   "show [NAME]",
		Short: "Show the autostart and autostop schedule of your workspaces, or of one",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 1 {
				return usageErrorf("%s takes at most one argument, NAME (see --help)", cmd.CommandPath())
			}
			return nil
		},
	}
	out := outputFlag(cmd)
	allFlag(cmd, &all)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		var ws []codersdk.Workspace
		if len(args) == 1 {
			_, w, err := inv.workspaceArg(cmd, args[0])
			if err != nil {
				return err
			}
			ws = []codersdk.Workspace{w}
		} else {
			var err error
			if ws, err = inv.listWorkspaces(cmd.Context(), all); err != nil {
				return err
			}
		}
		now := time.Now()
		rows := make([]scheduleRow, len(ws))
		for i, w := range ws {
			rows[i] = scheduleOf(w, now)
		}
		return renderList(inv.stdout, *out, rows, []string{"WORKSPACE", "STARTS AT", "STARTS NEXT", "STOPS AFTER", "STOPS NEXT"}, func(r scheduleRow) []string {
			return []string{r.Workspace, r.StartsAt, timeOr(r.StartsNext, "-"), r.StopsAfter, timeOr(r.StopsNext, "-")}
		})
	}
	return cmd
}

func (inv *invocation) scheduleStartCmd() *cobra.Command {
	var zone string
	cmd := &cobra.Command{
		Use:   "start NAME {TIME [DAYS] [TIME_ZONE] | manual}",
		Short: "Start a workspace on a weekly schedule, or only by hand",
		Long: `Start a workspace by itself at a time of day, on some days of the week, in a
time zone:

  coder schedule start dev 09:00 Mon-Fri Europe/Berlin
  coder schedule start dev "9:30AM Mon,Wed,Fri" --timezone America/New_York
  coder schedule start dev 08:00              (every day, in TZ or UTC)
  coder schedule start dev manual             (no autostart)

TIME is HH:MM (24-hour) or H:MMAM/PM; DAYS a cron day-of-week field (Mon-Fri,
Sat,Sun, 1-5, *; every day when left out); TIME_ZONE an IANA name (else
--timezone, then $TZ, then UTC). coderd stores Coder's cron form,
"CRON_TZ=Europe/Berlin 0 9 * * Mon-Fri", and starts the workspace at the first
scheduler tick after each occurrence when it is stopped.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) < 2 || len(args) > 4 {
				return usageErrorf("%s needs NAME and a schedule or \"manual\" (see --help)", cmd.CommandPath())
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&zone, "timezone", "", "IANA time zone of the schedule (default $TZ, else UTC)")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		var cronLine *string
		spec := strings.Join(args[1:], " ")
		var sched *schedule.Schedule
		if spec != "manual" {
			if zone == "" {
				zone = defaultZone(inv.environ)
			}
			s, err := schedule.Short(spec, zone)
			if err != nil {
				return usageErrorf("%v", err)
			}
			line := s.String()
			cronLine, sched = &line, s
		}
		client, w, err := inv.workspaceArg(cmd, args[0])
		if err != nil {
			return err
		}
		ctx := cmd.Context()
		if err := client.UpdateWorkspaceAutostart(ctx, w.ID, codersdk.UpdateWorkspaceAutostartRequest{Schedule: cronLine}); err != nil {
			return fmt.Errorf("set the autostart schedule of %s: %w", w.Name, err)
		}
		if sched == nil {
			fmt.Fprintf(inv.stdout, "Workspace %s starts only by hand now.\n", w.Name)
			return nil
		}
		fmt.Fprintf(inv.stdout, "Workspace %s starts at %s; next at %s.\n", w.Name, sched.Human(),
			sched.Next(time.Now()).In(sched.Location()).Format("Mon Jan 2 15:04 MST"))
		return nil
	}
	return cmd
}

func (inv *invocation) scheduleStopCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "stop NAME {DURATION | manual}",
		Short: "Stop a workspace a while after it started, or only by hand",
		Long: `Stop a workspace DURATION after its start build ended (8h, 90m, 1h30m, 2d);
activity through coderd moves the deadline to now plus DURATION. "manual"
removes the autostop, and the deadline of a running workspace with it. A
running workspace keeps its current deadline (see coder schedule extend).`,
		Args: exactArgs(2, "NAME", "DURATION|manual"),
		RunE: func(cmd *cobra.Command, args []string) error {
			var ttl *int64
			if args[1] != "manual" {
				d, err := parseScheduleDuration(args[1])
				if err != nil {
					return usageErrorf("%v", err)
				}
				ms := d.Milliseconds()
				ttl = &ms
			}
			client, w, err := inv.workspaceArg(cmd, args[0])
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			if err := client.UpdateWorkspaceTTL(ctx, w.ID, codersdk.UpdateWorkspaceTTLRequest{TTLMillis: ttl}); err != nil {
				return fmt.Errorf("set the autostop of %s: %w", w.Name, err)
			}
			if ttl == nil {
				fmt.Fprintf(inv.stdout, "Workspace %s stops only by hand now.\n", w.Name)
				return nil
			}
			fmt.Fprintf(inv.stdout, "Workspace %s stops %s after it starts or was last used.\n", w.Name, humanDuration(time.Duration(*ttl)*time.Millisecond))
			return nil
		},
	}
}

func (inv *invocation) scheduleExtendCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "extend NAME DURATION",
		Aliases: []string{"override-stop"},
		Short:   "Move a running workspace's stop deadline to DURATION from now",
		Args:    exactArgs(2, "NAME", "DURATION"),
		RunE: func(cmd *cobra.Command, args []string) error {
			d, err := parseScheduleDuration(args[1])
			if err != nil {
				return usageErrorf("%v", err)
			}
			client, w, err := inv.workspaceArg(cmd, args[0])
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			deadline := time.Now().Add(d)
			if err := client.PutExtendWorkspace(ctx, w.ID, codersdk.PutExtendWorkspaceRequest{Deadline: deadline}); err != nil {
				return fmt.Errorf("extend %s: %w", w.Name, err)
			}
			fmt.Fprintf(inv.stdout, "Workspace %s now stops at %s.\n", w.Name, deadline.Local().Format("Mon Jan 2 15:04 MST"))
			return nil
		},
	}
}

// parseScheduleDuration parses a Go duration, and whole days ("2d").
func parseScheduleDuration(s string) (time.Duration, error) {
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil || n <= 0 {
			return 0, fmt.Errorf("duration %q: want e.g. 8h, 90m, 1h30m or 2d", s)
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("duration %q: want e.g. 8h, 90m, 1h30m or 2d", s)
	}
	return d, nil
}

// createSchedule turns create's --stop-after and --start-at into the
// request's fields.
func createSchedule(stopAfter, startAt, zone string) (ttl *int64, autostart *string, err error) {
	if stopAfter != "" {
		d, err := parseScheduleDuration(stopAfter)
		if err != nil {
			return nil, nil, usageErrorf("--stop-after: %v", err)
		}
		ms := d.Milliseconds()
		ttl = &ms
	}
	if startAt != "" {
		s, err := schedule.Short(startAt, zone)
		if err != nil {
			return nil, nil, usageErrorf("--start-at: %v", err)
		}
		line := s.String()
		autostart = &line
	}
	return ttl, autostart, nil
}

// describeSchedule is the schedule line of coder show; "" for a workspace
// that starts and stops only by hand.
func describeSchedule(w codersdk.Workspace, now time.Time) string {
	if w.TTLMillis == nil && w.AutostartSchedule == nil && w.LatestBuild.Deadline == nil {
		return ""
	}
	r := scheduleOf(w, now)
	line := "Schedule: starts by hand"
	switch {
	case r.DormantAt != nil:
		line = "Schedule: does not start while dormant"
	case r.StartsAt != "manual":
		line = "Schedule: starts " + r.StartsAt
	}
	if r.StartsNext != nil {
		line += " (next " + timeOr(r.StartsNext, "") + ")"
	}
	if r.StopsAfter == "manual" {
		line += ", stops by hand"
	} else {
		line += ", stops " + r.StopsAfter + " after start or last use"
	}
	if r.StopsNext != nil {
		line += fmt.Sprintf(" (deadline %s, in %s", timeOr(r.StopsNext, ""), max(r.StopsNext.Sub(now), 0).Round(time.Second))
		if r.MaxDeadline != nil && !r.MaxDeadline.Equal(*r.StopsNext) {
			line += "; at the latest " + timeOr(r.MaxDeadline, "") + ", the template's maximum"
		}
		line += ")"
	}
	return line
}

// defaultZone is the time zone a schedule without one takes: $TZ when it
// names an IANA zone, else "" (UTC).
func defaultZone(environ []string) string {
	for _, kv := range environ {
		if v, ok := strings.CutPrefix(kv, "TZ="); ok {
			v = strings.TrimPrefix(v, ":")
			if _, err := time.LoadLocation(v); err == nil && v != "" && v != "Local" {
				return v
			}
		}
	}
	return ""
}
