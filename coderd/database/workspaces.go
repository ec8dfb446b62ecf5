package database

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Workspace is a row of workspaces joined with its owner, template and
// latest build (and that build's job).
type Workspace struct {
	ID                      string         `db:"id"`
	OrganizationID          string         `db:"organization_id"`
	OwnerID                 string         `db:"owner_id"`
	OwnerName               string         `db:"owner_name"`
	TemplateID              string         `db:"template_id"`
	TemplateName            string         `db:"template_name"`
	TemplateActiveVersionID string         `db:"template_active_version_id"`
	Name                    string         `db:"name"`
	CreatedAt               time.Time      `db:"created_at"`
	UpdatedAt               time.Time      `db:"updated_at"`
	Deleted                 bool           `db:"deleted"`
	LatestBuild             WorkspaceBuild `db:"-"`
}

// WorkspaceBuild is a row of workspace_builds joined with its job.
type WorkspaceBuild struct {
	ID                  string `db:"id"`
	WorkspaceID         string `db:"workspace_id"`
	TemplateVersionID   string `db:"template_version_id"`
	TemplateVersionName string `db:"template_version_name"`
	BuildNumber         int32  `db:"build_number"`
	Transition          string `db:"transition"`
	InitiatorID         string `db:"initiator_id"`
	InitiatorName       string `db:"initiator_name"`
	Reason              string `db:"reason"`
	// RichParameterValues is a JSON array of
	// codersdk.WorkspaceBuildParameter.
	RichParameterValues []byte         `db:"rich_parameter_values"`
	CreatedAt           time.Time      `db:"created_at"`
	UpdatedAt           time.Time      `db:"updated_at"`
	Job                 ProvisionerJob `db:"-"`
}

// buildColumns select a build (table alias b) with its version's name (tv),
// its initiator's (iu) and its job (j): the build's columns as "b.column",
// the job's as "j.column" (prefixed), for rowToBuild to split.
var buildColumns = prefixed("b", `id, workspace_id, template_version_id, build_number, transition, initiator_id, reason,
	rich_parameter_values, created_at, updated_at`) + `, tv.name AS "b.template_version_name", iu.username AS "b.initiator_name", ` +
	prefixed("j", jobColumns)

// rowToBuild maps the "b." and "j." columns of a row of buildColumns onto
// a build with its job; rest are the row's other columns.
func rowToBuild(row pgx.CollectableRow) (b WorkspaceBuild, rest pgx.CollectableRow, err error) {
	parts := splitRow(row, "b.", "j.")
	if b, err = pgx.RowToStructByName[WorkspaceBuild](parts[0]); err != nil {
		return b, nil, err
	}
	b.Job, err = pgx.RowToStructByName[ProvisionerJob](parts[1])
	return b, parts[2], err
}

const buildJoins = ` JOIN template_versions tv ON tv.id = b.template_version_id
	JOIN users iu ON iu.id = b.initiator_id
	JOIN provisioner_jobs j ON j.id = b.job_id`

var workspaceSelect = `SELECT w.id, w.organization_id, w.owner_id, u.username AS owner_name, w.template_id, t.name AS template_name,
		t.active_version_id AS template_active_version_id, w.name, w.created_at, w.updated_at, w.deleted, ` + buildColumns + `
	FROM workspaces w
	JOIN users u ON u.id = w.owner_id
	JOIN templates t ON t.id = w.template_id
	JOIN LATERAL (SELECT * FROM workspace_builds WHERE workspace_id = w.id ORDER BY build_number DESC LIMIT 1) b ON true` + buildJoins

// rowToWorkspace maps a row of workspaceSelect: the workspace's own
// columns, and its latest build's.
func rowToWorkspace(row pgx.CollectableRow) (Workspace, error) {
	b, rest, err := rowToBuild(row)
	if err != nil {
		return Workspace{}, err
	}
	w, err := pgx.RowToStructByName[Workspace](rest)
	w.LatestBuild = b
	return w, err
}

