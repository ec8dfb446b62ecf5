package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"airgapcoder/codersdk"
)

// outputFlag adds -o/--output (table or json) to cmd and returns where its
// value lands. An empty value prints the table, as render does.
func outputFlag(cmd *cobra.Command) *string {
	var o string
	formatFlag(cmd, &o, "table", "json")
	checkFormat := cmd.PreRunE
	cmd.PreRunE = func(cmd *cobra.Command, args []string) error {
		if o == "" {
			return nil
		}
		return checkFormat(cmd, args)
	}
	return &o
}

// formatFlag adds -o/--output to cmd, landing in p: one of formats, the
// first of them the default. Any other value is a usage error before the
// command runs, so that it is not hidden behind work that fails for another
// reason (exit code 1).
func formatFlag(cmd *cobra.Command, p *string, formats ...string) {
	choices := orList(formats)
	cmd.Flags().StringVarP(p, "output", "o", formats[0], "Output format: "+choices)
	cmd.PreRunE = func(*cobra.Command, []string) error {
		if !slices.Contains(formats, *p) {
			return usageErrorf("unknown --output %q: use %s", *p, choices)
		}
		return nil
	}
}

// orList joins words as prose does: "a or b", "a, b or c".
func orList(words []string) string {
	if len(words) < 2 {
		return strings.Join(words, "")
	}
	return strings.Join(words[:len(words)-1], ", ") + " or " + words[len(words)-1]
}

// writeJSON prints v as indented JSON, the way every -o json does.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// render prints v as JSON, or as the table rows gives.
func render(w io.Writer, format string, v any, header []string, rows func() [][]string) error {
	switch format {
	case "json":
		return writeJSON(w, v)
	case "table", "":
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, strings.Join(header, "\t"))
		for _, r := range rows() {
			fmt.Fprintln(tw, strings.Join(r, "\t"))
		}
		return tw.Flush()
	}
	return usageErrorf("unknown --output %q: use table or json", format)
}

// renderList prints a list: as JSON the items themselves, as a table the
// header and one row an item.
func renderList[T any](w io.Writer, format string, items []T, header []string, row func(T) []string) error {
	return render(w, format, items, header, func() [][]string {
		rows := make([][]string, 0, len(items))
		for _, it := range items {
			rows = append(rows, row(it))
		}
		return rows
	})
}

// listCommand makes cmd a command that lists things: -o table or json, and
// a run that fetches the items with the signed-in client and prints them
// with renderList.
func listCommand[T any](inv *invocation, cmd *cobra.Command, fetch func(context.Context, *codersdk.Client) ([]T, error), header []string, row func(T) []string) *cobra.Command {
	out := outputFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		client, err := inv.client()
		if err != nil {
			return err
		}
		items, err := fetch(cmd.Context(), client)
		if err != nil {
			return err
		}
		return renderList(inv.stdout, *out, items, header, row)
	}
	return cmd
}

func ago(t time.Time) string { return agoFrom(time.Now(), t) }

// agoFrom says how long before now t was ("never" for the zero time).
func agoFrom(now, t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	d := now.Sub(t).Round(time.Second)
	return d.String() + " ago"
}

// printLog returns a printer of job log lines that heads each stage.
func (inv *invocation) printLog() func(codersdk.ProvisionerJobLog) {
	stage := ""
	return func(l codersdk.ProvisionerJobLog) {
		if l.Stage != "" && l.Stage != stage {
			stage = l.Stage
			fmt.Fprintf(inv.stderr, "==> %s\n", stage)
		}
		fmt.Fprintf(inv.stderr, "    %s\n", l.Output)
	}
}

// printPending says why a job has not started yet.
func (inv *invocation) printPending(j codersdk.ProvisionerJob) {
	fmt.Fprintf(inv.stderr, "The job is pending: %s.\n", describePending(j))
}

// describePending explains why a job has not started.
func describePending(j codersdk.ProvisionerJob) string {
	if j.Status != codersdk.ProvisionerJobPending {
		return ""
	}
	if m := j.MatchedProvisioners; m != nil {
		if m.Count == 0 {
			return fmt.Sprintf("no provisioner matches the tags %s: start one with `coder provisionerd start%s`", tagString(j.Tags), tagFlags(j.Tags))
		}
		if m.Available == 0 {
			return fmt.Sprintf("%d provisioner(s) match the tags %s but none has been seen recently", m.Count, tagString(j.Tags))
		}
	}
	return fmt.Sprintf("waiting for a provisioner (queue position %d of %d)", j.QueuePosition, j.QueueSize)
}

func tagString(tags map[string]string) string {
	parts := []string{}
	for _, k := range slices.Sorted(maps.Keys(tags)) {
		parts = append(parts, k+"="+tags[k])
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

func tagFlags(tags map[string]string) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(tags)) {
		if k == codersdk.TagScope && tags[k] == codersdk.ProvisionerScopeOrg {
			continue
		}
		fmt.Fprintf(&b, " --tag %s=%s", k, tags[k])
	}
	return b.String()
}
