package coderd_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"airgapcoder/coderd"
	"airgapcoder/coderd/auditjournal"
	"airgapcoder/coderd/coderdtest"
	"airgapcoder/coderd/database"
	"airgapcoder/internal/testfs"
	"airgapcoder/internal/testwait"
)

var discard = slog.New(slog.DiscardHandler)

// storedAudit returns the audit log of db by description, oldest first.
func storedAudit(t *testing.T, db *database.DB) (map[string]database.AuditLog, []database.AuditLog) {
	t.Helper()
	byDesc := map[string]database.AuditLog{}
	var all []database.AuditLog
	if err := db.EachAuditLog(context.Background(), func(l database.AuditLog) error {
		byDesc[l.Description] = l
		all = append(all, l)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return byDesc, all
}

func journalRec(desc string) auditjournal.Record {
	return auditjournal.Record{UserAgent: "coder appliance test", Action: "install", ResourceType: "deployment", ResourceTarget: "2026.11.1",
		StatusCode: 200, Success: true, Description: desc, AdditionalFields: json.RawMessage(`{"os_user":"root","host":"coder-1"}`)}
}

func mustImport(t *testing.T, db *database.DB, path string, log *slog.Logger, want int) {
	t.Helper()
	n, err := coderd.ImportAuditJournal(context.Background(), db, path, log)
	if err != nil || n != want {
		t.Fatalf("import: %d new, %v; want %d", n, err, want)
	}
}

// TestAuditJournalImport: records appended while the server is down reach
// the audit log once, with their fields, however often the journal is
// read; a database put back to an earlier state (a restore, a rollback)
// gets back what it lost; a torn write costs only itself.
func TestAuditJournalImport(t *testing.T) {
	ctx := context.Background()
	db := openDB(t)
	path := filepath.Join(t.TempDir(), "data", "audit-journal.jsonl")

	mustImport(t, db, path, discard, 0) // no journal yet
	if err := auditjournal.Append(path, journalRec("first"), journalRec("second")); err != nil {
		t.Fatal(err)
	}
	mustImport(t, db, path, discard, 2)
	got, _ := storedAudit(t, db)
	first := got["first"]
	if first.Action != "install" || first.ResourceType != "deployment" || first.ResourceTarget != "2026.11.1" || !first.Success ||
		first.StatusCode != 200 || first.UserAgent != "coder appliance test" || first.ID == "" || first.Time.IsZero() {
		t.Fatalf("stored record: %+v", first)
	}
	var fields map[string]string
	if err := json.Unmarshal(first.AdditionalFields, &fields); err != nil || fields["os_user"] != "root" || fields["host"] != "coder-1" {
		t.Fatalf("additional fields: %s, %v", first.AdditionalFields, err)
	}
	mustImport(t, db, path, discard, 0) // nothing new

	// A crash mid-append leaves a torn line: not read while it may still
	// be being written, skipped once the next record follows it.
	testfs.Append(t, path, `{"v":1,"id":"0b6d","action":"ins`)
	mustImport(t, db, path, discard, 0)
	if err := auditjournal.Append(path, journalRec("third")); err != nil {
		t.Fatal(err)
	}
	mustImport(t, db, path, discard, 1)

	// The database goes back to before any of it (a restore): the next
	// read copies everything back, once.
	if _, err := db.DeleteAuditLogsBefore(ctx, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := db.SetDeploymentValue(ctx, coderd.JournalOffsetKey, ""); err != nil {
		t.Fatal(err)
	}
	mustImport(t, db, path, discard, 3)
	if err := db.SetDeploymentValue(ctx, coderd.JournalOffsetKey, "0"); err != nil {
		t.Fatal(err)
	}
	mustImport(t, db, path, discard, 0) // what both hold is stored once
	if _, all := storedAudit(t, db); len(all) != 3 {
		t.Fatalf("%d records stored; want 3", len(all))
	}
}

// TestAuditJournalLegacy: a journal written before the format had
// versions (lines in the shape of the old rows, without "v") is still
// read, every field kept, next to today's lines.
func TestAuditJournalLegacy(t *testing.T) {
	db := openDB(t)
	legacy, err := os.ReadFile(filepath.Join("auditjournal", "testdata", "v0.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "audit-journal.jsonl")
	if err := os.WriteFile(path, legacy, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := auditjournal.Append(path, journalRec("today's")); err != nil {
		t.Fatal(err)
	}
	mustImport(t, db, path, discard, 4)
	got, _ := storedAudit(t, db)
	want := database.AuditLog{ID: "c0ffee00-1234-4abc-8def-000000000042", Time: time.Date(2026, 11, 21, 15, 30, 0, 500000000, time.UTC),
		UserID: "5d1e0b2a-7c3f-4e8a-9b6d-2a4c6e8f0a1b", Username: "admin", IP: "10.0.0.7", UserAgent: "Mozilla/5.0", Action: "create",
		ResourceType: "workspace", ResourceID: "e4b2c1d0-aaaa-4bbb-8ccc-dddddddddddd", ResourceTarget: "dev", WorkspaceOwner: "admin",
		WorkspaceName: "dev", StatusCode: 201, Success: true, AdditionalFields: []byte(`{}`), Description: "admin created workspace admin/dev"}
	row := got[want.Description]
	row.Time = row.Time.UTC()
	if !reflect.DeepEqual(row, want) {
		t.Errorf("the legacy workspace record:\ngot  %+v\nwant %+v", row, want)
	}
	upgrade := got["upgrade to 2026.11.3: failed: the new server did not become healthy (by root on coder-1)"]
	if upgrade.Success || upgrade.StatusCode != 500 || !strings.Contains(string(upgrade.AdditionalFields), "did not become healthy") {
		t.Errorf("the legacy failed upgrade: %+v", upgrade)
	}
	if _, ok := got["today's"]; !ok {
		t.Error("the record appended after the legacy lines is missing")
	}
}

// TestAuditJournalNewerVersion: a record a newer release wrote (read
// after a rollback) is not guessed at: the read says which version and
// what to do, goes on with the records after it, and remembers where it
// is, so that a release that reads that version copies it then.
func TestAuditJournalNewerVersion(t *testing.T) {
	ctx := context.Background()
	db := openDB(t)
	path := filepath.Join(t.TempDir(), "audit-journal.jsonl")
	if err := auditjournal.Append(path, journalRec("before")); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	newerAt := st.Size()
	newer := `{"v":2,"id":"6f0d2c4e-1111-4222-8333-444455556666","when":"2027-01-01T00:00:00Z","what":"rollback"}` + "\n"
	if err := os.WriteFile(path, append(mustRead(t, path), newer...), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := auditjournal.Append(path, journalRec("after")); err != nil {
		t.Fatal(err)
	}

	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	mustImport(t, db, path, log, 2)
	for _, want := range []string{"level=WARN", "newer release", fmt.Sprintf("offset=%d", newerAt), "version=2", "reads_up_to=1",
		"start a release that reads its format version"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("the log does not say %q:\n%s", want, logs.String())
		}
	}
	if got, _ := storedAudit(t, db); len(got) != 2 || got["before"].ID == "" || got["after"].ID == "" {
		t.Errorf("stored: %v; want before and after", got)
	}
	held := func() string {
		t.Helper()
		var v string
		err := db.InTx(ctx, func(tx *database.DB) (err error) {
			v, err = tx.LockDeploymentValue(ctx, coderd.JournalNewerKey)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	if got, want := held(), fmt.Sprintf("%d 2", newerAt); got != want {
		t.Fatalf("held: got %q, want %q", got, want)
	}

	// Later reads start after it: no new warning, nothing new.
	logs.Reset()
	mustImport(t, db, path, log, 0)
	if logs.Len() != 0 {
		t.Errorf("a second read logged:\n%s", logs.String())
	}

	// A release that reads version 2 finds the mark at or below its
	// version and reads from there. Played here with this release: the
	// line becomes one it reads, and the mark says version 1.
	readable, err := json.Marshal(auditjournal.Record{V: 1, ID: "6f0d2c4e-1111-4222-8333-444455556666", Time: time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC),
		Action: "rollback", ResourceType: "deployment", Description: "the newer release's rollback"})
	if err != nil {
		t.Fatal(err)
	}
	content := mustRead(t, path)
	content = append(append(append([]byte{}, content[:newerAt]...), append(readable, '\n')...), content[newerAt+int64(len(newer)):]...)
	if err := os.WriteFile(path, content, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := db.SetDeploymentValue(ctx, coderd.JournalNewerKey, fmt.Sprintf("%d 1", newerAt)); err != nil {
		t.Fatal(err)
	}
	mustImport(t, db, path, discard, 1) // the held record; "after" is stored already
	if got, _ := storedAudit(t, db); got["the newer release's rollback"].ID == "" {
		t.Error("the held record was not copied")
	}
	if got := held(); got != "" {
		t.Errorf("held after reading it: %q, want nothing", got)
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestAuditJournalExport: the audit log copied into the journal (before a
// restore replaces the database) reads back into another database as it
// was, row for row.
func TestAuditJournalExport(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "data", "audit-journal.jsonl")

	// A database the server never started on has no audit log.
	if n, err := coderd.ExportAuditLog(ctx, coderdtest.NewDatabase(t), path); err != nil || n != 0 {
		t.Fatalf("export of an empty database: %d, %v; want 0, nil", n, err)
	}

	url := coderdtest.NewDatabase(t)
	src := coderdtest.OpenDatabase(t, url)
	base := time.Date(2026, 11, 27, 8, 0, 0, 0, time.UTC)
	for i, l := range []database.AuditLog{
		{UserID: "5d1e0b2a-7c3f-4e8a-9b6d-2a4c6e8f0a1b", Username: "admin", IP: "2001:db8::7", UserAgent: "coder/v2", Action: "login",
			ResourceType: "user", ResourceTarget: "admin@example.com", StatusCode: 201, Success: true, AdditionalFields: []byte(`{"method":"password"}`)},
		{IP: "10.0.0.9", Action: "login", ResourceType: "user", ResourceTarget: "mallory@example.com", StatusCode: 401,
			Description: "wrong password"},
		{Username: "admin", Action: "delete", ResourceType: "workspace", ResourceID: "e4b2c1d0-aaaa-4bbb-8ccc-dddddddddddd",
			WorkspaceOwner: "bob", WorkspaceName: "dev", StatusCode: 200, Success: true, AdditionalFields: []byte(`["not", "an", "object"]`)},
	} {
		l.Time = base.Add(time.Duration(i) * time.Minute)
		if _, err := src.InsertAuditLog(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	_, want := storedAudit(t, src)
	n, err := coderd.ExportAuditLog(ctx, url, path)
	if err != nil || n != len(want) {
		t.Fatalf("export: %d, %v; want %d", n, err, len(want))
	}

	dst := openDB(t)
	mustImport(t, dst, path, discard, len(want))
	_, got := storedAudit(t, dst)
	// The column takes any JSON, the journal only an object: a value
	// that is not one is kept, wrapped.
	want[2].AdditionalFields = []byte(`{"value": ["not", "an", "object"]}`)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("after export and import:\ngot  %+v\nwant %+v", got, want)
	}
}

// TestAuditJournalAtStart: an appliance command's record, appended while
// the server was stopped, is in the audit log once the server runs.
func TestAuditJournalAtStart(t *testing.T) {
	db := openDB(t)
	path := filepath.Join(t.TempDir(), "audit-journal.jsonl")
	rec := journalRec("restore of the database from b.dump (by root on coder-1)")
	rec.Action, rec.ResourceTarget = "restore", "2026.11.2"
	if err := auditjournal.Append(path, rec); err != nil {
		t.Fatal(err)
	}
	runAPI(t, db, coderd.Options{AuditJournal: path})
	var logs []database.AuditLog
	testwait.For(t, 10*time.Second, "the restore record", func() (bool, string) {
		var err error
		logs, _, err = db.AuditLogs(context.Background(), database.AuditLogFilter{Action: "restore"})
		if err != nil {
			t.Fatal(err)
		}
		return len(logs) == 1, fmt.Sprintf("got %+v", logs)
	})
	l := logs[0]
	if l.ResourceTarget != "2026.11.2" || !l.Success || l.UserAgent != "coder appliance test" || l.UserID != "" ||
		!strings.Contains(string(l.AdditionalFields), `"os_user": "root"`) {
		t.Errorf("the restore record: %+v", l)
	}
}
