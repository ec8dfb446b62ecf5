package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"airgapcoder/coderd/codersdk"
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

func ago(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	d := time.Since(t).Round(time.Second)
	return d.String() + " ago"
}

// followJob prints a job's logs as they arrive until it ends, then returns
// an error when it did not succeed.
func followJob(ctx context.Context, w io.Writer, logs func(ctx context.Context, after int64, follow bool, fn func(codersdk.ProvisionerJobLog) error) error,
	job func(ctx context.Context) (codersdk.ProvisionerJob, error)) (codersdk.ProvisionerJob, error) {
	stage := ""
	err := logs(ctx, 0, true, func(l codersdk.ProvisionerJobLog) error {
		if l.Stage != "" && l.Stage != stage {
			stage = l.Stage
			fmt.Fprintf(w, "==> %s\n", stage)
		}
		fmt.Fprintf(w, "    %s\n", l.Output)
		return nil
	})
	if err != nil {
		return codersdk.ProvisionerJob{}, fmt.Errorf("follow build logs: %w", err)
	}
	j, err := job(ctx)
	if err != nil {
		return j, err
	}
	switch j.Status {
	case codersdk.ProvisionerJobSucceeded:
		return j, nil
	case codersdk.ProvisionerJobCanceled:
		return j, fmt.Errorf("the job was canceled")
	}
	return j, fmt.Errorf("the job %s: %s", j.Status, j.Error)
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
	for _, k := range sortedKeys(tags) {
		parts = append(parts, k+"="+tags[k])
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

func tagFlags(tags map[string]string) string {
	var b strings.Builder
	for _, k := range sortedKeys(tags) {
		if k == codersdk.TagScope && tags[k] == codersdk.ProvisionerScopeOrg {
			continue
		}
		fmt.Fprintf(&b, " --tag %s=%s", k, tags[k])
	}
	return b.String()
}
