package coderd_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/coder/quartz"

	"airgapcoder/coderd"
	"airgapcoder/coderd/coderdtest"
	"airgapcoder/coderd/database"
	"airgapcoder/codersdk"
	"airgapcoder/internal/testwait"
)

// openDB opens and migrates a fresh test database.
func openDB(t *testing.T) *database.DB {
	t.Helper()
	db, err := database.Open(context.Background(), coderdtest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	if err := db.Migrate(context.Background(), slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
		t.Fatal(err)
	}
	return db
}

// runAPI runs an API's background loops over db until the test ends or
// the returned stop is called.
func runAPI(t *testing.T, db *database.DB, opts coderd.Options) (stop func()) {
	t.Helper()
	opts.DB, opts.Logger = db, slog.New(slog.NewTextHandler(io.Discard, nil))
	api, err := coderd.New(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- api.Run(ctx) }()
	stop = func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("API.Run: %v", err)
		}
	}
	t.Cleanup(func() {
		select {
		case <-ctx.Done():
		default:
			stop()
		}
	})
	return stop
}

func auditTargets(t *testing.T, db *database.DB, f database.AuditLogFilter) []string {
	t.Helper()
	logs, _, err := db.AuditLogs(context.Background(), f)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range logs {
		out = append(out, l.ResourceTarget)
	}
	return out
}

// startedAPI runs an API's background loops (runAPI) on clock and returns
// once Run has done its start-up steps (the journal, the version record,
// the first retention pass): its last is to start the journal's ticker.
func startedAPI(t *testing.T, db *database.DB, clock *quartz.Mock, opts coderd.Options) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	trap := clock.Trap().NewTicker("coderd", "auditJournal")
	defer trap.Close()
	opts.Clock = clock
	stop = runAPI(t, db, opts)
	trap.MustWait(ctx).MustRelease(ctx)
	return stop
}

// TestAuditRetention: records older than --audit-retention are deleted
// when the server starts and hourly after; newer ones stay.
func TestAuditRetention(t *testing.T) {
	ctx := context.Background()
	db := openDB(t)
	clock := quartz.NewMock(t).WithLogger(quartz.NoOpLogger)
	now := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	clock.Set(now)
	insert := func(target string, age time.Duration) {
		t.Helper()
		if _, err := db.InsertAuditLog(ctx, database.AuditLog{Time: now.Add(-age), Action: "login", ResourceType: "user",
			ResourceTarget: target, StatusCode: 201, Success: true}); err != nil {
			t.Fatal(err)
		}
	}
	insert("ancient", 400*24*time.Hour)
	insert("old", 91*24*time.Hour)
	insert("recent", 89*24*time.Hour)
	insert("today", time.Minute)
	f := database.AuditLogFilter{ResourceType: "user"}

	// Without a retention nothing is deleted, at start-up or in the hour
	// after.
	stop := startedAPI(t, db, clock, coderd.Options{})
	advanceCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	coderdtest.AdvanceClock(advanceCtx, t, clock, time.Hour+time.Minute)
	stop()
	if got := auditTargets(t, db, f); !slices.Equal(got, []string{"today", "recent", "old", "ancient"}) {
		t.Fatalf("without retention: got %v, want every record", got)
	}

	// With one, the start-up deletes what is older.
	const retention = 90 * 24 * time.Hour
	startedAPI(t, db, clock, coderd.Options{AuditRetention: retention})
	if got := auditTargets(t, db, f); !slices.Equal(got, []string{"today", "recent"}) {
		t.Fatalf("after the start with a 90-day retention: got %v, want [today recent]", got)
	}
	// A record that passes the retention half an hour later goes at the
	// next hourly pass.
	insert("aging", retention-clock.Since(now)-30*time.Minute)
	coderdtest.AdvanceClock(advanceCtx, t, clock, time.Hour)
	testwait.For(t, 10*time.Second, "the hourly pass deletes [aging]", func() (bool, string) {
		got := auditTargets(t, db, f)
		return slices.Equal(got, []string{"today", "recent"}), fmt.Sprintf("got %v", got)
	})
}

