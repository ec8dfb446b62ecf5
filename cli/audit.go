package cli

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"airgapcoder/codersdk"
)

// auditConfig is what `coder audit` asks for.
type auditConfig struct {
	user, action, resourceType, workspace, outcome string
	since, until                                   string
	limit, offset                                  int
}

func (inv *invocation) auditCmd() *cobra.Command {
	var cfg auditConfig
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "List audit log records, newest first (owners only)",
		Long: `List the audit log: logins, user, token, template and workspace changes,
builds, relayed connections (ssh, port-forward, dev URLs) and refused attempts,
newest first. --since and --until take an RFC 3339 time, a date (YYYY-MM-DD,
UTC) or a duration back from now (24h).`,
	}
	out := outputFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		q, err := cfg.query(time.Now())
		if err != nil {
			return err
		}
		client, err := inv.client()
		if err != nil {
			return err
		}
		resp, err := client.AuditLogs(cmd.Context(), codersdk.AuditLogsRequest{SearchQuery: q, Limit: cfg.limit, Offset: cfg.offset})
		if err != nil {
			return err
		}
		err = renderList(inv.stdout, *out, resp.AuditLogs, []string{"TIME", "USER", "IP", "ACTION", "RESOURCE", "OUTCOME", "DETAILS"}, func(l codersdk.AuditLog) []string {
			return []string{l.Time.Local().Format(time.RFC3339), l.Actor(), orDash(l.IP), string(l.Action),
				auditResource(l), fmt.Sprintf("%s %d", l.Outcome, l.StatusCode), auditDetails(l.AdditionalFields)}
		})
		if err != nil {
			return err
		}
		if shown := int64(cfg.offset + len(resp.AuditLogs)); *out != "json" && shown < resp.Count {
			fmt.Fprintf(inv.stderr, "Showing records %d-%d of %d; see more with --offset %d.\n", cfg.offset+1, shown, resp.Count, shown)
		}
		return nil
	}
	f := cmd.Flags()
	f.StringVar(&cfg.user, "user", "", "Only records of this actor (username)")
	f.StringVar(&cfg.action, "action", "", "Only this action: login, logout, create, write, delete, start, stop, connect, install, upgrade, rollback, restore")
	f.StringVar(&cfg.resourceType, "resource-type", "", "Only this resource type: user, api_key, template, template_version, workspace, workspace_build, workspace_agent, deployment")
	f.StringVar(&cfg.workspace, "workspace", "", "Only records about this workspace (NAME or OWNER/NAME)")
	f.StringVar(&cfg.outcome, "outcome", "", "Only success or failure")
	f.StringVar(&cfg.since, "since", "", "Only records at or after this time")
	f.StringVar(&cfg.until, "until", "", "Only records before this time")
	f.IntVar(&cfg.limit, "limit", 100, "At most this many records (1-1000)")
	f.IntVar(&cfg.offset, "offset", 0, "Skip this many of the newest records")
	return cmd
}

// query builds the API's q parameter, checking every flag first.
func (c auditConfig) query(now time.Time) (string, error) {
	if c.limit < 1 || c.limit > 1000 {
		return "", usageErrorf("--limit must be between 1 and 1000, got %d", c.limit)
	}
	if c.offset < 0 {
		return "", usageErrorf("--offset must be 0 or more, got %d", c.offset)
	}
	if c.outcome != "" && c.outcome != codersdk.AuditOutcomeSuccess && c.outcome != codersdk.AuditOutcomeFailure {
		return "", usageErrorf("--outcome %q: use success or failure", c.outcome)
	}
	var terms []string
	for _, t := range []struct{ flag, key, val string }{
		{"user", "username", c.user}, {"action", "action", c.action}, {"resource-type", "resource_type", c.resourceType},
		{"workspace", "workspace", c.workspace}, {"outcome", "outcome", c.outcome},
	} {
		if t.val == "" {
			continue
		}
		if strings.ContainsAny(t.val, " \t:") {
			return "", usageErrorf("--%s %q must not contain spaces or ':'", t.flag, t.val)
		}
		terms = append(terms, t.key+":"+t.val)
	}
	for _, t := range []struct{ flag, val string }{{"since", c.since}, {"until", c.until}} {
		if t.val == "" {
			continue
		}
		at, err := parseTimeFlag(t.val, now)
		if err != nil {
			return "", usageErrorf("--%s: %v", t.flag, err)
		}
		terms = append(terms, t.flag+":"+at.UTC().Format(time.RFC3339Nano))
	}
	return strings.Join(terms, " "), nil
}

// parseTimeFlag reads an RFC 3339 time, a date (midnight UTC) or a
// duration back from now.
func parseTimeFlag(s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	if t, err := time.Parse(time.DateOnly, s); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, fmt.Errorf("%q is not an RFC 3339 time (2006-01-02T15:04:05Z), a date (2006-01-02) or a duration (24h)", s)
}

// auditResource names a record's resource: its type, then the workspace or
// the resource's name.
func auditResource(l codersdk.AuditLog) string {
	name := l.ResourceTarget
	if l.WorkspaceName != "" && l.ResourceType != codersdk.AuditResourceWorkspaceAgent {
		name = l.WorkspaceOwner + "/" + l.WorkspaceName
	}
	if name == "" {
		name = l.ResourceID
	}
	if name == "" {
		return string(l.ResourceType)
	}
	return string(l.ResourceType) + " " + name
}

// auditDetails prints a record's fields as key=value, the error first.
func auditDetails(raw json.RawMessage) string {
	var fields map[string]any
	if json.Unmarshal(raw, &fields) != nil || len(fields) == 0 {
		return ""
	}
	keys := slices.Sorted(maps.Keys(fields))
	if i := slices.Index(keys, "error"); i > 0 {
		keys = append([]string{"error"}, slices.Delete(keys, i, i+1)...)
	}
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		var v string
		switch x := fields[k].(type) {
		case string:
			v = x
			if strings.ContainsAny(v, " \t") {
				v = fmt.Sprintf("%q", v)
			}
		default:
			b, _ := json.Marshal(x)
			v = string(b)
		}
		parts = append(parts, k+"="+v)
	}
	return strings.Join(parts, " ")
}
