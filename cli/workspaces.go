package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"airgapcoder/codersdk"
)

var errNoWorkspace = errors.New("no such workspace")

// workspaceByName resolves "name" or "owner/name".
func workspaceByName(ctx context.Context, client *codersdk.Client, arg string) (codersdk.Workspace, error) {
	owner, name := codersdk.Me, arg
	if o, n, ok := strings.Cut(arg, "/"); ok {
		owner, name = o, n
	}
	w, err := client.WorkspaceByOwnerAndName(ctx, owner, name)
	if codersdk.IsStatus(err, http.StatusNotFound) {
		return w, fmt.Errorf("%w %q: see `coder list`", errNoWorkspace, arg)
	}
	return w, err
}

// workspaceArg is the client and the workspace a command's NAME argument
// ("name" or "owner/name") names.
func (inv *invocation) workspaceArg(cmd *cobra.Command, arg string) (*codersdk.Client, codersdk.Workspace, error) {
	client, err := inv.client()
	if err != nil {
		return nil, codersdk.Workspace{}, err
	}
	w, err := workspaceByName(cmd.Context(), client, arg)
	return client, w, err
}

// build creates a build of w and prints its logs until it ends.
func (inv *invocation) build(ctx context.Context, client *codersdk.Client, w codersdk.Workspace, req codersdk.CreateWorkspaceBuildRequest) (codersdk.WorkspaceBuild, error) {
	b, err := client.CreateWorkspaceBuild(ctx, w.ID, req)
	if err != nil {
		return b, fmt.Errorf("%s workspace %s: %w", req.Transition, w.Name, err)
	}
	return b, inv.followBuild(ctx, client, b)
}

// followBuild prints a build's logs until it ends.
func (inv *invocation) followBuild(ctx context.Context, client *codersdk.Client, b codersdk.WorkspaceBuild) error {
	_, err := client.WaitJob(ctx, b.Job, func(ctx context.Context, after int64, fn func(codersdk.ProvisionerJobLog) error) error {
		return client.WorkspaceBuildLogs(ctx, b.ID, after, true, fn)
	}, func(ctx context.Context) (codersdk.ProvisionerJob, error) {
		nb, err := client.WorkspaceBuild(ctx, b.ID)
		return nb.Job, err
	}, inv.printLog(), inv.printPending, 0)
	if err != nil {
		return fmt.Errorf("%s workspace %s: %w", b.Transition, b.WorkspaceName, err)
	}
	return nil
}

// createOptions add the CODER_* variables of create's flags.
var createOptions = append(options{{flag: "template", env: "CODER_TEMPLATE_NAME"},
	{flag: "stop-after", env: "CODER_WORKSPACE_STOP_AFTER"}, {flag: "start-at", env: "CODER_WORKSPACE_START_AT"}}, parameterOptions...)

