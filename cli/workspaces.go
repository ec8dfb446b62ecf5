package cli

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/spf13/cobra"

	"airgapcoder/coderd/codersdk"
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

func (inv *invocation) createCmd() *cobra.Command {
	var template string
	var params []string
	var yes bool
	cmd := &cobra.Command{
		Use:   "create NAME",
		Short: "Create a workspace from a template and build it",
		Args:  exactArgs(1, "NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if template == "" {
				return usageErrorf("--template is required")
			}
			pm, err := parseKeyValues("parameter", params)
			if err != nil {
				return err
			}
			client, err := inv.client()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			t, err := client.TemplateByName(ctx, "default", template)
			if codersdk.IsStatus(err, http.StatusNotFound) {
				return fmt.Errorf("no template %q: see `coder templates list`", template)
			}
			if err != nil {
				return err
			}
			req := codersdk.CreateWorkspaceRequest{TemplateID: t.ID, Name: args[0]}
			for _, k := range sortedKeys(pm) {
				req.RichParameterValues = append(req.RichParameterValues, codersdk.WorkspaceBuildParameter{Name: k, Value: pm[k]})
			}
			w, err := client.CreateWorkspace(ctx, codersdk.Me, req)
			if err != nil {
				return err
			}
			if err := inv.followBuild(ctx, client, w.LatestBuild); err != nil {
				return err
			}
			fmt.Fprintf(inv.stdout, "Workspace %s created and running.\n", w.Name)
			return nil
		},
	}
	cmd.Flags().StringVarP(&template, "template", "t", "", "Template name")
	cmd.Flags().StringArrayVar(&params, "parameter", nil, "Template parameter key=value (repeatable)")
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "Skip confirmation prompts")
	return cmd
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
			client, err := inv.client()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			w, err := workspaceByName(ctx, client, args[0])
			if err != nil {
				return err
			}
			b, err := client.CreateWorkspaceBuild(ctx, w.ID, codersdk.CreateWorkspaceBuildRequest{Transition: transition})
			if err != nil {
				return err
			}
			if err := inv.followBuild(ctx, client, b); err != nil {
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
	cmd.Flags().BoolVarP(&all, "all", "a", false, "Every workspace you may see, not only yours")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		client, err := inv.client()
		if err != nil {
			return err
		}
		f := codersdk.WorkspaceFilter{Owner: codersdk.Me}
		if all {
			f.Owner = ""
		}
		resp, err := client.Workspaces(cmd.Context(), f)
		if err != nil {
			return err
		}
		return render(inv.stdout, *out, resp.Workspaces, []string{"WORKSPACE", "TEMPLATE", "STATUS", "LAST BUILT", "AGENTS"}, func() [][]string {
			rows := [][]string{}
			for _, w := range resp.Workspaces {
				rows = append(rows, []string{w.OwnerName + "/" + w.Name, w.TemplateName, string(w.LatestBuild.Status), ago(w.LatestBuild.CreatedAt), agentSummary(w.LatestBuild)})
			}
			return rows
		})
	}
	return cmd
}

func (inv *invocation) showCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "show NAME", Short: "Show a workspace: status, resources and agents", Args: exactArgs(1, "NAME")}
	out := outputFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		client, err := inv.client()
		if err != nil {
			return err
		}
		w, err := workspaceByName(cmd.Context(), client, args[0])
		if err != nil {
			return err
		}
		if *out == "json" {
			return render(inv.stdout, "json", w, nil, nil)
		}
		if *out != "table" && *out != "" {
			return usageErrorf("unknown --output %q: use table or json", *out)
		}
		b := w.LatestBuild
		fmt.Fprintf(inv.stdout, "Workspace %s/%s (template %s)\n", w.OwnerName, w.Name, w.TemplateName)
		fmt.Fprintf(inv.stdout, "Status: %s (build #%d, %s)\n", b.Status, b.BuildNumber, b.Transition)
		if msg := describePending(b.Job); msg != "" {
			fmt.Fprintf(inv.stdout, "Pending: %s\n", msg)
		}
		if b.Job.Error != "" {
			fmt.Fprintf(inv.stdout, "Error: %s\n", b.Job.Error)
		}
		err = render(inv.stdout, "table", nil, []string{"RESOURCE", "AGENT", "STATUS", "LIFECYCLE", "OS/ARCH"}, func() [][]string {
			rows := [][]string{}
			for _, r := range b.Resources {
				if len(r.Agents) == 0 {
					rows = append(rows, []string{r.Type + "." + r.Name, "-", "-", "-", "-"})
				}
				for _, a := range r.Agents {
					rows = append(rows, []string{r.Type + "." + r.Name, a.Name, a.Status, a.LifecycleState, a.OperatingSystem + "/" + a.Architecture})
				}
			}
			return rows
		})
		if err != nil {
			return err
		}
		return inv.printAgentDetails(cmd.Context(), client, w)
	}
	return cmd
}
