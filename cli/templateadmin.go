package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"airgapcoder/codersdk"
	"airgapcoder/internal/templatetar"
)

// The template commands admins script besides create, push and list: pull,
// delete and archive, as Coder's.

func (inv *invocation) templatePullCmd() *cobra.Command {
	var tarMode bool
	var version string
	cmd := &cobra.Command{
		Use:   "pull NAME [DIR]",
		Short: "Download the source of a template's active (or another) version into a folder",
		Long: `Download the source of a template version into DIR (default: NAME), a folder
that must be new or empty: nothing in it is overwritten. A new folder appears
only once the whole template is unpacked.

--version picks the version: active (the default), latest (the newest
uploaded) or a version's name. --tar writes the tar itself to stdout instead.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) < 1 || len(args) > 2 {
				return usageErrorf("%s needs NAME and optionally DIR (see --help)", cmd.CommandPath())
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if tarMode && len(args) == 2 {
				return usageErrorf("--tar writes to stdout: give no DIR")
			}
			client, t, err := inv.templateArg(cmd, args[0])
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			var v codersdk.TemplateVersion
			switch version {
			case "", "active":
				v, err = client.TemplateVersion(ctx, t.ActiveVersionID)
				if err == nil && version == "" {
					// As Coder: say so when a newer version than the active one exists.
					if vs, lerr := client.TemplateVersionsByTemplate(ctx, t.ID); lerr == nil && len(vs) > 0 && vs[0].ID != v.ID {
						fmt.Fprintf(inv.stderr, "A newer version (%s) than the active one exists; pulling the active version %s (--version latest pulls the newest).\n", vs[0].Name, v.Name)
					}
				}
			case "latest":
				var vs []codersdk.TemplateVersion
				if vs, err = client.TemplateVersionsByTemplate(ctx, t.ID); err == nil {
					if len(vs) == 0 {
						return fmt.Errorf("template %s has no versions", t.Name)
					}
					v = vs[0] // newest first
				}
			default:
				v, err = templateVersionByName(ctx, client, t, version)
			}
			if err != nil {
				return err
			}
			raw, err := client.Download(ctx, v.Job.FileID)
			if err != nil {
				return fmt.Errorf("download version %s of template %s: %w", v.Name, t.Name, err)
			}
			if tarMode {
				_, err = inv.stdout.Write(raw)
				return err
			}
			dir := t.Name
			if len(args) == 2 {
				dir = args[1]
			}
			fmt.Fprintf(inv.stderr, "Pulling version %s of template %s into %s...\n", v.Name, t.Name, dir)
			if err := extractNew(raw, dir); err != nil {
				return err
			}
			fmt.Fprintf(inv.stdout, "Template %s (version %s) is in %s.\n", t.Name, v.Name, dir)
			return nil
		},
	}
	cmd.Flags().BoolVar(&tarMode, "tar", false, "Write the template as a tar archive to stdout")
	cmd.Flags().StringVar(&version, "version", "", "The version to pull: active, latest or a version's name (default: active)")
	return cmd
}

// extractNew unpacks a template tar into dir. An existing dir must be
// empty (templatetar.Extract leaves it empty again on failure); a new one
// is unpacked beside it under a temporary name and renamed into place
// once complete.
func extractNew(tar []byte, dir string) error {
	st, err := os.Stat(dir)
	switch {
	case err == nil && !st.IsDir():
		return fmt.Errorf("%s exists and is not a folder: pull into a new or empty folder", dir)
	case err == nil:
		entries, err := os.ReadDir(dir)
		if err != nil {
			return err
		}
		if len(entries) > 0 {
			return fmt.Errorf("%s is not empty: pull into a new or empty folder, nothing was overwritten", dir)
		}
		return templatetar.Extract(bytes.NewReader(tar), dir, templatetar.DefaultMaxSize)
	case !errors.Is(err, fs.ErrNotExist):
		return err
	}
	parent := filepath.Dir(filepath.Clean(dir))
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(parent, "."+filepath.Base(dir)+".pull-")
	if err != nil {
		return err
	}
	if err := templatetar.Extract(bytes.NewReader(tar), tmp, templatetar.DefaultMaxSize); err != nil {
		_ = os.RemoveAll(tmp)
		return err
	}
	if err := os.Chmod(tmp, 0o755); err != nil { // MkdirTemp makes it 0700
		_ = os.RemoveAll(tmp)
		return err
	}
	if err := os.Rename(tmp, dir); err != nil {
		_ = os.RemoveAll(tmp)
		return err
	}
	return nil
}

func (inv *invocation) templatesDeleteCmd() *cobra.Command {
	var yes bool
	cmd := &cobra.Command{
		Use:   "delete NAME...",
		Short: "Delete templates that no workspace uses",
		Long: `Delete templates. coderd refuses a template that workspaces still use (delete
those first); the templates named before it are deleted.`,
		Args: minArgs(1, "at least one template NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return inv.eachTemplate(cmd, args, yes, "Delete", func(ctx context.Context, client *codersdk.Client, t codersdk.Template) error {
				if err := client.DeleteTemplate(ctx, t.ID); err != nil {
					return fmt.Errorf("delete template %s: %w", t.Name, err)
				}
				fmt.Fprintf(inv.stdout, "Template %s deleted.\n", t.Name)
				return nil
			})
		},
	}
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "Skip the confirmation prompt")
	return cmd
}

func (inv *invocation) templatesArchiveCmd() *cobra.Command {
	var all, yes bool
	cmd := &cobra.Command{
		Use:   "archive NAME...",
		Short: "Archive the unused versions of templates whose import failed (--all: every unused version)",
		Long: `Archive the unused versions of templates: those whose import failed, or with
--all every version that is not active and that no workspace's latest build
uses. Archived versions leave coder templates versions list (see
--include-archived); coder templates versions unarchive brings one back.`,
		Args: minArgs(1, "at least one template NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return inv.eachTemplate(cmd, args, yes, "Archive unused versions of", func(ctx context.Context, client *codersdk.Client, t codersdk.Template) error {
				resp, err := client.ArchiveTemplateVersions(ctx, t.ID, all)
				if err != nil {
					return fmt.Errorf("archive versions of template %s: %w", t.Name, err)
				}
				names, err := versionNames(cmd, client, t.ID, resp.ArchivedIDs)
				if err != nil {
					return err
				}
				line := fmt.Sprintf("Archived %d version(s) of template %s", len(resp.ArchivedIDs), t.Name)
				if len(names) > 0 {
					line += ": " + strings.Join(names, ", ")
				}
				fmt.Fprintln(inv.stdout, line+".")
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&all, "all", false, "Archive every unused version, not only failed ones")
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "Skip the confirmation prompt")
	return cmd
}

// eachTemplate is how delete and archive act on the templates they name:
// it looks every one up first (an unknown name changes nothing), asks
// "<doing> the templates NAME...?" unless yes, then calls do for each in
// order, stopping at the first error.
func (inv *invocation) eachTemplate(cmd *cobra.Command, names []string, yes bool, doing string, do func(context.Context, *codersdk.Client, codersdk.Template) error) error {
	client, err := inv.client()
	if err != nil {
		return err
	}
	ctx := cmd.Context()
	ts, err := templatesByName(ctx, client, names)
	if err != nil {
		return err
	}
	if err := inv.confirm(yes, fmt.Sprintf("%s the templates %s?", doing, strings.Join(names, ", "))); err != nil {
		return err
	}
	for _, t := range ts {
		if err := do(ctx, client, t); err != nil {
			return err
		}
	}
	return nil
}

// versionNames names the versions of a template with the given ids.
func versionNames(cmd *cobra.Command, client *codersdk.Client, templateID string, ids []string) ([]string, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	vs, err := client.TemplateVersionsIncludingArchived(cmd.Context(), templateID)
	if err != nil {
		return nil, err
	}
	byID := map[string]string{}
	for _, v := range vs {
		byID[v.ID] = v.Name
	}
	names := make([]string, 0, len(ids))
	for _, id := range ids {
		names = append(names, byID[id])
	}
	return names, nil
}
