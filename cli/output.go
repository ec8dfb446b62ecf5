package cli

import (
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

// outputFlag adds -o/--output to cmd and returns where its value lands.
func outputFlag(cmd *cobra.Command) *string {
	var o string
	cmd.Flags().StringVarP(&o, "output", "o", "table", "Output format: table or json")
	// Reject a bad format before any work is done (or fails for another
	// reason, which would hide the usage error behind exit code 1).
	cmd.PreRunE = func(*cobra.Command, []string) error {
		switch o {
		case "table", "json", "":
			return nil
		}
		return usageErrorf("unknown --output %q: use table or json", o)
	}
	return &o
}

// render prints v as JSON, or as the table rows gives.
func render(w io.Writer, format string, v any, header []string, rows func() [][]string) error {
	switch format {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
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
