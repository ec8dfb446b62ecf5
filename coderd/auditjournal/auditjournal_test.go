package auditjournal_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"airgapcoder/coderd/auditjournal"
	"airgapcoder/coderd/coderdtest"
	"airgapcoder/coderd/database"
)

func TestMain(m *testing.M) { os.Exit(coderdtest.RunMain(m)) }

func openDB(t *testing.T) *database.DB {
	t.Helper()
	ctx := context.Background()
	db, err := database.Open(ctx, coderdtest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	if err := db.Migrate(ctx, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	return db
}

func stored(t *testing.T, db *database.DB) map[string]database.AuditLog {
	t.Helper()
	out := map[string]database.AuditLog{}
	if err := db.EachAuditLog(context.Background(), func(l database.AuditLog) error {
		out[l.Description] = l
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

func rec(desc string) database.AuditLog {
	return database.AuditLog{Action: "install", ResourceType: "deployment", ResourceTarget: "2026.11.1", StatusCode: 200, Success: true,
		Description: desc, AdditionalFields: []byte(`{"os_user":"root"}`)}
}

// TestIngest: records appended while the server is down reach the audit
// log once, with their fields, however often the server starts; a
// database put back to an earlier state (a restore, a rollback) gets back
// what it lost; a torn write costs only itself.
func TestIngest(t *testing.T) {
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)
	db := openDB(t)
	path := filepath.Join(t.TempDir(), "data", "audit-journal.jsonl")

	// No journal yet: nothing to read, no error.
	if n, err := auditjournal.Ingest(ctx, db, path, log); err != nil || n != 0 {
		t.Fatalf("missing journal: %d, %v", n, err)
	}
	if err := auditjournal.Append(path, rec("first"), rec("second")); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("journal mode: %v, %v; want 0600", st.Mode(), err)
	}
	if n, err := auditjournal.Ingest(ctx, db, path, log); err != nil || n != 2 {
		t.Fatalf("first ingest: %d, %v; want 2", n, err)
	}
	got := stored(t, db)
	first, ok := got["first"]
	if !ok || first.Action != "install" || first.ResourceTarget != "2026.11.1" || !first.Success || first.ID == "" || first.Time.IsZero() {
		t.Fatalf("stored record: %+v", first)
	}
	var fields map[string]string
	if err := json.Unmarshal(first.AdditionalFields, &fields); err != nil || fields["os_user"] != "root" {
		t.Fatalf("additional fields: %s, %v", first.AdditionalFields, err)
	}
	// A second start reads nothing new.
	if n, err := auditjournal.Ingest(ctx, db, path, log); err != nil || n != 0 {
		t.Fatalf("second ingest: %d, %v; want 0", n, err)
	}

	// A crash mid-append leaves a torn line; the next record still lands.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(`{"id":"0b6d","action":"ins`); err != nil {
		t.Fatal(err)
	}
	f.Close()
	// Half a line is not read yet: it may still be being written.
	if n, err := auditjournal.Ingest(ctx, db, path, log); err != nil || n != 0 {
		t.Fatalf("ingest with a torn tail: %d, %v; want 0", n, err)
	}
	if err := auditjournal.Append(path, rec("third")); err != nil {
		t.Fatal(err)
	}
	if n, err := auditjournal.Ingest(ctx, db, path, log); err != nil || n != 1 {
		t.Fatalf("ingest after a torn write: %d, %v; want 1", n, err)
	}
	if _, ok := stored(t, db)["third"]; !ok {
		t.Fatal("the record after the torn write is missing")
	}

	// The database goes back to before any of it (a restore): the next
	// start copies everything back, once.
	if _, err := db.DeleteAuditLogsBefore(ctx, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := db.SetDeploymentValue(ctx, "audit_journal_offset", ""); err != nil {
		t.Fatal(err)
	}
	if n, err := auditjournal.Ingest(ctx, db, path, log); err != nil || n != 3 {
		t.Fatalf("ingest after a restore: %d, %v; want 3", n, err)
	}
	// Records present in both are stored once.
	if err := db.SetDeploymentValue(ctx, "audit_journal_offset", "0"); err != nil {
		t.Fatal(err)
	}
	if n, err := auditjournal.Ingest(ctx, db, path, log); err != nil || n != 0 {
		t.Fatalf("re-reading the whole journal: %d, %v; want 0", n, err)
	}
	if got := len(stored(t, db)); got != 3 {
		t.Fatalf("%d records stored; want 3", got)
	}
}

// TestConcurrentAppends: tools appending at once never interleave their
// lines.
func TestConcurrentAppends(t *testing.T) {
	ctx := context.Background()
	db := openDB(t)
	path := filepath.Join(t.TempDir(), "audit-journal.jsonl")
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			w, err := auditjournal.Open(path)
			if err != nil {
				t.Error(err)
				return
			}
			defer w.Close()
			for j := range 50 {
				r := rec("")
				r.Description = string(rune('a'+i)) + "-" + time.Duration(j).String()
				if err := w.Append(r, r); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	n, err := auditjournal.Ingest(ctx, db, path, slog.New(slog.DiscardHandler))
	if err != nil || n != 8*50*2 {
		t.Fatalf("ingested %d, %v; want %d", n, err, 8*50*2)
	}
}
