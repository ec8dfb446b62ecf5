package cli_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"airgapcoder/coderd/coderdtest"
	"airgapcoder/coderd/database"
	"airgapcoder/codersdk"
	"airgapcoder/internal/testwait"
)

// TestCLIAudit drives `coder audit` against a deployment with a few audited
// actions: JSON and table output, filters, paging, usage errors, and a
// member's refusal.
func TestCLIAudit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := coderdtest.New(t, coderdtest.Options{})
	owner, _ := d.CreateFirstUser(t)
	alice, _ := d.CreateUser(t, owner, "alice")
	if _, err := d.Client().LoginWithPassword(ctx, codersdk.LoginWithPasswordRequest{Email: "alice@example.com", Password: "not-her-password"}); !codersdk.IsStatus(err, http.StatusUnauthorized) {
		t.Fatalf("wrong password: got %v, want 401", err)
	}
	if _, err := alice.CreateToken(ctx, codersdk.Me, codersdk.CreateTokenRequest{TokenName: "laptop"}); err != nil {
		t.Fatal(err)
	}
	env := signedInEnv(t, owner)

	t.Run("JSON", func(t *testing.T) {
		var logs []codersdk.AuditLog
		decodeJSON(t, "coder audit", mustRun(t, env, "audit", "-o", "json"), &logs)
		var sawLogin, sawFailure bool
		for _, l := range logs {
			sawLogin = sawLogin || (l.Action == codersdk.AuditActionLogin && l.Actor() == "admin" && l.Outcome == codersdk.AuditOutcomeSuccess && l.IP == "127.0.0.1")
			var fields struct {
				Email string `json:"email"`
			}
			_ = json.Unmarshal(l.AdditionalFields, &fields)
			sawFailure = sawFailure || (l.Action == codersdk.AuditActionLogin && l.Actor() == "anonymous" && l.StatusCode == http.StatusUnauthorized &&
				fields.Email == "alice@example.com")
		}
		if !sawLogin || !sawFailure {
			t.Errorf("coder audit -o json: got the admin's login %v, alice's failed login %v, want both:\n%+v", sawLogin, sawFailure, logs)
		}
	})

	t.Run("Filters", func(t *testing.T) {
		var logs []codersdk.AuditLog
		decodeJSON(t, "coder audit", mustRun(t, env, "audit", "--user", "alice", "--action", "create", "--since", "1h", "--until", "2099-01-01T00:00:00Z", "-o", "json"), &logs)
		if len(logs) != 1 || logs[0].ResourceType != codersdk.AuditResourceAPIKey || logs[0].ResourceTarget != "laptop" {
			t.Errorf("alice's creations: got %+v, want her token laptop only", logs)
		}
		decodeJSON(t, "coder audit", mustRun(t, env, "audit", "--since", "2099-01-01", "-o", "json"), &logs)
		if len(logs) != 0 {
			t.Errorf("records from 2099: got %d, want none", len(logs))
		}
	})

	t.Run("Table", func(t *testing.T) {
		stdout, stderr, code := run(t, env, "audit", "--action", "login", "--limit", "1")
		if code != 0 {
			t.Fatalf("coder audit: exit %d\n%s", code, stderr)
		}
		lines := strings.Split(strings.TrimSpace(stdout), "\n")
		if len(lines) != 2 || strings.Join(strings.Fields(lines[0]), " ") != "TIME USER IP ACTION RESOURCE OUTCOME DETAILS" {
			t.Fatalf("coder audit --limit 1: got %q, want a header and one row", stdout)
		}
		// The newest login is alice's failed one.
		for _, want := range []string{"anonymous", "127.0.0.1", "login", "user alice@example.com", "failure 401", "error=\"Incorrect email or password\"", "email=alice@example.com"} {
			if !strings.Contains(lines[1], want) {
				t.Errorf("row %q lacks %q", lines[1], want)
			}
		}
		if !strings.Contains(stderr, "Showing records 1-1 of") || !strings.Contains(stderr, "--offset 1") {
			t.Errorf("stderr: got %q, want how to see the next page", stderr)
		}
		// Then alice's own login (when the test created her).
		stdout = mustRun(t, env, "audit", "--action", "login", "--limit", "1", "--offset", "1")
		if !strings.Contains(stdout, "user alice ") || !strings.Contains(stdout, "success 201") {
			t.Errorf("second page: got %q, want alice's login", stdout)
		}
	})

	t.Run("UsageErrors", func(t *testing.T) {
		for _, tc := range []struct {
			args []string
			want string
		}{
			{[]string{"--since", "yesterday"}, "--since"},
			{[]string{"--until", "2026-13-01"}, "--until"},
			{[]string{"--limit", "0"}, "--limit"},
			{[]string{"--outcome", "maybe"}, "--outcome"},
			{[]string{"--user", "a b"}, "--user"},
			{[]string{"-o", "yaml"}, "--output"},
			{[]string{"extra"}, "takes no arguments"},
		} {
			_, stderr, code := run(t, env, append([]string{"audit"}, tc.args...)...)
			if code != 2 || !strings.Contains(stderr, tc.want) {
				t.Errorf("coder audit %s: got exit %d %q, want 2 naming %s", strings.Join(tc.args, " "), code, stderr, tc.want)
			}
		}
	})

	t.Run("MemberRefused", func(t *testing.T) {
		memberEnv := signedInEnv(t, alice)
		_, stderr, code := run(t, memberEnv, "audit")
		if code != 1 || !strings.Contains(stderr, "Forbidden") || !strings.Contains(stderr, "403") {
			t.Errorf("member: got exit %d %q, want 1 and the 403", code, stderr)
		}
	})
}