func (inv *invocation) createCmd() *cobra.Command {
	var template, stopAfter, startAt string
	var pf parameterFlags
	var yes bool
	cmd := &cobra.Command{
		Use:   "create NAME",
		Short: "Create a workspace from a template and build it",
		Long: `Create a workspace from a template's active version and build it.

Parameter values come from --parameter, then --rich-parameter-file. On a
terminal, coder create asks for every other parameter (showing its default in
brackets); -y takes the defaults instead. Without a terminal, a required
parameter without a value is an error that names it.`,
		Args: exactArgs(1, "NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := createOptions.resolve(cmd, "", inv.environ); err != nil {
				return err
			}
			if template == "" {
				return usageErrorf("--template is required")
			}
			ttl, autostart, err := createSchedule(stopAfter, startAt, defaultZone(inv.environ)) // schedule.go
			if err != nil {
				return err
			}
			values, err := pf.parse()
			if err != nil {
				return err
			}
			client, err := inv.client()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			t, err := inv.waitForTemplate(ctx, client, template)
			if err != nil {
				return err
			}
			v, err := client.TemplateVersion(ctx, t.ActiveVersionID)
			if err != nil {
				return err
			}
			ask := inv.interactive()
			params, err := parameterPlan{
				action: actionCreate, params: v.Parameters, values: values,
				promptEphemeral: pf.promptEphemeral, useDefaults: yes,
			}.resolve(ask)
			if err != nil {
				return err
			}
			if ask != nil && !yes {
				ok, err := ask.confirm("Confirm create?")
				if err != nil || !ok {
					return fmt.Errorf("workspace %s not created: answer yes, or pass -y", args[0])
				}
			}
			// The version the values were chosen for, not whatever is
			// active by the time coderd reads the request.
			w, err := client.CreateWorkspace(ctx, codersdk.Me, codersdk.CreateWorkspaceRequest{
				TemplateVersionID: v.ID, Name: args[0], RichParameterValues: params,
				TTLMillis: ttl, AutostartSchedule: autostart,
			})
			if err != nil {
				return inv.explainRefusal("create workspace "+args[0], err, v.Parameters)
			}
			if err := inv.followBuild(ctx, client, w.LatestBuild); err != nil {
				return err
			}
			fmt.Fprintf(inv.stdout, "Workspace %s created and running.\n", w.Name)
			return nil
		},
	}
	cmd.Flags().StringVarP(&template, "template", "t", "", "Template name (CODER_TEMPLATE_NAME)")
	pf.register(cmd.Flags(), false)
	cmd.Flags().StringVar(&stopAfter, "stop-after", "", "Stop the workspace this long after it starts or was last used, e.g. 8h (CODER_WORKSPACE_STOP_AFTER)")
	cmd.Flags().StringVar(&startAt, "start-at", "", `Start the workspace on a schedule, e.g. "09:00 Mon-Fri Europe/Berlin" (CODER_WORKSPACE_START_AT)`)
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "Take parameter defaults and skip the confirmation")
	return cmd
}

// templateImportWait bounds how long coder create waits for a template the
// deployment is still importing on first boot.
const templateImportWait = 2 * time.Minute

