package cli

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"airgapcoder/codersdk"
)

// templateByName returns the template named name, or an error that says
// where to look.
func templateByName(ctx context.Context, client *codersdk.Client, name string) (codersdk.Template, error) {
	t, err := client.TemplateByName(ctx, "default", url.PathEscape(name))
	if codersdk.IsStatus(err, http.StatusNotFound) {
		return t, fmt.Errorf("no template %q: see `coder templates list`", name)
	}
	return t, err
}

// templateArg is the client and the template a command's NAME argument
// names.
func (inv *invocation) templateArg(cmd *cobra.Command, name string) (*codersdk.Client, codersdk.Template, error) {
	client, err := inv.client()
	if err != nil {
		return nil, codersdk.Template{}, err
	}
	t, err := templateByName(cmd.Context(), client, name)
	return client, t, err
}

// templatesByName looks up each named template, in order.
func templatesByName(ctx context.Context, client *codersdk.Client, names []string) ([]codersdk.Template, error) {
	ts := make([]codersdk.Template, 0, len(names))
	for _, name := range names {
		t, err := templateByName(ctx, client, name)
		if err != nil {
			return nil, err
		}
		ts = append(ts, t)
	}
	return ts, nil
}

// templateVersionByName finds a version of t by name, archived ones
// included.
func templateVersionByName(ctx context.Context, client *codersdk.Client, t codersdk.Template, name string) (codersdk.TemplateVersion, error) {
	vs, err := client.TemplateVersionsIncludingArchived(ctx, t.ID)
	if err != nil {
		return codersdk.TemplateVersion{}, err
	}
	for _, v := range vs {
		if v.Name == name {
			return v, nil
		}
	}
	return codersdk.TemplateVersion{}, fmt.Errorf("template %s has no version %q: see `coder templates versions list %s`", t.Name, name, t.Name)
}

func (inv *invocation) templateVersionsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "versions",
		Aliases: []string{"version"},
		Short:   "Manage the versions of a template",
		Long: `Manage the versions of a template: list them, promote one to active, archive
versions nobody uses (they leave the list) and unarchive them.

  coder templates versions list my-template`,
	}
	cmd.AddCommand(inv.templateVersionsListCmd(), inv.templateVersionsPromoteCmd(),
		inv.templateVersionsArchiveCmd(true), inv.templateVersionsArchiveCmd(false))
	return cmd
}

// templateVersionRow is a version as `templates versions list -o json`
// prints it: the API's version with whether it is active.
type templateVersionRow struct {
	codersdk.TemplateVersion
	Active bool `json:"active"`
}

func (inv *invocation) templateVersionsListCmd() *cobra.Command {
	var includeArchived bool
	cmd := &cobra.Command{
		Use:   "list TEMPLATE",
		Short: "List the versions of a template, newest first",
		Args:  exactArgs(1, "TEMPLATE"),
	}
	out := outputFlag(cmd)
	cmd.Flags().BoolVar(&includeArchived, "include-archived", false, "Include archived versions (an ARCHIVED column says which)")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		client, t, err := inv.templateArg(cmd, args[0])
		if err != nil {
			return err
		}
		ctx := cmd.Context()
		list := client.TemplateVersionsByTemplate
		if includeArchived {
			list = client.TemplateVersionsIncludingArchived
		}
		vs, err := list(ctx, t.ID)
		if err != nil {
			return err
		}
		rows := []templateVersionRow{}
		for _, v := range vs {
			rows = append(rows, templateVersionRow{TemplateVersion: v, Active: v.ID == t.ActiveVersionID})
		}
		header := []string{"NAME", "CREATED AT", "CREATED BY", "STATUS", "ACTIVE"}
		if includeArchived {
			header = append(header, "ARCHIVED")
		}
		return renderList(inv.stdout, *out, rows, header, func(r templateVersionRow) []string {
			row := []string{r.Name, r.CreatedAt.Format(time.RFC3339), r.CreatedBy.Username, titleCase(string(r.Job.Status)), flagWord(r.Active, "Active")}
			if includeArchived {
				row = append(row, flagWord(r.Archived, "Archived"))
			}
			return row
		})
	}
	return cmd
}

// flagWord is word when set, else "-" (a table cell is never empty).
func flagWord(set bool, word string) string {
	if set {
		return word
	}
	return "-"
}

func titleCase(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// templateVersionsPromoteOptions map promote's flags to Coder's variables.
var templateVersionsPromoteOptions = options{
	{flag: "template", env: "CODER_TEMPLATE_NAME"},
	{flag: "template-version", env: "CODER_TEMPLATE_VERSION_NAME"},
}

func (inv *invocation) templateVersionsPromoteCmd() *cobra.Command {
	var template, version string
	cmd := &cobra.Command{
		Use:   "promote --template TEMPLATE --template-version VERSION",
		Short: "Make a version of a template its active version",
		Long: `Make an existing version of a template its active version: new workspaces are
built with it, and coder update moves existing ones to it. The version must
have been imported successfully.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := templateVersionsPromoteOptions.resolve(cmd, "", inv.environ); err != nil {
				return err
			}
			if template == "" || version == "" {
				return usageErrorf("--template and --template-version are required")
			}
			client, t, err := inv.templateArg(cmd, template)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			v, err := templateVersionByName(ctx, client, t, version)
			if err != nil {
				return err
			}
			if err := client.UpdateActiveTemplateVersion(ctx, t.ID, codersdk.UpdateActiveTemplateVersion{ID: v.ID}); err != nil {
				return fmt.Errorf("promote version %s of template %s: %w", v.Name, t.Name, err)
			}
			fmt.Fprintf(inv.stdout, "Successfully promoted version %q to active for template %q\n", v.Name, t.Name)
			return nil
		},
	}
	cmd.Flags().StringVarP(&template, "template", "t", "", "Template name (CODER_TEMPLATE_NAME)")
	cmd.Flags().StringVar(&version, "template-version", "", "Name of the version to promote (CODER_TEMPLATE_VERSION_NAME)")
	return cmd
}

// templateVersionsArchiveCmd is `templates versions archive|unarchive
// TEMPLATE VERSION...`.
func (inv *invocation) templateVersionsArchiveCmd(archive bool) *cobra.Command {
	verb, done := "unarchive", "unarchived"
	short := "Unarchive versions of a template: they are listed again"
	if archive {
		verb, done = "archive", "archived"
		short = "Archive versions of a template: they leave the version list"
	}
	return &cobra.Command{
		Use:   verb + " TEMPLATE VERSION...",
		Short: short,
		Long: short + `.
The active version and versions a workspace's latest build uses cannot be
archived; coder templates archive archives every unused version at once.`,
		Args: minArgs(2, "a TEMPLATE and at least one VERSION"),
		RunE: func(cmd *cobra.Command, args []string) error {
			client, t, err := inv.templateArg(cmd, args[0])
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			var versions []codersdk.TemplateVersion
			for _, name := range args[1:] {
				v, err := templateVersionByName(ctx, client, t, name)
				if err != nil {
					return err
				}
				versions = append(versions, v)
			}
			for _, v := range versions {
				if err := client.SetArchiveTemplateVersion(ctx, v.ID, archive); err != nil {
					return fmt.Errorf("%s version %s of template %s: %w", verb, v.Name, t.Name, err)
				}
				fmt.Fprintf(inv.stdout, "Version %s %s.\n", v.Name, done)
			}
			return nil
		},
	}
}
