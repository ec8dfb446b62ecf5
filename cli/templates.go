package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os"
	"slices"
	"time"

	"github.com/spf13/cobra"

	"airgapcoder/codersdk"
	"airgapcoder/internal/templatetar"
)

func (inv *invocation) templatesCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "templates", Aliases: []string{"template"}, Short: "Manage templates"}
	cmd.AddCommand(inv.templatePushCmd("create", true), inv.templatePushCmd("push", false), inv.templatesListCmd(),
		inv.templatesPermissionsCmd(), inv.templateVersionsCmd(), inv.templatePullCmd(), inv.templatesDeleteCmd(), inv.templatesArchiveCmd(),
		inv.templateEditCmd()) // templateedit.go
	return cmd
}

func (inv *invocation) templatePushCmd(use string, mustBeNew bool) *cobra.Command {
	var dir, name, message string
	var tags, variables, varAlias []string
	var variablesFile string
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
			vars, err := parseVariableValues(variablesFile, append(variables, varAlias...))
			if err != nil {
				return err
			}
			client, err := inv.client()
			if err != nil {
				return err
			}
			if err := checkAgainstAppliance(cmd.Context(), client, dir); err != nil {
				return inv.explainMissing(fmt.Errorf("template %s refused: %w", args[0], err))
			}
			var buf bytes.Buffer
			if err := templatetar.Pack(dir, &buf, templatetar.DefaultMaxSize); err != nil {
				return fmt.Errorf("pack %s: %w", dir, err)
			}
			fmt.Fprintf(inv.stderr, "Importing %s...\n", args[0])
			res, err := client.PushTemplate(cmd.Context(), codersdk.PushTemplateRequest{
				Name: args[0], Tar: &buf, VersionName: name, Message: message, Tags: tagMap, VariableValues: vars,
				MustBeNew: mustBeNew, Logs: inv.printLog(), Pending: inv.printPending,
			})
			if codersdk.IsStatus(err, http.StatusBadRequest) {
				return inv.explainRefusal("create template version", err, nil)
			}
			if errors.Is(err, codersdk.ErrTemplateExists) {
				return fmt.Errorf("template %q already exists: use `coder templates push %s`", args[0], args[0])
			}
			if err != nil {
				return err
			}
			if res.Created {
				fmt.Fprintf(inv.stdout, "Template %s created (version %s).\n", res.Template.Name, res.Version.Name)
				return nil
			}
			fmt.Fprintf(inv.stdout, "Template %s updated to version %s.\n", res.Template.Name, res.Version.Name)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVarP(&dir, "directory", "d", "", "Template folder")
	f.StringArrayVar(&tags, "provisioner-tag", nil, "Provisioner tag key=value the job needs (repeatable)")
	f.StringArrayVar(&variables, "variable", nil, `Value of a Terraform variable of the template, as "name=value" (repeatable)`)
	f.StringArrayVar(&varAlias, "var", nil, "Alias of --variable")
	f.StringVar(&variablesFile, "variables-file", "", "YAML file of Terraform variable values (name: value); --variable overrides it")
	f.StringVar(&name, "name", "", "Version name (default: generated)")
	f.StringVarP(&message, "message", "m", "", "Version message")
	f.BoolVarP(&yes, "yes", "y", false, "Skip confirmation prompts")
	return cmd
}

// parseVariableValues reads --variables-file and --variable (which wins),
// as Coder's CLI does; values of list, map or object variables are JSON.
func parseVariableValues(file string, flags []string) ([]codersdk.VariableValue, error) {
	values := map[string]string{}
	if file != "" {
		var err error
		if values, err = readValuesFile(file, true); err != nil {
			return nil, usageErrorf("--variables-file %s: %v", file, err)
		}
	}
	fromFlags, err := parseKeyValuesLastWins("variable", flags)
	if err != nil {
		return nil, err
	}
	maps.Copy(values, fromFlags)
	var out []codersdk.VariableValue
	for _, k := range slices.Sorted(maps.Keys(values)) {
		out = append(out, codersdk.VariableValue{Name: k, Value: values[k]})
	}
	return out, nil
}

func (inv *invocation) templatesListCmd() *cobra.Command {
	return listCommand(inv, &cobra.Command{Use: "list", Short: "List templates"},
		func(ctx context.Context, client *codersdk.Client) ([]codersdk.Template, error) {
			return client.Templates(ctx, "default")
		},
		[]string{"NAME", "ACTIVE VERSION", "CREATED BY", "UPDATED"},
		func(t codersdk.Template) []string {
			return []string{t.Name, t.ActiveVersionID, t.CreatedByName, t.UpdatedAt.Format(time.RFC3339)}
		})
}