// waitForTemplate returns the template named name. When there is none yet
// but the deployment says it is still importing its first-boot templates
// (the appliance pushes its bundled ones just after the first user is
// created), it says so on one line and waits, up to templateImportWait, for
// the template to appear or the import to end: commands pasted right after
// `coder login --first-user-...` work.
func (inv *invocation) waitForTemplate(ctx context.Context, client *codersdk.Client, name string) (codersdk.Template, error) {
	deadline := time.Now().Add(templateImportWait)
	said := false
	for {
		t, err := client.TemplateByName(ctx, "default", name)
		if !codersdk.IsStatus(err, http.StatusNotFound) {
			return t, err
		}
		info, err := client.BuildInfo(ctx)
		if err != nil {
			return t, err
		}
		if !info.TemplatesImporting {
			// The import may have ended between the two calls.
			if t, err = client.TemplateByName(ctx, "default", name); !codersdk.IsStatus(err, http.StatusNotFound) {
				return t, err
			}
			return t, fmt.Errorf("no template %q: see `coder templates list`", name)
		}
		if time.Now().After(deadline) {
			return t, fmt.Errorf("no template %q after waiting %s for the appliance's template import: see `coder templates list`", name, templateImportWait)
		}
		if !said {
			fmt.Fprintf(inv.stderr, "Waiting for template %s: the appliance is still importing it.\n", name)
			said = true
		}
		select {
		case <-ctx.Done():
			return t, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// updateOptions add the CODER_* variables of update's flags.
var updateOptions = parameterOptions

func (inv *invocation) updateCmd() *cobra.Command {
	var pf parameterFlags
	var yes bool
	cmd := &cobra.Command{
		Use:   "update NAME",
		Short: "Build a workspace with its template's active version and new parameter values",
		Long: `Start a workspace with its template's active version, changing the parameter
values given with --parameter or --rich-parameter-file; the others keep their
current values.

On a terminal, coder update asks for parameters that are new in the active
version, required ones without a value, and with --always-prompt every
mutable one; -y takes the defaults instead. coderd refuses a new value for an
immutable parameter. A workspace that is up to date is left alone unless
values are given.`,
		Args: exactArgs(1, "NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := updateOptions.resolve(cmd, "", inv.environ); err != nil {
				return err
			}
			values, err := pf.parse()
			if err != nil {
				return err
			}
			client, w, err := inv.workspaceArg(cmd, args[0])
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			latest := w.LatestBuild
			if !w.Outdated && latest.TemplateVersionID == w.TemplateActiveVersionID && !pf.any() {
				fmt.Fprintf(inv.stdout, "Workspace %s is up to date (version %s).\n", w.Name, latest.TemplateVersionName)
				return nil
			}
			plan, v, err := updatePlan(ctx, client, w)
			if err != nil {
				return err
			}
			plan.values, plan.useDefaults = values, yes
			plan.promptEphemeral, plan.alwaysPrompt = pf.promptEphemeral, pf.alwaysPrompt
			params, err := plan.resolve(inv.interactive())
			if err != nil {
				return err
			}
			b, err := client.CreateWorkspaceBuild(ctx, w.ID, codersdk.CreateWorkspaceBuildRequest{
				TemplateVersionID: v.ID, Transition: codersdk.WorkspaceTransitionStart, RichParameterValues: params,
			})
			if err != nil {
				return inv.explainRefusal("update workspace "+w.Name, err, v.Parameters)
			}
			if err := inv.followBuild(ctx, client, b); err != nil {
				return err
			}
			fmt.Fprintf(inv.stdout, "Workspace %s updated to version %s and running.\n", w.Name, v.Name)
			return nil
		},
	}
	pf.register(cmd.Flags(), true)
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "Take parameter defaults instead of asking")
	return cmd
}

// updatePlan loads what an update of w decides its values from: the
// template's active version (returned), the values of w's latest build and
// the parameters its version declared.
func updatePlan(ctx context.Context, client *codersdk.Client, w codersdk.Workspace) (parameterPlan, codersdk.TemplateVersion, error) {
	plan := parameterPlan{action: actionUpdate, previous: map[string]string{}, previousDeclared: map[string]bool{}}
	active := w.TemplateActiveVersionID
	if active == "" {
		t, err := client.Template(ctx, w.TemplateID)
		if err != nil {
			return plan, codersdk.TemplateVersion{}, err
		}
		active = t.ActiveVersionID
	}
	v, err := client.TemplateVersion(ctx, active)
	if err != nil {
		return plan, v, err
	}
	plan.params = v.Parameters
	prevVersion := v
	if w.LatestBuild.TemplateVersionID != v.ID {
		if prevVersion, err = client.TemplateVersion(ctx, w.LatestBuild.TemplateVersionID); err != nil {
			return plan, v, err
		}
	}
	for _, p := range prevVersion.Parameters {
		plan.previousDeclared[p.Name] = true
	}
	// The build itself carries its values (a workspace's latest build may
	// come without them).
	latest, err := client.WorkspaceBuild(ctx, w.LatestBuild.ID)
	if err != nil {
		return plan, v, err
	}
	for _, p := range latest.RichParameterValues {
		plan.previous[p.Name] = p.Value
	}
	return plan, v, nil
}

func (inv *invocation) transitionCmd(use string, transition codersdk.WorkspaceTransition) *cobra.Command {
	var yes bool
	done := map[codersdk.WorkspaceTransition]string{
		codersdk.WorkspaceTransitionStart: "started", codersdk.WorkspaceTransitionStop: "stopped", codersdk.WorkspaceTransitionDelete: "deleted",
	}[transition]
	cmd := &cobra.Command{
		Use:   use + " NAME",
		Short: fmt.Sprintf("Build a workspace's %s transition", transition),
		Args:  exactArgs(1, "NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			client, w, err := inv.workspaceArg(cmd, args[0])
			if err != nil {
				return err
			}
			if _, err := inv.build(cmd.Context(), client, w, codersdk.CreateWorkspaceBuildRequest{Transition: transition}); err != nil {
				return err
			}
			fmt.Fprintf(inv.stdout, "Workspace %s %s.\n", w.Name, done)
			return nil
		},
	}
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "Skip confirmation prompts")
	return cmd
}

