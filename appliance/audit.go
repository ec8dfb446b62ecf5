package appliance

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/user"
	"path/filepath"

	"airgapcoder/coderd/auditjournal"
	"airgapcoder/coderd/codersdk"
	"airgapcoder/coderd/database"
	"airgapcoder/internal/buildinfo"
)

// AuditJournal is the appliance's audit journal: what install, upgrade,
// rollback and restore did, which the server copies into its audit log
// when it starts (they run while it is stopped).
func (l Layout) AuditJournal() string { return filepath.Join(l.Data(), "audit-journal.jsonl") }

// operation is one appliance command's audit record, in the making.
type operation struct {
	action  codersdk.AuditAction
	release string
	fields  map[string]string
}

func newOperation(action codersdk.AuditAction, release string) *operation {
	o := &operation{action: action, release: release, fields: map[string]string{}}
	if u, err := user.Current(); err == nil {
		o.fields["os_user"] = u.Username
	}
	if h, err := os.Hostname(); err == nil {
		o.fields["host"] = h
	}
	return o
}

func (o *operation) set(key, value string) *operation {
	if value != "" {
		o.fields[key] = value
	}
	return o
}

// record appends the operation's outcome to the journal of l: a success
// when err is nil, else a failure carrying the error. A record that cannot
// be written is logged, never fatal: the operation itself is done.
func (o *operation) record(l Layout, log *slog.Logger, description string, err error) {
	row := database.AuditLog{
		UserAgent: "coder appliance " + buildinfo.Version(), Action: string(o.action),
		ResourceType: string(codersdk.AuditResourceDeployment), ResourceTarget: o.release,
		StatusCode: http.StatusOK, Success: err == nil, Description: description,
	}
	if err != nil {
		row.StatusCode = http.StatusInternalServerError
		o.fields["error"] = err.Error()
		row.Description = fmt.Sprintf("%s: failed: %v", description, err)
	}
	if by := o.fields["os_user"]; by != "" {
		row.Description += " (by " + by + " on " + o.fields["host"] + ")"
	}
	row.AdditionalFields, _ = json.Marshal(o.fields)
	if werr := auditjournal.Append(l.AuditJournal(), row); werr != nil {
		log.Error("write the audit record", "action", o.action, "err", werr)
	}
}

// exportAuditLog appends every record of the database at url to the
// journal, so that a restore, which replaces the database, loses none of
// them: the next start copies back those the backup lacks.
func exportAuditLog(ctx context.Context, url string, l Layout) (int, error) {
	db, err := database.Open(ctx, url)
	if err != nil {
		return 0, err
	}
	defer db.Close()
	w, err := auditjournal.Open(l.AuditJournal())
	if err != nil {
		return 0, err
	}
	defer w.Close()
	var batch []database.AuditLog
	n := 0
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		err := w.Append(batch...)
		n += len(batch)
		batch = batch[:0]
		return err
	}
	if ok, err := db.HasAuditLog(ctx); err != nil || !ok {
		return 0, err // a database the server never started on
	}
	err = db.EachAuditLog(ctx, func(r database.AuditLog) error {
		batch = append(batch, r)
		if len(batch) == 1000 {
			return flush()
		}
		return nil
	})
	if err == nil {
		err = flush()
	}
	if err != nil {
		return n, fmt.Errorf("copy the audit log aside: %w", err)
	}
	return n, nil
}
