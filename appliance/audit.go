package appliance

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/user"
	"path/filepath"

	"airgapcoder/coderd/auditjournal"
	"airgapcoder/codersdk"
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
	rec := auditjournal.Record{
		UserAgent: "coder appliance " + buildinfo.Version(), Action: string(o.action),
		ResourceType: string(codersdk.AuditResourceDeployment), ResourceTarget: o.release,
		StatusCode: http.StatusOK, Success: err == nil, Description: description,
	}
	if err != nil {
		rec.StatusCode = http.StatusInternalServerError
		o.fields["error"] = err.Error()
		rec.Description = fmt.Sprintf("%s: failed: %v", description, err)
	}
	if by := o.fields["os_user"]; by != "" {
		rec.Description += " (by " + by + " on " + o.fields["host"] + ")"
	}
	rec.AdditionalFields, _ = json.Marshal(o.fields)
	if werr := auditjournal.Append(l.AuditJournal(), rec); werr != nil {
		log.Error("write the audit record", "action", o.action, "err", werr)
	}
}