func agentSummary(b codersdk.WorkspaceBuild) string {
	var parts []string
	for _, r := range b.Resources {
		for _, a := range r.Agents {
			parts = append(parts, fmt.Sprintf("%s:%s", a.Name, a.Status))
		}
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ",")
}

func (inv *invocation) listCmd() *cobra.Command {
	var all bool
	cmd := &cobra.Command{Use: "list", Aliases: []string{"ls"}, Short: "List workspaces with their latest build and agent status"}
	out := outputFlag(cmd)
	allFlag(cmd, &all)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		ws, err := inv.listWorkspaces(cmd.Context(), all)
		if err != nil {
			return err
		}
		now := time.Now()
		return renderList(inv.stdout, *out, ws, []string{"WORKSPACE", "TEMPLATE", "STATUS", "LAST BUILT", "AGENTS", "STARTS AT", "STOPS AFTER", "STOPS AT"}, func(w codersdk.Workspace) []string {
			s := scheduleOf(w, now) // schedule.go
			return []string{w.OwnerName + "/" + w.Name, w.TemplateName, string(w.LatestBuild.Status), ago(w.LatestBuild.CreatedAt), agentSummary(w.LatestBuild),
				s.StartsAt, s.StopsAfter, timeOr(s.StopsNext, "-")}
		})
	}
	return cmd
}

func (inv *invocation) showCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "show NAME",
		Short: "Show a workspace: its build, resources, agents and parameter values",
		Args:  exactArgs(1, "NAME"),
	}
	out := outputFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		client, w, err := inv.workspaceArg(cmd, args[0])
		if err != nil {
			return err
		}
		if *out == "json" {
			return render(inv.stdout, "json", w, nil, nil)
		}
		if len(w.LatestBuild.RichParameterValues) == 0 {
			// A workspace's latest build may come without its values;
			// the build itself has them.
			b, err := client.WorkspaceBuild(cmd.Context(), w.LatestBuild.ID)
			if err != nil {
				return err
			}
			w.LatestBuild.RichParameterValues = b.RichParameterValues
		}
		writeWorkspace(inv.stdout, w, time.Now())
		return inv.printAgentDetails(cmd.Context(), client, w)
	}
	return cmd
}

// sensitiveValue stands for a value coderd does not hand out.
const sensitiveValue = "*****"

// writeWorkspace prints a workspace for people: its latest build, each
// resource with its metadata and agents (status, lifecycle, scripts,
// metadata values), and the build's parameter values.
func writeWorkspace(out io.Writer, w codersdk.Workspace, now time.Time) {
	b := w.LatestBuild
	fmt.Fprintf(out, "Workspace %s/%s (template %s, version %s)\n", w.OwnerName, w.Name, w.TemplateName, b.TemplateVersionName)
	if w.Outdated {
		fmt.Fprintf(out, "Outdated: the template has a newer active version; `coder update %s` builds with it\n", w.Name)
	}
	fmt.Fprintf(out, "Status: %s (build #%d, %s, %s)\n", b.Status, b.BuildNumber, b.Transition, agoFrom(now, b.CreatedAt))
	if line := describeDormancy(w); line != "" { // templateedit.go
		fmt.Fprintln(out, line)
	}
	if line := describeSchedule(w, now); line != "" { // schedule.go
		fmt.Fprintln(out, line)
	}
	if msg := describePending(b.Job); msg != "" {
		fmt.Fprintf(out, "Pending: %s\n", msg)
	}
	if b.Job.Error != "" {
		fmt.Fprintf(out, "Error: %s\n", b.Job.Error)
	}
	if len(b.Resources) > 0 {
		fmt.Fprintln(out, "\nResources:")
	}
	for _, r := range b.Resources {
		if r.Hide && len(r.Agents) == 0 {
			continue
		}
		line := "  " + r.Type + "." + r.Name
		if r.DailyCost > 0 {
			line += fmt.Sprintf(" (daily cost %d)", r.DailyCost)
		}
		fmt.Fprintln(out, line)
		for _, m := range r.Metadata {
			v := oneLineValue(m.Value)
			if m.Sensitive {
				v = sensitiveValue
			}
			fmt.Fprintf(out, "    %s: %s\n", m.Key, v)
		}
		for _, a := range r.Agents {
			writeAgent(out, a, now)
		}
	}
	if len(b.RichParameterValues) > 0 {
		fmt.Fprintln(out, "\nParameters:")
		for _, p := range b.RichParameterValues {
			fmt.Fprintf(out, "  %s: %s\n", p.Name, oneLineValue(p.Value))
		}
	}
}

