package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/spf13/cobra"

	"airgapcoder/coderd/codersdk"
	"airgapcoder/internal/templatetar"
)

func (inv *invocation) templatesCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "templates", Aliases: []string{"template"}, Short: "Manage templates"}
	cmd.AddCommand(inv.templatePushCmd("create", true), inv.templatePushCmd("push", false), inv.templatesListCmd())
	return cmd
}

func (inv *invocation) templatePushCmd(use string, mustBeNew bool) *cobra.Command {
	var dir, name, message string
	var tags []string
	var yes bool
	short := "Upload a new version of a template (creating the template if needed) and make it active"
	if mustBeNew {
		short = "Create a template from a folder"
	}
	cmd := &cobra.Command{
		Use:   use + " NAME",
		Short: short,
		Args:  exactArgs(1, "NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			tagMap, err := parseKeyValues("provisioner-tag", tags)
			if err != nil {
				return err
			}
			if dir == "" {
				return usageErrorf("--directory is required")
			}
			if st, err := os.Stat(dir); err != nil || !st.IsDir() {
				return usageErrorf("--directory %s is not a folder", dir)
			}
			client, err := inv.client()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			existing, err := client.TemplateByName(ctx, "default", args[0])
			switch {
			case err == nil && mustBeNew:
				return fmt.Errorf("template %q already exists: use `coder templates push %s`", args[0], args[0])
			case err != nil && !codersdk.IsStatus(err, http.StatusNotFound):
				return err
			}
			var buf bytes.Buffer
			if err := templatetar.Pack(dir, &buf, templatetar.DefaultMaxSize); err != nil {
				return fmt.Errorf("pack %s: %w", dir, err)
			}
			up, err := client.Upload(ctx, &buf)
			if err != nil {
				return fmt.Errorf("upload %s: %w", dir, err)
			}
			version, err := client.CreateTemplateVersion(ctx, "default", codersdk.CreateTemplateVersionRequest{
				Name: name, Message: message, TemplateID: existing.ID, StorageMethod: "file", FileID: up.ID, Provisioner: "terraform", Tags: tagMap,
			})
			if err != nil {
				return err
			}
			fmt.Fprintf(inv.stderr, "Importing template version %s...\n", version.Name)
			inv.explainPending(ctx, version.Job, func(ctx context.Context) (codersdk.ProvisionerJob, error) {
				v, err := client.TemplateVersion(ctx, version.ID)
				return v.Job, err
			})
			_, err = followJob(ctx, inv.stderr, func(ctx context.Context, after int64, follow bool, fn func(codersdk.ProvisionerJobLog) error) error {
				return client.TemplateVersionLogs(ctx, version.ID, after, follow, fn)
			}, func(ctx context.Context) (codersdk.ProvisionerJob, error) {
				v, err := client.TemplateVersion(ctx, version.ID)
				return v.Job, err
			})
			if err != nil {
				return fmt.Errorf("import template version %s: %w", version.Name, err)
			}
			if existing.ID == "" {
				t, err := client.CreateTemplate(ctx, "default", codersdk.CreateTemplateRequest{Name: args[0], TemplateVersionID: version.ID})
				if err != nil {
					return err
				}
				fmt.Fprintf(inv.stdout, "Template %s created (version %s).\n", t.Name, version.Name)
				return nil
			}
			if err := client.UpdateActiveTemplateVersion(ctx, existing.ID, codersdk.UpdateActiveTemplateVersion{ID: version.ID}); err != nil {
				return err
			}
			fmt.Fprintf(inv.stdout, "Template %s updated to version %s.\n", existing.Name, version.Name)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVarP(&dir, "directory", "d", "", "Template folder")
	f.StringArrayVar(&tags, "provisioner-tag", nil, "Provisioner tag key=value the job needs (repeatable)")
	f.StringVar(&name, "name", "", "Version name (default: generated)")
	f.StringVarP(&message, "message", "m", "", "Version message")
	f.BoolVarP(&yes, "yes", "y", false, "Skip confirmation prompts")
	return cmd
}

// explainPending prints, once, why a job is still waiting after a moment:
// most often no provisioner carries the tags it needs.
func (inv *invocation) explainPending(ctx context.Context, job codersdk.ProvisionerJob, refresh func(context.Context) (codersdk.ProvisionerJob, error)) {
	if job.Status != codersdk.ProvisionerJobPending {
		return
	}
	go func() {
		select {
		case <-ctx.Done():
			return
		case <-time.After(2 * time.Second):
		}
		j, err := refresh(ctx)
		if err == nil && j.Status == codersdk.ProvisionerJobPending {
			fmt.Fprintf(inv.stderr, "The job is pending: %s.\n", describePending(j))
		}
	}()
}

func (inv *invocation) templatesListCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "list", Short: "List templates"}
	out := outputFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		client, err := inv.client()
		if err != nil {
			return err
		}
		ts, err := client.Templates(cmd.Context(), "default")
		if err != nil {
			return err
		}
		return render(inv.stdout, *out, ts, []string{"NAME", "ACTIVE VERSION", "CREATED BY", "UPDATED"}, func() [][]string {
			rows := [][]string{}
			for _, t := range ts {
				rows = append(rows, []string{t.Name, t.ActiveVersionID, t.CreatedByName, t.UpdatedAt.Format(time.RFC3339)})
			}
			return rows
		})
	}
	return cmd
}

var errNoWorkspace = errors.New("no such workspace")