// TestAuditServerVersion: a server starting on a version other than the one
// the deployment last ran writes one record (install, then upgrade or
// rollback); restarts on the same version write none.
func TestAuditServerVersion(t *testing.T) {
	db := openDB(t)
	clock := quartz.NewMock(t).WithLogger(quartz.NoOpLogger)
	records := func() []database.AuditLog {
		t.Helper()
		logs, _, err := db.AuditLogs(context.Background(), database.AuditLogFilter{ResourceType: string(codersdk.AuditResourceDeployment)})
		if err != nil {
			t.Fatal(err)
		}
		return logs
	}
	last := ""
	for _, v := range []string{"v2.1.0", "v2.1.0", "v2.2.0", "v2.2.0", "v2.1.0"} {
		before := len(records())
		// Run records the version before it starts its tickers.
		stop := startedAPI(t, db, clock, coderd.Options{Version: v})
		want := before + 1
		if v == last {
			want = before
		}
		if got := len(records()); got != want {
			t.Errorf("starting %s after %q: %d records, want %d", v, last, got, want)
		}
		stop()
		last = v
	}
	logs := records()
	var got []string
	for _, l := range logs {
		got = append(got, l.Action+" "+l.Description)
		if l.UserID != "" || l.IP != "" || l.StatusCode != http.StatusOK || !l.Success {
			t.Errorf("record %q: got user %q ip %q status %d success %v, want the deployment's own success", l.Description, l.UserID, l.IP, l.StatusCode, l.Success)
		}
	}
	want := []string{
		"upgrade server started version v2.1.0 (previous v2.2.0)",
		"upgrade server started version v2.2.0 (previous v2.1.0)",
		"install server started version v2.1.0 (first start)",
	}
	if !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}

// TestAuditTransactional: a transactional action and its record commit
// together or not at all. A trigger fails the transaction at COMMIT, after
// the audit record was inserted in it, as a crash before the commit would.
func TestAuditTransactional(t *testing.T) {
	ctx := context.Background()
	d, owner, daemon := coderdtest.NewWithDaemon(t, coderdtest.Options{}, "audit-daemon")
	tpl := coderdtest.CreateTemplate(t, owner, daemon, "base", coderdtest.MinimalTemplate, nil)
	ws, err := owner.CreateWorkspace(ctx, codersdk.Me, codersdk.CreateWorkspaceRequest{TemplateID: tpl.ID, Name: "dev"})
	if err != nil {
		t.Fatal(err)
	}
	daemon.RunOne(t)
	exec := func(sql string) {
		t.Helper()
		if _, err := d.DB.Pool().Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	exec(`CREATE FUNCTION fail_at_commit() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'simulated failure after the audit record was written'; END $$`)
	count := func(sql string, args ...any) int {
		t.Helper()
		var n int
		if err := d.DB.Pool().QueryRow(ctx, sql, args...).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	builds := func() int { return count(`SELECT count(*) FROM workspace_builds WHERE workspace_id = $1`, ws.ID) }
	stopRecords := func(success bool) int {
		return count(`SELECT count(*) FROM audit_logs WHERE action = 'stop' AND workspace_name = 'dev' AND success = $1`, success)
	}

	// stopFails asks for a stop build, which must fail with a 500 and leave
	// no build behind (why says why not).
	stopFails := func(t *testing.T, why string) {
		t.Helper()
		before := builds()
		_, err := owner.CreateWorkspaceBuild(ctx, ws.ID, codersdk.CreateWorkspaceBuildRequest{Transition: codersdk.WorkspaceTransitionStop})
		if !codersdk.IsStatus(err, http.StatusInternalServerError) {
			t.Fatalf("build: got %v, want 500", err)
		}
		if got := builds(); got != before {
			t.Errorf("builds: got %d, want %d (%s)", got, before, why)
		}
	}

	t.Run("ActionFailsAtCommit", func(t *testing.T) {
		exec(`CREATE CONSTRAINT TRIGGER fail_builds AFTER INSERT ON workspace_builds
			DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION fail_at_commit()`)
		defer exec(`DROP TRIGGER fail_builds ON workspace_builds`)
		stopFails(t, "the failed build rolled back")
		if n := stopRecords(true); n != 0 {
			t.Errorf("success records of the stop: got %d, want 0 (rolled back with the build)", n)
		}
		// The attempt itself is recorded, as a failure, outside the
		// rolled-back transaction.
		if n := stopRecords(false); n != 1 {
			t.Errorf("failure records of the stop: got %d, want 1", n)
		}
	})

	t.Run("AuditInsertFails", func(t *testing.T) {
		exec(`CREATE TRIGGER fail_audit BEFORE INSERT ON audit_logs FOR EACH ROW EXECUTE FUNCTION fail_at_commit()`)
		defer exec(`DROP TRIGGER fail_audit ON audit_logs`)
		stopFails(t, "an action whose record cannot be written does not happen")
	})

	t.Run("BothCommit", func(t *testing.T) {
		before := builds()
		b, err := owner.CreateWorkspaceBuild(ctx, ws.ID, codersdk.CreateWorkspaceBuildRequest{Transition: codersdk.WorkspaceTransitionStop})
		if err != nil {
			t.Fatal(err)
		}
		if got := builds(); got != before+1 {
			t.Errorf("builds: got %d, want %d", got, before+1)
		}
		if n := count(`SELECT count(*) FROM audit_logs WHERE action = 'stop' AND resource_id = $1 AND success`, b.ID); n != 1 {
			t.Errorf("records of build %s: got %d, want 1", b.ID, n)
		}
	})
}