// rowToBuildOnly maps a row of buildSelect. Its columns are all the
// build's and the job's: any other has no field and fails the scan.
func rowToBuildOnly(row pgx.CollectableRow) (WorkspaceBuild, error) {
	b, rest, err := rowToBuild(row)
	if err != nil {
		return b, err
	}
	_, err = pgx.RowToStructByName[struct{}](rest)
	return b, err
}

// oneWorkspace is collectOne for workspaceSelect.
func oneWorkspace(rows pgx.Rows, err error) (Workspace, error) {
	return collectOneBy(rows, err, rowToWorkspace)
}

// oneBuild is collectOne for buildSelect.
func oneBuild(rows pgx.Rows, err error) (WorkspaceBuild, error) {
	return collectOneBy(rows, err, rowToBuildOnly)
}

// InsertWorkspace creates a workspace row (its first build comes next, in the
// same transaction).
func (db *DB) InsertWorkspace(ctx context.Context, organizationID, ownerID, templateID, name string) (string, error) {
	id := uuid.NewString()
	now := db.now()
	_, err := db.q().Exec(ctx, `INSERT INTO workspaces (id, organization_id, owner_id, template_id, name, created_at, updated_at)
		VALUES ($1, $2, $3, $4, $5, $6, $6)`, id, organizationID, ownerID, templateID, name, now)
	return id, mapErr(err)
}

// InsertBuildParams creates a build.
type InsertBuildParams struct {
	WorkspaceID         string
	TemplateVersionID   string
	Transition          string
	InitiatorID         string
	JobID               string
	State               []byte
	RichParameterValues []byte
}

// InsertWorkspaceBuild creates the workspace's next build, numbered one past
// the latest; a concurrent build racing for the same number loses with
// ErrConflict.
func (db *DB) InsertWorkspaceBuild(ctx context.Context, p InsertBuildParams) (string, error) {
	id := uuid.NewString()
	now := db.now()
	if p.RichParameterValues == nil {
		p.RichParameterValues = []byte("[]")
	}
	_, err := db.q().Exec(ctx, `INSERT INTO workspace_builds (id, workspace_id, template_version_id, build_number, transition, initiator_id, job_id,
			provisioner_state, rich_parameter_values, created_at, updated_at)
		VALUES ($1, $2, $3, (SELECT coalesce(max(build_number), 0) + 1 FROM workspace_builds WHERE workspace_id = $2), $4, $5, $6, $7, $8, $9, $9)`,
		id, p.WorkspaceID, p.TemplateVersionID, p.Transition, p.InitiatorID, p.JobID, p.State, p.RichParameterValues, now)
	if err != nil {
		return "", mapErr(err)
	}
	_, err = db.q().Exec(ctx, `UPDATE workspaces SET updated_at = $2 WHERE id = $1`, p.WorkspaceID, now)
	return id, err
}

// WorkspaceByID returns a workspace, deleted ones included.
func (db *DB) WorkspaceByID(ctx context.Context, id string) (Workspace, error) {
	if uuid.Validate(id) != nil {
		return Workspace{}, ErrNotFound
	}
	return oneWorkspace(db.q().Query(ctx, workspaceSelect+` WHERE w.id = $1`, id))
}

// WorkspaceByOwnerAndName returns a live workspace.
func (db *DB) WorkspaceByOwnerAndName(ctx context.Context, ownerID, name string) (Workspace, error) {
	return oneWorkspace(db.q().Query(ctx, workspaceSelect+` WHERE w.owner_id = $1 AND lower(w.name) = lower($2) AND NOT w.deleted`, ownerID, name))
}

// WorkspaceFilter narrows Workspaces.
type WorkspaceFilter struct {
	OwnerID    string // "" means every owner
	TemplateID string
	Name       string // substring, case-insensitive
	Limit      int
	Offset     int
}

