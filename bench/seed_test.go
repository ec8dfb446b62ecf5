package bench

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"airgapcoder/coderd/coderdtest"
	"airgapcoder/coderd/database"
	"airgapcoder/codersdk"
)

// benchPSK authenticates the benchmarks' provisioner daemons.
const benchPSK = "bench-provisioner-psk"

// loopbackClient is shared by every client in this package. The default
// transport keeps only two idle connections per host, so with 16 daemons
// long-polling most requests would dial a fresh connection.
var loopbackClient = &http.Client{Transport: &http.Transport{
	MaxIdleConns:        256,
	MaxIdleConnsPerHost: 256,
	IdleConnTimeout:     90 * time.Second,
}}

// fleet is a deployment with an owner and one imported template, ready to
// hold seeded workspaces.
type fleet struct {
	d         *coderdtest.Deployment
	owner     *codersdk.Client
	ownerID   string
	orgID     string
	template  codersdk.Template
	versionID string
	// fileID is the template version's upload, which every build job names.
	fileID string
}

// newPSKDeployment starts a deployment that accepts benchPSK and creates
// its owner: it returns the owner's client and a client that holds the
// PSK (for provisioner daemons), both over loopbackClient.
func newPSKDeployment(tb testing.TB) (d *coderdtest.Deployment, owner *codersdk.Client, first codersdk.CreateFirstUserResponse, psk *codersdk.Client) {
	tb.Helper()
	d = coderdtest.New(tb, coderdtest.Options{ProvisionerPSK: benchPSK})
	owner, first = d.CreateFirstUser(tb)
	owner.HTTPClient = loopbackClient
	psk = d.Client()
	psk.ProvisionerPSK = benchPSK
	psk.HTTPClient = loopbackClient
	return d, owner, first, psk
}

// newFleet starts a deployment, creates the owner and imports a template
// through the API with a hand-driven provisioner daemon.
func newFleet(tb testing.TB) fleet {
	tb.Helper()
	ctx := context.Background()
	d, owner, first, psk := newPSKDeployment(tb)
	daemon := coderdtest.NewDaemon(tb, psk, "seed", nil)
	tpl := coderdtest.CreateTemplate(tb, owner, daemon, "fleet", coderdtest.MinimalTemplate, nil)
	v, err := d.DB.TemplateVersionByID(ctx, tpl.ActiveVersionID)
	if err != nil {
		tb.Fatalf("load template version: %v", err)
	}
	job, err := d.DB.JobByID(ctx, v.JobID)
	if err != nil {
		tb.Fatalf("load import job: %v", err)
	}
	return fleet{d: d, owner: owner, ownerID: first.UserID, orgID: first.OrganizationID, template: tpl, versionID: v.ID, fileID: job.FileID}
}

// seedWorkspaces inserts n running workspaces spread over ceil(n/perUser)
// new users, in one transaction with COPY: the users and their memberships,
// and per workspace one succeeded start build with its job, one resource and
// one agent. It then analyzes the tables, as autovacuum would soon after a
// bulk load, so that plans reflect the data. It returns how long it took.
func seedWorkspaces(tb testing.TB, f fleet, n, perUser int) time.Duration {
	tb.Helper()
	ctx := context.Background()
	start := time.Now()
	rows := buildSeedRows(f, n, perUser, f.d.DB.Now())
	err := pgx.BeginFunc(ctx, f.d.DB.Pool(), func(tx pgx.Tx) error {
		for _, t := range rows.tables() {
			if _, err := tx.CopyFrom(ctx, pgx.Identifier{t.name}, t.columns, pgx.CopyFromRows(t.rows)); err != nil {
				return fmt.Errorf("copy into %s: %w", t.name, err)
			}
		}
		return nil
	})
	if err != nil {
		tb.Fatalf("seed %d workspaces: %v", n, err)
	}
	if _, err := f.d.DB.Pool().Exec(ctx, `ANALYZE users, organization_members, provisioner_jobs, workspaces,
		workspace_builds, workspace_resources, workspace_agents`); err != nil {
		tb.Fatalf("analyze: %v", err)
	}
	return time.Since(start)
}

// seedTable is one COPY.
type seedTable struct {
	name    string
	columns []string
	rows    [][]any
}

// seedRows holds every row seedWorkspaces copies, table by table.
type seedRows struct {
	users, members, jobs, workspaces, builds, resources, agents [][]any
}

// tables lists the copies in an order that satisfies the foreign keys.
func (s seedRows) tables() []seedTable {
	return []seedTable{
		{"users", []string{"id", "email", "username", "hashed_password", "roles", "created_at", "updated_at", "last_seen_at"}, s.users},
		{"organization_members", []string{"organization_id", "user_id", "created_at"}, s.members},
		{"provisioner_jobs", []string{"id", "created_at", "updated_at", "started_at", "completed_at", "organization_id", "initiator_id",
			"type", "input", "tags", "file_id"}, s.jobs},
		{"workspaces", []string{"id", "organization_id", "owner_id", "template_id", "name", "created_at", "updated_at"}, s.workspaces},
		{"workspace_builds", []string{"id", "workspace_id", "template_version_id", "build_number", "transition", "initiator_id", "job_id",
			"provisioner_state", "created_at", "updated_at"}, s.builds},
		{"workspace_resources", []string{"id", "job_id", "transition", "type", "name", "created_at"}, s.resources},
		{"workspace_agents", []string{"id", "resource_id", "name", "auth_token", "operating_system", "architecture", "directory",
			"lifecycle_state", "created_at", "first_connected_at", "last_connected_at"}, s.agents},
	}
}