// TestCLIServerAuditRetention: --audit-retention (CODER_AUDIT_RETENTION)
// reaches coderd, which deletes older records when it starts and records
// the version it started with.
func TestCLIServerAuditRetention(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := coderdtest.NewDatabase(t)
	db, err := database.Open(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Migrate(ctx, slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
		t.Fatal(err)
	}
	for _, r := range []struct {
		target string
		age    time.Duration
	}{{"old", 48 * time.Hour}, {"recent", time.Hour}} {
		if _, err := db.InsertAuditLog(ctx, database.AuditLog{Time: time.Now().Add(-r.age), Action: "login", ResourceType: "user",
			ResourceTarget: r.target, StatusCode: 201, Success: true}); err != nil {
			t.Fatal(err)
		}
	}
	addr := freeAddr(t)
	dir := t.TempDir()
	srv := start(t, baseEnv(t, "CODER_AUDIT_RETENTION=24h"), "server",
		"--http-address", addr, "--postgres-url", dbURL, "--provisioner-daemons", "0",
		"--global-config", filepath.Join(dir, "config"), "--cache-dir", filepath.Join(dir, "cache"))
	waitHealthy(t, srv, "http://"+addr)
	defer stopGracefully(t, srv)
	testwait.For(t, 20*time.Second, "the install of "+testVersion+" and the recent login only", func() (bool, string) {
		logs, _, err := db.AuditLogs(ctx, database.AuditLogFilter{})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, l := range logs {
			got = append(got, l.Action+" "+l.ResourceTarget)
		}
		return strings.Join(got, ",") == "install "+testVersion+",login recent", fmt.Sprintf("records: got %q", got)
	})
}

// TestCLIServerAuditRetentionFlag: a bad --audit-retention is a usage
// error naming where it came from.
func TestCLIServerAuditRetentionFlag(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	common := []string{"server", "--postgres-url", "postgres://127.0.0.1:1/none", "--global-config", filepath.Join(dir, "config")}
	for _, tc := range []struct {
		env  []string
		args []string
		want string
	}{
		{nil, []string{"--audit-retention", "-1h"}, "--audit-retention must be 0"},
		{nil, []string{"--audit-retention", "90 days"}, "--audit-retention"},
		{[]string{"CODER_AUDIT_RETENTION=forever"}, nil, "CODER_AUDIT_RETENTION"},
	} {
		_, stderr, code := run(t, baseEnv(t, tc.env...), append(common, tc.args...)...)
		if code != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("coder server %v %v: got exit %d %q, want 2 naming %s", tc.env, tc.args, code, stderr, tc.want)
		}
	}
}