// writeAgent prints an agent's line and, under it, its scripts and
// metadata values.
func writeAgent(out io.Writer, a codersdk.WorkspaceAgent, now time.Time) {
	fmt.Fprintf(out, "    agent %s: %s, %s", a.Name, a.Status, a.LifecycleState)
	if a.OperatingSystem != "" {
		fmt.Fprintf(out, " (%s/%s)", a.OperatingSystem, a.Architecture)
	}
	fmt.Fprintln(out)
	if len(a.Scripts) > 0 {
		scripts := make([]string, len(a.Scripts))
		for i, s := range a.Scripts {
			scripts[i] = describeScript(s)
		}
		fmt.Fprintf(out, "      scripts: %s\n", strings.Join(scripts, ", "))
	}
	for _, m := range a.Metadata {
		name := m.Description.DisplayName
		if name == "" {
			name = m.Description.Key
		}
		res := m.Result
		v := oneLineValue(res.Value)
		switch {
		case res.Error != "":
			v = "error: " + oneLineValue(res.Error)
		case res.CollectedAt.IsZero():
			v = "(no value yet)"
		}
		if !res.CollectedAt.IsZero() {
			age := time.Duration(res.Age) * time.Second
			if res.Age == 0 {
				age = now.Sub(res.CollectedAt)
			}
			v += fmt.Sprintf(" (%s ago)", max(age, 0).Round(time.Second))
		}
		fmt.Fprintf(out, "      %s: %s\n", name, v)
	}
}

// describeScript names a script and when it runs.
func describeScript(s codersdk.AgentScript) string {
	var when []string
	if s.RunOnStart {
		when = append(when, "on start")
	}
	if s.StartBlocksLogin {
		when = append(when, "blocks login")
	}
	if s.RunOnStop {
		when = append(when, "on stop")
	}
	if s.Cron != "" {
		when = append(when, fmt.Sprintf("cron %q", s.Cron))
	}
	name := s.DisplayName
	if name == "" {
		name = s.LogSourceID
	}
	if len(when) == 0 {
		return name
	}
	return fmt.Sprintf("%s (%s)", name, strings.Join(when, ", "))
}

// oneLineValue keeps a multi-line value on one line.
func oneLineValue(s string) string {
	return strings.TrimSpace(strings.NewReplacer("\r\n", " ", "\n", " ", "\r", " ").Replace(s))
}

// allFlag declares --all on a command that lists workspaces (list,
// schedule show, dormant list).
func allFlag(cmd *cobra.Command, all *bool) {
	cmd.Flags().BoolVarP(all, "all", "a", false, "Every workspace you may see, not only yours")
}

// listWorkspaces lists the caller's workspaces, or with all (--all) every
// workspace the caller may see.
func (inv *invocation) listWorkspaces(ctx context.Context, all bool) ([]codersdk.Workspace, error) {
	client, err := inv.client()
	if err != nil {
		return nil, err
	}
	f := codersdk.WorkspaceFilter{Owner: codersdk.Me}
	if all {
		f.Owner = ""
	}
	resp, err := client.Workspaces(ctx, f)
	if err != nil {
		return nil, fmt.Errorf("list workspaces: %w", err)
	}
	return resp.Workspaces, nil
}