// buildSeedRows lays out n workspaces named ws-00000… over users named
// user-00000…, perUser each, created a second apart ending at now.
func buildSeedRows(f fleet, n, perUser int, now time.Time) seedRows {
	var s seedRows
	tags := map[string]string{codersdk.TagScope: codersdk.ProvisionerScopeOrg, codersdk.TagOwner: ""}
	state := []byte(`{"version":4,"resources":[]}`)
	var userID string
	for i := range n {
		at := now.Add(time.Duration(i-n) * time.Second)
		if i%perUser == 0 {
			userID = uuid.NewString()
			name := fmt.Sprintf("user-%05d", i/perUser)
			s.users = append(s.users, []any{userID, name + "@example.com", name, []byte("not-a-bcrypt-hash"), []string{}, at, at, at})
			s.members = append(s.members, []any{f.orgID, userID, at})
		}
		wsID, buildID, jobID, resID := uuid.NewString(), uuid.NewString(), uuid.NewString(), uuid.NewString()
		started, done := at.Add(time.Second/4), at.Add(time.Second/2)
		s.jobs = append(s.jobs, []any{jobID, at, done, started, done, f.orgID, userID, database.JobTypeWorkspaceBuild,
			database.JobInput{WorkspaceBuildID: buildID}, tags, f.fileID})
		s.workspaces = append(s.workspaces, []any{wsID, f.orgID, userID, f.template.ID, fmt.Sprintf("ws-%05d", i), at, done})
		s.builds = append(s.builds, []any{buildID, wsID, f.versionID, int32(1), "start", userID, jobID, state, at, done})
		s.resources = append(s.resources, []any{resID, jobID, "start", "docker_container", "dev", done})
		s.agents = append(s.agents, []any{uuid.NewString(), resID, "main", uuid.NewString(), "linux", "amd64", "/home/coder",
			"ready", done, done, done})
	}
	return s
}

// TestSeedWorkspaces keeps the benchmarks' seeding honest in CI: seeded
// workspaces must come back through the API like real ones, in order and
// paged.
func TestSeedWorkspaces(t *testing.T) {
	f := newFleet(t)
	seedWorkspaces(t, f, 100, 7) // user-00000 owns ws-00000…ws-00006, and so on
	ctx := context.Background()
	tests := []struct {
		name      string
		filter    codersdk.WorkspaceFilter
		wantCount int
		wantLen   int
		wantFirst string // owner/name
	}{
		{"all", codersdk.WorkspaceFilter{}, 100, 100, "user-00000/ws-00000"},
		{"first page", codersdk.WorkspaceFilter{Limit: 10}, 100, 10, "user-00000/ws-00000"},
		{"last page", codersdk.WorkspaceFilter{Limit: 10, Offset: 95}, 100, 5, "user-00013/ws-00095"},
		{"one owner", codersdk.WorkspaceFilter{Owner: "user-00002"}, 7, 7, "user-00002/ws-00014"},
		{"one owner paged", codersdk.WorkspaceFilter{Owner: "user-00002", Limit: 3, Offset: 5}, 7, 2, "user-00002/ws-00019"},
		{"name paged", codersdk.WorkspaceFilter{Name: "ws-0001", Limit: 4, Offset: 2}, 10, 4, "user-00001/ws-00012"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := f.owner.Workspaces(ctx, tt.filter)
			if err != nil {
				t.Fatalf("list workspaces: %v", err)
			}
			if resp.Count != tt.wantCount {
				t.Errorf("got count %d, want %d", resp.Count, tt.wantCount)
			}
			if len(resp.Workspaces) != tt.wantLen {
				t.Fatalf("got %d workspaces, want %d", len(resp.Workspaces), tt.wantLen)
			}
			w := resp.Workspaces[0]
			if got := w.OwnerName + "/" + w.Name; got != tt.wantFirst {
				t.Errorf("got first workspace %s, want %s", got, tt.wantFirst)
			}
			if w.LatestBuild.Status != codersdk.WorkspaceStatusRunning || w.LatestBuild.Job.Status != codersdk.ProvisionerJobSucceeded {
				t.Errorf("workspace %s: got status %s (job %s), want running (job succeeded)", w.Name, w.LatestBuild.Status, w.LatestBuild.Job.Status)
			}
			if len(w.LatestBuild.Resources) != 1 || len(w.LatestBuild.Resources[0].Agents) != 1 {
				t.Errorf("workspace %s: got resources %+v, want one with one agent", w.Name, w.LatestBuild.Resources)
			}
		})
	}
}