func (f WorkspaceFilter) where() (string, []any) {
	conds := []string{"NOT w.deleted"}
	var args []any
	add := func(cond string, v any) {
		args = append(args, v)
		conds = append(conds, fmt.Sprintf(cond, len(args)))
	}
	if f.OwnerID != "" {
		add("w.owner_id = $%d", f.OwnerID)
	}
	if f.TemplateID != "" {
		add("w.template_id = $%d", f.TemplateID)
	}
	if f.Name != "" {
		add("w.name ILIKE '%%' || $%d || '%%'", f.Name)
	}
	return " WHERE " + strings.Join(conds, " AND "), args
}

// page is the query of the ids of the filter's page, in the list's order,
// given its where clause. It picks the page from workspaces and owners
// alone: sorting the full select would look up every workspace's latest
// build and job first (55ms for a page of 100 out of 10,000 instead of
// 5ms). Migration 000019's indexes give the order without sorting every
// live workspace (TestWorkspacePages).
func (f WorkspaceFilter) page(where string) string {
	page := `SELECT w.id FROM workspaces w JOIN users u ON u.id = w.owner_id` + where + ` ORDER BY u.username, w.name`
	if f.Limit > 0 {
		page += fmt.Sprintf(" LIMIT %d", f.Limit)
	}
	if f.Offset > 0 {
		page += fmt.Sprintf(" OFFSET %d", f.Offset)
	}
	return page
}

// Workspaces lists live workspaces by owner and name, with the total count
// that matches the filter.
func (db *DB) Workspaces(ctx context.Context, f WorkspaceFilter) ([]Workspace, int, error) {
	where, args := f.where()
	// The count and the page are independent: outside a transaction they
	// run at once, on two of the pool's connections (a dashboard's list is
	// then one round trip, not two, on a busy machine).
	var count int
	countErr := make(chan error, 1)
	countQuery := func() {
		countErr <- db.q().QueryRow(ctx, `SELECT count(*) FROM workspaces w`+where, args...).Scan(&count)
	}
	if db.tx == nil {
		go countQuery()
	} else {
		countQuery()
	}
	q := workspaceSelect + where + ` ORDER BY u.username, w.name`
	if f.Limit > 0 || f.Offset > 0 {
		// = ANY(ARRAY(…)) rather than IN (…): the page's ids are looked up
		// by primary key, where IN would hash-join a scan of every
		// workspace against them.
		q = workspaceSelect + ` WHERE w.id = ANY(ARRAY(` + f.page(where) + `)) ORDER BY u.username, w.name`
	}
	rows, err := db.q().Query(ctx, q, args...)
	ws, err := collectAllBy(rows, err, rowToWorkspace)
	if cerr := <-countErr; err == nil {
		err = cerr
	}
	if err != nil {
		return nil, 0, err
	}
	return ws, count, nil
}

// CountWorkspaces counts live workspaces.
func (db *DB) CountWorkspaces(ctx context.Context) (int64, error) {
	var n int64
	err := db.q().QueryRow(ctx, `SELECT count(*) FROM workspaces WHERE NOT deleted`).Scan(&n)
	return n, err
}

// CountWorkspacesByTemplate counts a template's live workspaces.
func (db *DB) CountWorkspacesByTemplate(ctx context.Context, templateID string) (int64, error) {
	var n int64
	err := db.q().QueryRow(ctx, `SELECT count(*) FROM workspaces WHERE template_id = $1 AND NOT deleted`, templateID).Scan(&n)
	return n, err
}

// MarkWorkspaceDeleted hides a workspace whose delete build succeeded.
func (db *DB) MarkWorkspaceDeleted(ctx context.Context, id string) error {
	_, err := db.q().Exec(ctx, `UPDATE workspaces SET deleted = true, updated_at = $2 WHERE id = $1`, id, db.now())
	return err
}

var buildSelect = `SELECT ` + buildColumns + ` FROM workspace_builds b` + buildJoins

