package database_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/google/uuid"
	"go.uber.org/goleak"

	"airgapcoder/coderd/coderdtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(coderdtest.Main(m), coderdtest.LeakOptions()...) }

// TestMigrateConvertsStartupScripts upgrades a database written at schema
// version 2 and checks that an agent's startup_script became its "Startup
// Script" and that what was there keeps working.
func TestMigrateConvertsStartupScripts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, conn := oldSchemaDB(t, []string{"000001_init.sql", "000002_agents.sql"})
	ids := newSeededTemplate()
	ws, build, res := uuid.NewString(), uuid.NewString(), uuid.NewString()
	withScript, without, token := uuid.NewString(), uuid.NewString(), uuid.NewString()
	seed(t, conn, append(templateRows(ids, "workspace_build"),
		row{`INSERT INTO workspaces (id, organization_id, owner_id, template_id, name, created_at, updated_at) VALUES ($1, $2, $3, $4, 'w', now(), now())`,
			[]any{ws, ids.org, ids.user, ids.tpl}},
		row{`INSERT INTO workspace_builds (id, workspace_id, template_version_id, build_number, transition, initiator_id, job_id, created_at, updated_at)
			VALUES ($1, $2, $3, 1, 'start', $4, $5, now(), now())`, []any{build, ws, ids.version, ids.user, ids.job}},
		row{`INSERT INTO workspace_resources (id, job_id, transition, type, name, created_at) VALUES ($1, $2, 'start', 'null_resource', 'r', now())`, []any{res, ids.job}},
		row{`INSERT INTO workspace_agents (id, resource_id, name, auth_token, operating_system, architecture, startup_script, created_at)
			VALUES ($1, $2, 'main', $3, 'linux', 'amd64', 'echo hello', now() - interval '1 second')`, []any{withScript, res, uuid.NewString()}},
		row{`INSERT INTO workspace_agents (id, resource_id, name, auth_token, operating_system, architecture, created_at)
			VALUES ($1, $2, 'other', $3, 'linux', 'amd64', now())`, []any{without, res, token}},
		row{`INSERT INTO workspace_agent_logs (agent_id, created_at, level, output) VALUES ($1, now(), 'info', 'old line')`, []any{withScript}},
	)...)

	db := coderdtest.OpenDatabase(t, url)
	if v, err := db.SchemaVersion(ctx); err != nil || v < 3 {
		t.Fatalf("schema version: got %d (%v), want 3 or more", v, err)
	}

	a, err := db.AgentByID(ctx, withScript)
	if err != nil {
		t.Fatal(err)
	}
	var scripts []struct {
		LogSourceID string `json:"log_source_id"`
		DisplayName string `json:"display_name"`
		Script      string `json:"script"`
		RunOnStart  bool   `json:"run_on_start"`
	}
	if err := json.Unmarshal(a.Scripts, &scripts); err != nil {
		t.Fatal(err)
	}
	if len(scripts) != 1 || scripts[0].DisplayName != "Startup Script" || scripts[0].Script != "echo hello" || !scripts[0].RunOnStart ||
		uuid.Validate(scripts[0].LogSourceID) != nil {
		t.Errorf("converted startup script: got %+v, want one run-on-start Startup Script with a log source id", scripts)
	}
	b, err := db.AgentByAuthToken(ctx, token)
	if err != nil {
		t.Fatal(err)
	}
	if string(b.Scripts) != "[]" || b.DisplayApps != nil || string(b.Metadata) != "[]" {
		t.Errorf("agent without a startup script: got scripts %s, metadata %s, display apps %s, want [], [], none", b.Scripts, b.Metadata, b.DisplayApps)
	}
	logs, err := db.AgentLogsAfter(ctx, withScript, 0)
	if err != nil || len(logs) != 1 || logs[0].Output != "old line" || logs[0].Source != "" {
		t.Errorf("old log line: got %+v (%v), want it kept without a source", logs, err)
	}
	u, err := db.UserByID(ctx, ids.user)
	if err != nil || u.Name != "" {
		t.Errorf("old user: got name %q (%v), want empty", u.Name, err)
	}
	rs, err := db.ResourcesByJobIDs(ctx, []string{ids.job})
	if err != nil || len(rs[ids.job]) != 1 || string(rs[ids.job][0].Metadata) != "[]" || len(rs[ids.job][0].Agents) != 2 {
		t.Errorf("old resource: got %+v (%v), want one with no metadata and both agents", rs[ids.job], err)
	}
}
