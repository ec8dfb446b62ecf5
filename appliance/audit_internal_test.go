package appliance

import (
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"

	"airgapcoder/coderd/auditjournal"
	"airgapcoder/codersdk"
)

// TestAuditRecord: an appliance command's outcome lands in the journal as
// a record of today's format, with who ran it, where, and how it ended.
func TestAuditRecord(t *testing.T) {
	for _, tc := range []struct {
		name     string
		err      error
		success  bool
		status   int
		describe string
	}{
		{"success", nil, true, 200, "restore of the database from b.dump (by "},
		{"failure", errors.New("pg_restore: exit status 1"), false, 500, "restore of the database from b.dump: failed: pg_restore: exit status 1 (by "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := Layout{Dir: t.TempDir()}
			op := newOperation(codersdk.AuditActionRestore, "2026.11.2").set("backup_file", "/root/b.dump")
			op.record(l, slog.New(slog.DiscardHandler), "restore of the database from b.dump", tc.err)

			r, err := auditjournal.OpenReader(l.AuditJournal(), 0)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			rec, err := r.Next()
			if err != nil {
				t.Fatal(err)
			}
			if _, err := r.Next(); err != io.EOF {
				t.Fatalf("a second record: %v", err)
			}
			if rec.V != auditjournal.Version || rec.ID == "" || rec.Time.IsZero() || rec.Action != "restore" || rec.ResourceType != "deployment" ||
				rec.ResourceTarget != "2026.11.2" || rec.Success != tc.success || rec.StatusCode != tc.status ||
				!strings.HasPrefix(rec.UserAgent, "coder appliance ") || !strings.HasPrefix(rec.Description, tc.describe) {
				t.Errorf("got %+v", rec)
			}
			var fields map[string]string
			if err := json.Unmarshal(rec.AdditionalFields, &fields); err != nil {
				t.Fatal(err)
			}
			if fields["os_user"] == "" || fields["host"] == "" || fields["backup_file"] != "/root/b.dump" {
				t.Errorf("additional fields: %v; want os_user, host and backup_file", fields)
			}
			if got := fields["error"]; (tc.err == nil) != (got == "") || (tc.err != nil && got != tc.err.Error()) {
				t.Errorf("error field: got %q, want %v", got, tc.err)
			}
		})
	}
}