// WorkspaceBuildByID returns a build.
func (db *DB) WorkspaceBuildByID(ctx context.Context, id string) (WorkspaceBuild, error) {
	if uuid.Validate(id) != nil {
		return WorkspaceBuild{}, ErrNotFound
	}
	return oneBuild(db.q().Query(ctx, buildSelect+` WHERE b.id = $1`, id))
}

// WorkspaceBuildByNumber returns the workspace's build with that number.
func (db *DB) WorkspaceBuildByNumber(ctx context.Context, workspaceID string, number int32) (WorkspaceBuild, error) {
	return oneBuild(db.q().Query(ctx, buildSelect+` WHERE b.workspace_id = $1 AND b.build_number = $2`, workspaceID, number))
}

// WorkspaceBuildByJobID returns the build a job runs.
func (db *DB) WorkspaceBuildByJobID(ctx context.Context, jobID string) (WorkspaceBuild, error) {
	return oneBuild(db.q().Query(ctx, buildSelect+` WHERE b.job_id = $1`, jobID))
}

// WorkspaceBuilds lists a workspace's builds, newest first.
func (db *DB) WorkspaceBuilds(ctx context.Context, workspaceID string) ([]WorkspaceBuild, error) {
	rows, err := db.q().Query(ctx, buildSelect+` WHERE b.workspace_id = $1 ORDER BY b.build_number DESC`, workspaceID)
	return collectAllBy(rows, err, rowToBuildOnly)
}

// WorkspaceBuildState returns the Terraform state a build left.
func (db *DB) WorkspaceBuildState(ctx context.Context, buildID string) ([]byte, error) {
	var state []byte
	err := db.q().QueryRow(ctx, `SELECT provisioner_state FROM workspace_builds WHERE id = $1`, buildID).Scan(&state)
	return state, mapErr(err)
}

// LatestStateBefore returns the state of the newest build of the workspace
// before buildNumber that recorded one.
func (db *DB) LatestStateBefore(ctx context.Context, workspaceID string, buildNumber int32) ([]byte, error) {
	var state []byte
	err := db.q().QueryRow(ctx, `SELECT provisioner_state FROM workspace_builds
		WHERE workspace_id = $1 AND build_number < $2 AND provisioner_state IS NOT NULL
		ORDER BY build_number DESC LIMIT 1`, workspaceID, buildNumber).Scan(&state)
	if err == pgx.ErrNoRows {
		return nil, nil
	}
	return state, err
}

// SetWorkspaceBuildState records the state a build left.
func (db *DB) SetWorkspaceBuildState(ctx context.Context, buildID string, state []byte) error {
	_, err := db.q().Exec(ctx, `UPDATE workspace_builds SET provisioner_state = $2, updated_at = $3 WHERE id = $1`, buildID, state, db.now())
	return err
}

// Resource is a row of workspace_resources with its agents.
type Resource struct {
	ID         string `db:"id"`
	JobID      string `db:"job_id"`
	Transition string `db:"transition"`
	Type       string `db:"type"`
	Name       string `db:"name"`
	// Hide, Icon, DailyCost and Metadata come from the resource's
	// coder_metadata; Metadata is a JSON array of
	// codersdk.WorkspaceResourceMetadata (sensitive values included).
	Hide      bool      `db:"hide"`
	Icon      string    `db:"icon"`
	DailyCost int32     `db:"daily_cost"`
	Metadata  []byte    `db:"metadata"`
	CreatedAt time.Time `db:"created_at"`
	Agents    []Agent   `db:"-"`
}

