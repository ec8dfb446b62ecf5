package database_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"airgapcoder/coderd/database"
)

// TestWorkspaceQueries runs every query of templates, jobs, workspaces,
// builds, agents and schedules once against the migrated schema. Rows are
// mapped onto structs by column name, so a column that a query selects and
// its struct lacks (or the reverse) fails here, not in production.
func TestWorkspaceQueries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openQueryDB(t)
	if err := db.Ping(ctx); err != nil {
		t.Fatalf("ping: %v", err)
	}
	check := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}

	// Organizations, users and files belong to other files' queries: seed
	// them by hand.
	org, user, file := uuid.NewString(), uuid.NewString(), uuid.NewString()
	seed(t, db.Pool(), ownerRows(org, user, file)...)
	tags := map[string]string{"scope": "organization"}
	insertJob := func(typ string) database.ProvisionerJob {
		t.Helper()
		j, err := db.InsertJob(ctx, database.InsertJobParams{OrganizationID: org, InitiatorID: user, Type: typ, Tags: tags, FileID: file})
		check("insert job", err)
		return j
	}

	// Templates and their versions.
	importJob := insertJob(database.JobTypeTemplateVersionImport)
	if got, err := db.JobByID(ctx, importJob.ID); err != nil || got.ID != importJob.ID || got.Status() != database.JobPending || got.Tags["scope"] != "organization" {
		t.Fatalf("job by id: got %+v (%v), want the pending job %s", got, err, importJob.ID)
	}
	if _, err := db.JobByID(ctx, uuid.NewString()); !errors.Is(err, database.ErrNotFound) {
		t.Fatalf("unknown job: got %v, want ErrNotFound", err)
	}
	v1, err := db.InsertTemplateVersion(ctx, database.TemplateVersion{OrganizationID: org, Name: "v1", JobID: importJob.ID, CreatedBy: user})
	check("insert version", err)
	if v1.CreatedByName != "alice" || v1.TemplateID != nil || string(v1.UserVariableValues) != "[]" {
		t.Fatalf("inserted version: got %+v, want one by alice without a template", v1)
	}
	check("set version import", db.SetTemplateVersionImport(ctx, v1.ID, []byte(`[{"name":"region"}]`), []byte(`[]`), []byte(`[]`)))
	if got, err := db.TemplateVersionByJobID(ctx, importJob.ID); err != nil || got.ID != v1.ID || string(got.Parameters) != `[{"name": "region"}]` {
		t.Fatalf("version by job: got %+v (%v), want %s with its parameters", got, err, v1.ID)
	}
	tpl, err := db.InsertTemplate(ctx, database.Template{OrganizationID: org, Name: "tpl", DisplayName: "Template", ActiveVersionID: v1.ID, CreatedBy: user})
	check("insert template", err)
	if tpl.CreatedByName != "alice" || tpl.ActiveVersionID != v1.ID {
		t.Fatalf("inserted template: got %+v, want one by alice on %s", tpl, v1.ID)
	}
	if got, err := db.TemplateByName(ctx, org, "TPL"); err != nil || got.ID != tpl.ID {
		t.Fatalf("template by name: got %+v (%v), want %s", got, err, tpl.ID)
	}
	if got, err := db.TemplateVersionByID(ctx, v1.ID); err != nil || got.TemplateID == nil || *got.TemplateID != tpl.ID {
		t.Fatalf("version by id: got %+v (%v), want it attached to %s", got, err, tpl.ID)
	}
	v2Job := insertJob(database.JobTypeTemplateVersionImport)
	v2, err := db.InsertTemplateVersion(ctx, database.TemplateVersion{OrganizationID: org, Name: "v2", JobID: v2Job.ID, CreatedBy: user})
	check("insert version", err)
	check("attach version", db.AttachTemplateVersion(ctx, v2.ID, tpl.ID))
	check("promote version", db.UpdateTemplateActiveVersion(ctx, tpl.ID, v2.ID))
	if got, err := db.TemplateVersionsByTemplate(ctx, tpl.ID); err != nil || len(got) != 2 {
		t.Fatalf("template versions: got %d (%v), want 2", len(got), err)
	}
	if got, err := db.Templates(ctx, org); err != nil || len(got) != 1 || got[0].ActiveVersionID != v2.ID {
		t.Fatalf("templates: got %+v (%v), want one on %s", got, err, v2.ID)
	}
	if n, err := db.CountTemplates(ctx); err != nil || n != 1 {
		t.Fatalf("count templates: got %d (%v), want 1", n, err)
	}
	schedule := database.TemplateSchedule{TemplateID: tpl.ID, DefaultTTLMillis: 3_600_000, TimeTilDormantMillis: 1000,
		TimeTilDormantAutodeleteMillis: 2000, MaxTTLMillis: 7_200_000}
	check("set template schedule", db.SetTemplateSchedule(ctx, schedule))
	if got, err := db.TemplateSchedules(ctx, []string{tpl.ID}); err != nil || got[tpl.ID] != schedule {
		t.Fatalf("template schedules: got %+v (%v), want %+v", got, err, schedule)
	}

	// A workspace with its first build.
	var ws, build string
	buildJob := insertJob(database.JobTypeWorkspaceBuild)
	check("create workspace", db.InTx(ctx, func(tx *database.DB) error {
		var err error
		if ws, err = tx.InsertWorkspace(ctx, org, user, tpl.ID, "dev"); err != nil {
			return err
		}
		if build, err = tx.InsertWorkspaceBuild(ctx, database.InsertBuildParams{WorkspaceID: ws, TemplateVersionID: v2.ID,
			Transition: "start", InitiatorID: user, JobID: buildJob.ID}); err != nil {
			return err
		}
		return tx.SetJobInput(ctx, buildJob.ID, database.JobInput{WorkspaceBuildID: build})
	}))
	w, err := db.WorkspaceByID(ctx, ws)
	check("workspace by id", err)
	if w.OwnerName != "alice" || w.TemplateName != "tpl" || w.TemplateActiveVersionID != v2.ID || w.LatestBuild.ID != build ||
		w.LatestBuild.BuildNumber != 1 || w.LatestBuild.InitiatorName != "alice" || w.LatestBuild.TemplateVersionName != "v2" ||
		w.LatestBuild.Job.ID != buildJob.ID || w.LatestBuild.Job.Input.WorkspaceBuildID != build {
		t.Fatalf("workspace: got %+v, want dev of alice on tpl with build 1 (%s) of job %s", w, build, buildJob.ID)
	}
	if _, err := db.WorkspaceByID(ctx, "not-a-uuid"); !errors.Is(err, database.ErrNotFound) {
		t.Fatalf("workspace by bad id: got %v, want ErrNotFound", err)
	}
	if got, err := db.WorkspaceByOwnerAndName(ctx, user, "DEV"); err != nil || got.ID != ws {
		t.Fatalf("workspace by name: got %+v (%v), want %s", got, err, ws)
	}
	for _, f := range []database.WorkspaceFilter{{}, {OwnerID: user, TemplateID: tpl.ID, Name: "de", Limit: 1, Offset: 0}} {
		got, n, err := db.Workspaces(ctx, f)
		if err != nil || n != 1 || len(got) != 1 || got[0].LatestBuild.Job.ID != buildJob.ID {
			t.Fatalf("workspaces %+v: got %+v, count %d (%v), want %s", f, got, n, err, ws)
		}
	}
	if n, err := db.CountWorkspaces(ctx); err != nil || n != 1 {
		t.Fatalf("count workspaces: got %d (%v), want 1", n, err)
	}
	if n, err := db.CountWorkspacesByTemplate(ctx, tpl.ID); err != nil || n != 1 {
		t.Fatalf("count workspaces of template: got %d (%v), want 1", n, err)
	}

	// A daemon works off the queue: two imports, then the build.
	daemon, err := db.UpsertProvisionerDaemon(ctx, database.ProvisionerDaemon{OrganizationID: org, Name: "d1", Version: "v0", Tags: tags})
	check("upsert daemon", err)
	if got, err := db.ProvisionerDaemonByID(ctx, daemon.ID); err != nil || got.Name != "d1" || got.CurrentJobID != nil || !got.CreatedAt.Equal(daemon.CreatedAt) {
		t.Fatalf("daemon by id: got %+v (%v), want %+v", got, err, daemon)
	}
	check("touch daemon", db.TouchProvisionerDaemon(ctx, daemon.ID))
	if n, avail, last, err := db.MatchedProvisioners(ctx, org, tags, time.Now().Add(-time.Minute)); err != nil || n != 1 || avail != 1 || last == nil {
		t.Fatalf("matched provisioners: got %d, %d available, last seen %v (%v), want 1, 1, a time", n, avail, last, err)
	}
	if pos, size, err := db.QueuePosition(ctx, buildJob); err != nil || pos != 3 || size != 3 {
		t.Fatalf("queue position: got %d of %d (%v), want 3 of 3", pos, size, err)
	}
	for _, want := range []string{importJob.ID, v2Job.ID, buildJob.ID} {
		got, err := db.AcquireJob(ctx, org, daemon.ID, tags)
		if err != nil || got.ID != want || got.WorkerID == nil || *got.WorkerID != daemon.ID || got.Status() != database.JobRunning {
			t.Fatalf("acquire: got %+v (%v), want %s running on %s", got, err, want, daemon.ID)
		}
		if want == buildJob.ID {
			break
		}
		if done, err := db.FinishJob(ctx, want, daemon.ID, "", ""); err != nil || done.Status() != database.JobSucceeded {
			t.Fatalf("finish %s: got %+v (%v), want it succeeded", want, done, err)
		}
	}
	if _, err := db.AcquireJob(ctx, org, daemon.ID, tags); !errors.Is(err, database.ErrNotFound) {
		t.Fatalf("acquire from an empty queue: got %v, want ErrNotFound", err)
	}
	if canceled, err := db.HeartbeatJob(ctx, buildJob.ID, daemon.ID); err != nil || canceled {
		t.Fatalf("heartbeat: got canceled %v (%v), want false", canceled, err)
	}
	if ok, err := db.DaemonHoldsFile(ctx, daemon.ID, file); err != nil || !ok {
		t.Fatalf("daemon holds file: got %v (%v), want true", ok, err)
	}
	if got, err := db.ProvisionerDaemons(ctx, org); err != nil || len(got) != 1 || got[0].CurrentJobID == nil || *got[0].CurrentJobID != buildJob.ID {
		t.Fatalf("daemons: got %+v (%v), want d1 on %s", got, err, buildJob.ID)
	}
	check("insert job logs", db.InsertJobLogs(ctx, buildJob.ID, []database.JobLog{{Source: "provisioner", Level: "info", Stage: "Plan", Output: "planning"}}))
	if got, err := db.JobLogsAfter(ctx, buildJob.ID, 0); err != nil || len(got) != 1 || got[0].Output != "planning" || got[0].Stage != "Plan" {
		t.Fatalf("job logs: got %+v (%v), want the planning line", got, err)
	}

	// The build's resources, agent and apps.
	token := uuid.NewString()
	check("insert resource", db.InsertResource(ctx, database.Resource{JobID: buildJob.ID, Transition: "start", Type: "docker_container", Name: "dev",
		Agents: []database.Agent{{Name: "main", AuthToken: token, OperatingSystem: "linux", Architecture: "amd64",
			Env: map[string]string{"A": "b"}, Apps: []database.App{{Slug: "code", DisplayName: "Code", Port: 8080, Group: "tools"}}}}}))
	resources, err := db.ResourcesByJobIDs(ctx, []string{buildJob.ID})
	check("resources", err)
	if rs := resources[buildJob.ID]; len(rs) != 1 || len(rs[0].Agents) != 1 || len(rs[0].Agents[0].Apps) != 1 || rs[0].Agents[0].Apps[0].Group != "tools" {
		t.Fatalf("resources: got %+v, want one with agent main and app code", rs)
	}
	agent := resources[buildJob.ID][0].Agents[0]
	app := agent.Apps[0]
	if got, err := db.AgentByAuthToken(ctx, token); err != nil || got.ID != agent.ID || got.Env["A"] != "b" || got.ConnectionTimeoutSeconds != 120 {
		t.Fatalf("agent by token: got %+v (%v), want %s", got, err, agent.ID)
	}
	check("agent startup", db.UpdateAgentStartup(ctx, agent.ID, "v2.0.0", "linux", "arm64", "/home/alice"))
	check("agent ports", db.UpdateAgentPorts(ctx, agent.ID, []database.ListeningPort{{Network: "tcp", Port: 8080}}))
	check("agent lifecycle", db.UpdateAgentLifecycle(ctx, agent.ID, "ready", time.Now()))
	replica := uuid.NewString()
	check("agent connected", db.MarkAgentConnected(ctx, agent.ID, time.Now(), replica))
	wa, err := db.AgentByID(ctx, agent.ID)
	check("agent by id", err)
	if wa.WorkspaceID != ws || wa.BuildID != build || wa.JobID != buildJob.ID || !wa.LatestBuild || wa.OwnerName != "alice" || wa.WorkspaceName != "dev" ||
		wa.Version != "v2.0.0" || wa.Architecture != "arm64" || wa.LifecycleState != "ready" || wa.ConnectedReplicaID != replica ||
		wa.FirstConnectedAt == nil || len(wa.ListeningPorts) != 1 {
		t.Fatalf("workspace agent: got %+v, want main of dev, build %s, v2.0.0 on arm64, ready, connected to %s", wa, build, replica)
	}
	check("agent disconnected", db.MarkAgentDisconnected(ctx, agent.ID, time.Now(), replica))
	runtimes, err := db.AgentRuntimes(ctx, []string{agent.ID})
	if rt := runtimes[agent.ID]; err != nil || rt.ExpandedDirectory != "/home/alice" || len(rt.ListeningPorts) != 1 || rt.LogsOverflowed {
		t.Fatalf("agent runtimes: got %+v (%v), want /home/alice with one port", runtimes, err)
	}
	if got, err := db.AgentByID(ctx, agent.ID); err != nil || got.ConnectedReplicaID != "" || got.DisconnectedAt == nil {
		t.Fatalf("disconnected agent: got replica %q, disconnected at %v (%v), want none and a time", got.ConnectedReplicaID, got.DisconnectedAt, err)
	}
	check("app healths", db.UpdateAppHealths(ctx, agent.ID, map[string]string{app.ID: "healthy"}))
	if got, err := db.AgentAppsByAgentID(ctx, agent.ID); err != nil || len(got) != 1 || got[0].Health != "healthy" || got[0].Port != 8080 {
		t.Fatalf("agent apps: got %+v (%v), want code, healthy", got, err)
	}
	check("agent logs", db.InsertAgentLogs(ctx, agent.ID, buildJob.ID, []database.AgentLog{{Level: "info", Output: "hello", Source: "Startup Script"}},
		[]database.JobLog{{Source: "provisioner_daemon", Level: "info", Stage: "Startup Script", Output: "hello"}}, 1<<20))
	if got, err := db.AgentLogsAfter(ctx, agent.ID, 0); err != nil || len(got) != 1 || got[0].Source != "Startup Script" {
		t.Fatalf("agent logs: got %+v (%v), want hello from the Startup Script", got, err)
	}
	collected := time.Now().UTC().Truncate(time.Microsecond)
	check("agent metadata", db.UpsertAgentMetadata(ctx, []database.AgentMetadataResult{{AgentID: agent.ID, Key: "cpu", Value: "12%", CollectedAt: collected}}))
	if got, err := db.AgentMetadataResults(ctx, []string{agent.ID}); err != nil || got[agent.ID]["cpu"].Value != "12%" || !got[agent.ID]["cpu"].CollectedAt.Equal(collected) {
		t.Fatalf("agent metadata: got %+v (%v), want cpu 12%%", got, err)
	}
	if got, err := db.AgentWorkspaceID(ctx, agent.ID); err != nil || got != ws {
		t.Fatalf("agent workspace: got %q (%v), want %s", got, err, ws)
	}

	// The build ends; its deadline and the scheduler's view of it.
	check("set state", db.SetWorkspaceBuildState(ctx, build, []byte("state-1")))
	if got, err := db.WorkspaceBuildState(ctx, build); err != nil || string(got) != "state-1" {
		t.Fatalf("build state: got %q (%v), want state-1", got, err)
	}
	ttl := int64(3_600_000)
	check("set ttl", db.SetWorkspaceTTL(ctx, ws, &ttl))
	if _, err := db.FinishJob(ctx, buildJob.ID, daemon.ID, "", ""); err != nil {
		t.Fatalf("finish build: %v", err)
	}
	check("arm deadline", db.ArmBuildDeadline(ctx, build))
	deadlines, err := db.BuildDeadlines(ctx, []string{build})
	check("build deadlines", err)
	maxDeadlines, err := db.BuildMaxDeadlines(ctx, []string{build})
	check("build max deadlines", err)
	if d, m := deadlines[build], maxDeadlines[build]; d.IsZero() || m.IsZero() || !d.Before(m) {
		t.Fatalf("armed build: got deadline %v, max deadline %v, want both set, the deadline first", d, m)
	}
	check("clear deadline", db.SetBuildDeadline(ctx, build, time.Time{}))
	if got, err := db.BuildDeadlines(ctx, []string{build}); err != nil || !got[build].IsZero() {
		t.Fatalf("cleared deadline: got %v (%v), want the zero time", got[build], err)
	}
	if moved, err := db.BumpWorkspaceActivity(ctx, ws, time.Now()); err != nil || moved {
		t.Fatalf("bump without a deadline: got moved %v (%v), want false", moved, err)
	}
	past := time.Now().Add(-time.Minute)
	check("set deadline", db.SetBuildDeadline(ctx, build, past))
	check("set reason", db.SetBuildReason(ctx, build, "autostart"))
	if got, err := db.LifecycleCandidates(ctx, time.Now()); err != nil || len(got) != 1 || got[0].LatestBuildID != build || got[0].Transition != "start" ||
		!got[0].Deadline.Equal(past.Truncate(time.Microsecond)) {
		t.Fatalf("lifecycle candidates: got %+v (%v), want build %s due at %v", got, err, build, past)
	}
	setAt := time.Now().UTC().Truncate(time.Microsecond)
	check("set autostart", db.SetWorkspaceAutostart(ctx, ws, "CRON_TZ=UTC 0 9 * * 1-5", setAt))
	if got, err := db.WorkspaceSchedules(ctx, []string{ws}); err != nil || got[ws].TTLMillis == nil || *got[ws].TTLMillis != ttl ||
		got[ws].AutostartSchedule != "CRON_TZ=UTC 0 9 * * 1-5" || !got[ws].AutostartScheduleSetAt.Equal(setAt) {
		t.Fatalf("workspace schedules: got %+v (%v), want a TTL of %d and the weekday schedule", got, err, ttl)
	}
	if b, err := db.WorkspaceBuildByID(ctx, build); err != nil || b.Reason != "autostart" || b.Job.Status() != database.JobSucceeded {
		t.Fatalf("build by id: got %+v (%v), want the autostart build, succeeded", b, err)
	}

	// A stop build, then dormancy.
	stopJob := insertJob(database.JobTypeWorkspaceBuild)
	stop, err := db.InsertWorkspaceBuild(ctx, database.InsertBuildParams{WorkspaceID: ws, TemplateVersionID: v2.ID, Transition: "stop",
		InitiatorID: user, JobID: stopJob.ID, RichParameterValues: []byte(`[{"name":"region","value":"eu"}]`)})
	check("insert stop build", err)
	if got, err := db.LatestStateBefore(ctx, ws, 2); err != nil || string(got) != "state-1" {
		t.Fatalf("state before build 2: got %q (%v), want state-1", got, err)
	}
	if got, err := db.WorkspaceBuildByNumber(ctx, ws, 2); err != nil || got.ID != stop || got.Transition != "stop" {
		t.Fatalf("build 2: got %+v (%v), want the stop build %s", got, err, stop)
	}
	if _, err := db.AcquireJob(ctx, org, daemon.ID, tags); err != nil {
		t.Fatalf("acquire stop: %v", err)
	}
	if _, err := db.FinishJob(ctx, stopJob.ID, daemon.ID, "", ""); err != nil {
		t.Fatalf("finish stop: %v", err)
	}
	if got, err := db.WorkspaceBuildByJobID(ctx, stopJob.ID); err != nil || got.ID != stop || string(got.RichParameterValues) != `[{"name": "region", "value": "eu"}]` {
		t.Fatalf("build by job: got %+v (%v), want %s with its parameters", got, err, stop)
	}
	if got, err := db.WorkspaceBuilds(ctx, ws); err != nil || len(got) != 2 || got[0].ID != stop || got[1].ID != build {
		t.Fatalf("builds: got %+v (%v), want %s then %s", got, err, stop, build)
	}
	later := time.Now().Add(time.Hour)
	if got, err := db.DormancyCandidates(ctx, later); err != nil || len(got) != 1 || got[0].LatestBuildID != stop || got[0].Delete {
		t.Fatalf("dormancy candidates: got %+v (%v), want %s to be marked dormant", got, err, ws)
	}
	dormantAt := time.Now().UTC().Truncate(time.Microsecond)
	if changed, err := db.SetWorkspaceDormant(ctx, ws, true, dormantAt, stop); err != nil || !changed {
		t.Fatalf("mark dormant: got changed %v (%v), want true", changed, err)
	}
	if got, err := db.WorkspaceDormancies(ctx, []string{ws}); err != nil || !got[ws].DormantAt.Equal(dormantAt) || !got[ws].DeletingAt.Equal(dormantAt.Add(2*time.Second)) {
		t.Fatalf("dormancy: got %+v (%v), want dormant at %v, deleted 2s later", got, err, dormantAt)
	}
	if got, err := db.DormancyCandidates(ctx, later); err != nil || len(got) != 1 || !got[0].Delete {
		t.Fatalf("dormancy candidates: got %+v (%v), want %s to be deleted", got, err, ws)
	}
	if changed, err := db.SetWorkspaceDormant(ctx, ws, false, time.Now(), ""); err != nil || !changed {
		t.Fatalf("mark active: got changed %v (%v), want true", changed, err)
	}

	// Jobs that end without a daemon finishing them.
	canceled, err := db.CancelJob(ctx, insertJob(database.JobTypeWorkspaceBuild).ID)
	if err != nil || canceled.Status() != database.JobCanceled {
		t.Fatalf("cancel pending job: got %+v (%v), want it canceled", canceled, err)
	}
	stale := insertJob(database.JobTypeWorkspaceBuild)
	if _, err := db.AcquireJob(ctx, org, daemon.ID, tags); err != nil {
		t.Fatalf("acquire: %v", err)
	}
	if got, err := db.FailStaleJobs(ctx, time.Now().Add(time.Hour)); err != nil || len(got) != 1 || got[0].ID != stale.ID || got[0].ErrorCode != "HEARTBEAT_TIMEOUT" {
		t.Fatalf("fail stale jobs: got %+v (%v), want %s timed out", got, err, stale.ID)
	}

	ran := false
	if held, err := db.WithScheduleLock(ctx, func() error { ran = true; return nil }); err != nil || !held || !ran {
		t.Fatalf("schedule lock: got held %v, ran %v (%v), want both", held, ran, err)
	}

	// Deletion hides workspaces and templates.
	check("delete workspace", db.MarkWorkspaceDeleted(ctx, ws))
	if _, err := db.WorkspaceByOwnerAndName(ctx, user, "dev"); !errors.Is(err, database.ErrNotFound) {
		t.Fatalf("deleted workspace by name: got %v, want ErrNotFound", err)
	}
	if got, n, err := db.Workspaces(ctx, database.WorkspaceFilter{}); err != nil || n != 0 || got == nil || len(got) != 0 {
		t.Fatalf("workspaces after delete: got %v, count %d (%v), want an empty list", got, n, err)
	}
	check("delete template", db.DeleteTemplate(ctx, tpl.ID))
	if _, err := db.TemplateByID(ctx, tpl.ID); !errors.Is(err, database.ErrNotFound) {
		t.Fatalf("deleted template: got %v, want ErrNotFound", err)
	}
	if now := db.Now(); now.Location() != time.UTC {
		t.Fatalf("now: got %v, want a UTC time", now)
	}
}

