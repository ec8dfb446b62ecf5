package cli

import (
	"testing"
	"time"

	"airgapcoder/codersdk"
)

// TestDescribeSchedule is coder show's schedule line.
func TestDescribeSchedule(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC) // a Friday
	deadline := now.Add(90 * time.Minute)
	ttl := (8 * time.Hour).Milliseconds()
	sched := "CRON_TZ=Europe/Berlin 0 9 * * Mon-Fri"
	local := func(t time.Time) string { return t.Local().Format("Mon Jan 2 15:04 MST") } // timeOr prints local times
	monday := local(time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC))
	running := codersdk.WorkspaceBuild{Status: codersdk.WorkspaceStatusRunning, Deadline: &deadline}
	maxDeadline := now.Add(4 * time.Hour)
	capped := codersdk.WorkspaceBuild{Status: codersdk.WorkspaceStatusRunning, Deadline: &deadline, MaxDeadline: &maxDeadline}
	dormantAt, deletingAt := now.Add(-time.Hour), now.Add(7*24*time.Hour)
	for _, tc := range []struct {
		name string
		w    codersdk.Workspace
		want string
	}{
		{"by hand", codersdk.Workspace{}, ""},
		{"autostop with a deadline", codersdk.Workspace{TTLMillis: &ttl, LatestBuild: running},
			"Schedule: starts by hand, stops 8h after start or last use (deadline " + local(deadline) + ", in 1h30m0s)"},
		{"autostart only", codersdk.Workspace{AutostartSchedule: &sched},
			"Schedule: starts 09:00 Mon-Fri (Europe/Berlin) (next " + monday + "), stops by hand"},
		{"stopped: no deadline shown", codersdk.Workspace{TTLMillis: &ttl, AutostartSchedule: &sched,
			LatestBuild: codersdk.WorkspaceBuild{Status: codersdk.WorkspaceStatusStopped}},
			"Schedule: starts 09:00 Mon-Fri (Europe/Berlin) (next " + monday + "), stops 8h after start or last use"},
		{"template maximum", codersdk.Workspace{TTLMillis: &ttl, LatestBuild: capped},
			"Schedule: starts by hand, stops 8h after start or last use (deadline " + local(deadline) + ", in 1h30m0s; at the latest " +
				local(maxDeadline) + ", the template's maximum)"},
		{"dormant: no next start", codersdk.Workspace{AutostartSchedule: &sched, DormantAt: &dormantAt, DeletingAt: &deletingAt,
			LatestBuild: codersdk.WorkspaceBuild{Status: codersdk.WorkspaceStatusStopped}},
			"Schedule: does not start while dormant, stops by hand"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := describeSchedule(tc.w, now); got != tc.want {
				t.Errorf("got  %q\nwant %q", got, tc.want)
			}
		})
	}
}

func TestParseScheduleDuration(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]time.Duration{"8h": 8 * time.Hour, "90m": 90 * time.Minute, "1h30m": 90 * time.Minute, "2d": 48 * time.Hour} {
		if got, err := parseScheduleDuration(in); err != nil || got != want {
			t.Errorf("parseScheduleDuration(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "soon", "-1h", "0s", "xd", "0d"} {
		if _, err := parseScheduleDuration(in); err == nil {
			t.Errorf("parseScheduleDuration(%q): no error", in)
		}
	}
}

func TestHumanDuration(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]string{
		8 * time.Hour: "8h", 90 * time.Minute: "1h30m", 45 * time.Minute: "45m", 90 * time.Second: "1m30s",
		time.Hour + 30*time.Second: "1h0m30s", 168 * time.Hour: "168h", 10 * time.Minute: "10m", 0: "0s", 20 * time.Second: "20s",
	} {
		if got := humanDuration(d); got != want {
			t.Errorf("humanDuration(%s) = %q, want %q", d, got, want)
		}
	}
}