// Agent is a row of workspace_agents.
type Agent struct {
	ID              string            `db:"id"`
	ResourceID      string            `db:"resource_id"`
	Name            string            `db:"name"`
	AuthToken       string            `db:"auth_token"`
	OperatingSystem string            `db:"operating_system"`
	Architecture    string            `db:"architecture"`
	Directory       string            `db:"directory"`
	Env             map[string]string `db:"env"`
	// Scripts is a JSON array of codersdk.AgentScript, Metadata one of
	// codersdk.AgentMetadataDescription; DisplayApps is a JSON
	// codersdk.DisplayApps or nil when the template sets none.
	Scripts            []byte `db:"scripts"`
	Metadata           []byte `db:"metadata"`
	DisplayApps        []byte `db:"display_apps"`
	TroubleshootingURL string `db:"troubleshooting_url"`
	MOTDFile           string `db:"motd_file"`
	Order              int32  `db:"display_order"`
	LifecycleState     string `db:"lifecycle_state"`
	// ConnectionTimeoutSeconds is how long the agent may take to connect.
	ConnectionTimeoutSeconds int32      `db:"connection_timeout_seconds"`
	Apps                     []App      `db:"-"`
	CreatedAt                time.Time  `db:"created_at"`
	FirstConnectedAt         *time.Time `db:"first_connected_at"`
	LastConnectedAt          *time.Time `db:"last_connected_at"`
	DisconnectedAt           *time.Time `db:"disconnected_at"`
	// ConnectedReplicaID is the coderd replica holding the agent's relay
	// connection ("" when none, or when that replica did not say).
	ConnectedReplicaID string `db:"connected_replica_id"`
}

// App is a row of workspace_apps.
type App struct {
	ID          string `db:"id"`
	AgentID     string `db:"agent_id"`
	Slug        string `db:"slug"`
	DisplayName string `db:"display_name"`
	URL         string `db:"url"`
	Port        int32  `db:"port"`
	Command     string `db:"command"`
	Icon        string `db:"icon"`
	Subdomain   bool   `db:"subdomain"`
	Share       string `db:"share"`
	External    bool   `db:"external"`
	// Healthcheck is a JSON codersdk.AppHealthcheck, nil for none.
	Healthcheck []byte `db:"healthcheck"`
	// Health is a codersdk.WorkspaceAppHealth value ("" inserts
	// "disabled"); UpdateAppHealths changes it.
	Health  string `db:"health"`
	Group   string `db:"app_group"`
	Order   int32  `db:"display_order"`
	Hidden  bool   `db:"hidden"`
	OpenIn  string `db:"open_in"`
	Tooltip string `db:"tooltip"`
}

// agentColumns are the workspace_agents columns an Agent holds, for a
// table aliased a.
const agentColumns = `a.id, a.resource_id, a.name, a.auth_token, a.operating_system, a.architecture, a.directory, a.env,
	a.scripts, a.metadata, a.display_apps, a.troubleshooting_url, a.motd_file, a.display_order,
	a.lifecycle_state, a.connection_timeout_seconds, a.created_at, a.first_connected_at, a.last_connected_at, a.disconnected_at,
	coalesce(a.connected_replica_id::text, '') AS connected_replica_id`

func jsonOr(b []byte, empty string) []byte {
	if len(b) == 0 {
		return []byte(empty)
	}
	return b
}