// TestWorkspacePages seeds 3,000 workspaces of 100 owners, inserted in
// another order than the list's. Pages of the list put together are the
// whole list, by owner's username then name; and a page is read from
// migration 000019's indexes, not by sorting every live workspace (a
// dashboard on a large site reads the first page many times a second).
func TestWorkspacePages(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openQueryDB(t)
	org, user, file := uuid.NewString(), uuid.NewString(), uuid.NewString()
	seed(t, db.Pool(), ownerRows(org, user, file)...)
	job, err := db.InsertJob(ctx, database.InsertJobParams{OrganizationID: org, InitiatorID: user, Type: database.JobTypeTemplateVersionImport, FileID: file})
	must(t, "insert job", err)
	v, err := db.InsertTemplateVersion(ctx, database.TemplateVersion{OrganizationID: org, Name: "v1", JobID: job.ID, CreatedBy: user})
	must(t, "insert version", err)
	tpl, err := db.InsertTemplate(ctx, database.Template{OrganizationID: org, Name: "tpl", ActiveVersionID: v.ID, CreatedBy: user})
	must(t, "insert template", err)
	// user000..user099 and ws00..ws29 each, in a scrambled order; a
	// workspace's job and build share its id.
	seed(t, db.Pool(),
		row{`INSERT INTO users (id, email, username, hashed_password, created_at, updated_at, last_seen_at)
			SELECT gen_random_uuid(), n || '@example.com', n, '\x00', now(), now(), now()
			FROM generate_series(1, 100) g, LATERAL (SELECT 'user' || lpad((g * 37 % 100)::text, 3, '0') AS n) u`, nil},
		row{`INSERT INTO workspaces (id, organization_id, owner_id, template_id, name, created_at, updated_at)
			SELECT gen_random_uuid(), $1, u.id, $2, 'ws' || lpad((g * 7 % 30)::text, 2, '0'), now(), now()
			FROM users u, generate_series(1, 30) g WHERE u.username LIKE 'user%'`, []any{org, tpl.ID}},
		row{`INSERT INTO provisioner_jobs (id, created_at, updated_at, organization_id, initiator_id, type, input, tags, file_id)
			SELECT id, now(), now(), $1, $2, $3, '{}', '{}', $4 FROM workspaces`, []any{org, user, database.JobTypeWorkspaceBuild, file}},
		row{`INSERT INTO workspace_builds (id, workspace_id, template_version_id, build_number, transition, initiator_id, job_id, created_at, updated_at)
			SELECT id, id, $1, 1, 'start', owner_id, id, now(), now() FROM workspaces`, []any{v.ID}},
		row{`ANALYZE users, workspaces, provisioner_jobs, workspace_builds`, nil},
	)

	var got []string
	var lastKey string
	for offset := 0; ; offset += 250 {
		page, count, err := db.Workspaces(ctx, database.WorkspaceFilter{Limit: 250, Offset: offset})
		must(t, "workspaces page", err)
		if count != 3000 {
			t.Fatalf("count: got %d, want 3000", count)
		}
		if len(page) == 0 {
			break
		}
		for _, w := range page {
			key := w.OwnerName + "/" + w.Name
			if key <= lastKey {
				t.Fatalf("at %d: %s after %s, want owners by username then names", len(got), key, lastKey)
			}
			lastKey = key
			got = append(got, w.ID)
		}
	}
	if len(got) != 3000 || lastKey != "user099/ws29" {
		t.Fatalf("pages put together: %d workspaces ending with %s, want 3000 ending with user099/ws29", len(got), lastKey)
	}

	q, args := database.WorkspacePageQuery(database.WorkspaceFilter{Limit: 25})
	rows, err := db.Pool().Query(ctx, "EXPLAIN "+q, args...)
	plan, err := pgx.CollectRows(rows, pgx.RowTo[string])
	must(t, "explain", err)
	text := strings.Join(plan, "\n")
	if !strings.Contains(text, "workspaces_owner_name_order") || strings.Contains(text, "Seq Scan on workspaces") {
		t.Errorf("the first page of 3,000 workspaces does not come from the list's indexes:\n%s", text)
	}
}
