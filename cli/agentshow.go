package cli

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"airgapcoder/codersdk"
)

// showAgentLogLines is how much startup script output coder show prints.
const showAgentLogLines = 20

// printAgentDetails prints, for each agent of the latest build, its
// version, listening ports, apps with their dev URLs (and health, for apps
// with a healthcheck), and the end of its startup script output.
func (inv *invocation) printAgentDetails(ctx context.Context, client *codersdk.Client, w codersdk.Workspace) error {
	base := strings.TrimSuffix(client.URL.String(), "/") + "/@" + w.OwnerName + "/" + w.Name
	for _, r := range w.LatestBuild.Resources {
		for _, a := range r.Agents {
			out := inv.stdout
			fmt.Fprintf(out, "\nAgent %s: %s, %s", a.Name, a.Status, a.LifecycleState)
			if a.Version != "" {
				fmt.Fprintf(out, ", version %s", a.Version)
			}
			fmt.Fprintln(out)
			if len(a.ListeningPorts) > 0 {
				ports := make([]string, len(a.ListeningPorts))
				for i, p := range a.ListeningPorts {
					ports[i] = strconv.Itoa(int(p.Port))
				}
				fmt.Fprintf(out, "Listening ports: %s\n", strings.Join(ports, ", "))
				fmt.Fprintf(out, "  reach one with `coder port-forward %s --tcp LOCAL:PORT` or at %s/ports/PORT/\n", w.Name, base)
			}
			for _, app := range a.Apps {
				fmt.Fprintf(out, "App %s: %s/apps/%s/", app.Slug, base, app.Slug)
				if app.Health != "" && app.Health != codersdk.WorkspaceAppHealthDisabled {
					fmt.Fprintf(out, " (%s)", app.Health)
				}
				fmt.Fprintln(out)
			}
			logs, err := client.WorkspaceAgentLogs(ctx, a.ID, 0)
			if err != nil {
				return err
			}
			if len(logs) == 0 {
				continue
			}
			from := max(0, len(logs)-showAgentLogLines)
			if from > 0 {
				fmt.Fprintf(out, "Startup script output (last %d of %d lines):\n", len(logs)-from, len(logs))
			} else {
				fmt.Fprintln(out, "Startup script output:")
			}
			for _, l := range logs[from:] {
				fmt.Fprintf(out, "  %s\n", l.Output)
			}
		}
	}
	return nil
}