// InsertResource records a resource and its agents.
func (db *DB) InsertResource(ctx context.Context, r Resource) error {
	now := db.now()
	r.ID = uuid.NewString()
	if _, err := db.q().Exec(ctx, `INSERT INTO workspace_resources (id, job_id, transition, type, name, hide, icon, daily_cost, metadata, created_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
		r.ID, r.JobID, r.Transition, r.Type, r.Name, r.Hide, r.Icon, r.DailyCost, jsonOr(r.Metadata, "[]"), now); err != nil {
		return mapErr(err)
	}
	for _, a := range r.Agents {
		// Every build gets agent rows of its own; the provider's id is
		// stable across builds, so it cannot be the key.
		a.ID = uuid.NewString()
		if a.Env == nil {
			a.Env = map[string]string{}
		}
		if a.ConnectionTimeoutSeconds <= 0 {
			a.ConnectionTimeoutSeconds = 120
		}
		var displayApps []byte
		if len(a.DisplayApps) > 0 {
			displayApps = a.DisplayApps
		}
		if _, err := db.q().Exec(ctx, `INSERT INTO workspace_agents (id, resource_id, name, auth_token, operating_system, architecture,
				directory, env, scripts, metadata, display_apps, troubleshooting_url, motd_file, display_order, connection_timeout_seconds, created_at)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)`,
			a.ID, r.ID, a.Name, a.AuthToken, a.OperatingSystem, a.Architecture, a.Directory, a.Env,
			jsonOr(a.Scripts, "[]"), jsonOr(a.Metadata, "[]"), displayApps, a.TroubleshootingURL, a.MOTDFile, a.Order,
			a.ConnectionTimeoutSeconds, now); err != nil {
			return fmt.Errorf("insert agent %s: %w", a.Name, mapErr(err))
		}
		for _, app := range a.Apps {
			if app.Share == "" {
				app.Share = "owner"
			}
			var healthcheck []byte
			if len(app.Healthcheck) > 0 {
				healthcheck = app.Healthcheck
			}
			if app.Health == "" {
				app.Health = "disabled"
			}
			if _, err := db.q().Exec(ctx, `INSERT INTO workspace_apps (id, agent_id, slug, display_name, url, port, command, icon, subdomain,
					share, external, healthcheck, health, app_group, display_order, hidden, open_in, tooltip, created_at)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19)`,
				uuid.NewString(), a.ID, app.Slug, app.DisplayName, app.URL, app.Port, app.Command, app.Icon, app.Subdomain,
				app.Share, app.External, healthcheck, app.Health, app.Group, app.Order, app.Hidden, app.OpenIn, app.Tooltip, now); err != nil {
				return fmt.Errorf("insert app %s of agent %s: %w", app.Slug, a.Name, mapErr(err))
			}
		}
	}
	return nil
}

// ResourcesByJobIDs returns the resources (with agents and their apps) of
// the given jobs, keyed by job id.
func (db *DB) ResourcesByJobIDs(ctx context.Context, jobIDs []string) (map[string][]Resource, error) {
	out := map[string][]Resource{}
	if len(jobIDs) == 0 {
		return out, nil
	}
	resources, err := collectAll[Resource](db.q().Query(ctx, `SELECT id, job_id, transition, type, name, hide, icon, daily_cost, metadata, created_at
		FROM workspace_resources WHERE job_id = ANY($1::uuid[]) ORDER BY created_at, type, name`, jobIDs))
	if err != nil {
		return nil, err
	}
	resourceIDs := make([]string, len(resources))
	for i, r := range resources {
		resourceIDs[i] = r.ID
	}
	agents, err := collectAll[Agent](db.q().Query(ctx, `SELECT `+agentColumns+` FROM workspace_agents a
		WHERE a.resource_id = ANY($1::uuid[]) ORDER BY a.display_order, a.name`, resourceIDs))
	if err != nil {
		return nil, err
	}
	agentIDs := make([]string, len(agents))
	for i, a := range agents {
		agentIDs[i] = a.ID
	}
	apps, err := db.appsByAgentIDs(ctx, agentIDs)
	if err != nil {
		return nil, err
	}
	byResource := map[string][]Agent{}
	for _, a := range agents {
		a.Apps = apps[a.ID]
		byResource[a.ResourceID] = append(byResource[a.ResourceID], a)
	}
	for _, r := range resources {
		r.Agents = byResource[r.ID]
		out[r.JobID] = append(out[r.JobID], r)
	}
	return out, nil
}

func (db *DB) appsByAgentIDs(ctx context.Context, agentIDs []string) (map[string][]App, error) {
	out := map[string][]App{}
	if len(agentIDs) == 0 {
		return out, nil
	}
	apps, err := collectAll[App](db.q().Query(ctx, `SELECT id, agent_id, slug, display_name, url, port, command, icon, subdomain, share, external,
			healthcheck, health, app_group, display_order, hidden, open_in, tooltip
		FROM workspace_apps WHERE agent_id = ANY($1::uuid[]) ORDER BY display_order, slug`, agentIDs))
	for _, a := range apps {
		out[a.AgentID] = append(out[a.AgentID], a)
	}
	return out, err
}
