package coderd

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"airgapcoder/coderd/auditjournal"
	"airgapcoder/coderd/database"
	"airgapcoder/codersdk"
)

// Reading the audit log (owners only), its retention, and the record of a
// deployment starting on a new version.

const (
	auditDefaultLimit = 100
	auditMaxLimit     = 1000
)

func (api *API) convertAuditLog(l database.AuditLog) codersdk.AuditLog {
	out := codersdk.AuditLog{
		ID: l.ID, Time: l.Time, IP: l.IP, UserAgent: l.UserAgent, ResourceType: codersdk.AuditResourceType(l.ResourceType),
		ResourceID: l.ResourceID, ResourceTarget: l.ResourceTarget, Action: codersdk.AuditAction(l.Action), StatusCode: l.StatusCode,
		Outcome: codersdk.AuditOutcomeFailure, AdditionalFields: json.RawMessage(l.AdditionalFields), Description: l.Description,
		WorkspaceOwner: l.WorkspaceOwner, WorkspaceName: l.WorkspaceName, OrganizationID: api.org.ID,
	}
	if l.Success {
		out.Outcome = codersdk.AuditOutcomeSuccess
	}
	if l.UserID != "" {
		out.User = &codersdk.MinimalUser{ID: l.UserID, Username: l.Username}
	}
	return out
}

// auditLogs answers GET /api/v2/audit?q=...&limit=&offset=, newest first.
func (api *API) auditLogs(c *gin.Context) error {
	if err := authorize(c, resAuditLog, actRead, ""); err != nil {
		return err
	}
	f, err := parseAuditQuery(c.Query("q"))
	if err != nil {
		return err
	}
	f.Limit = auditDefaultLimit
	if err := pageQuery(c, &f.Limit, &f.Offset); err != nil {
		return err
	}
	if f.Limit == 0 || f.Limit > auditMaxLimit {
		return validation("limit", fmt.Sprintf("must be between 1 and %d", auditMaxLimit))
	}
	logs, count, err := api.db.AuditLogs(c.Request.Context(), f)
	if err != nil {
		return err
	}
	out := codersdk.AuditLogResponse{AuditLogs: make([]codersdk.AuditLog, 0, len(logs)), Count: count}
	for _, l := range logs {
		out.AuditLogs = append(out.AuditLogs, api.convertAuditLog(l))
	}
	c.JSON(http.StatusOK, out)
	return nil
}

// parseAuditQuery reads q: space-separated key:value terms.
func parseAuditQuery(q string) (database.AuditLogFilter, error) {
	var f database.AuditLogFilter
	for _, term := range strings.Fields(q) {
		key, val, ok := strings.Cut(term, ":")
		if !ok || val == "" {
			return f, validation("q", fmt.Sprintf("%q is not a key:value term; keys are username, action, resource_type, workspace, outcome, since, until", term))
		}
		switch key {
		case "username", "user":
			f.Username = val
		case "action":
			f.Action = val
		case "resource_type":
			f.ResourceType = val
		case "workspace":
			if owner, name, ok := strings.Cut(val, "/"); ok {
				f.WorkspaceOwner, f.WorkspaceName = owner, name
			} else {
				f.WorkspaceName = val
			}
		case "outcome":
			switch val {
			case codersdk.AuditOutcomeSuccess, codersdk.AuditOutcomeFailure:
				ok := val == codersdk.AuditOutcomeSuccess
				f.Success = &ok
			default:
				return f, validation("q", fmt.Sprintf("outcome must be success or failure, got %q", val))
			}
		case "since", "until":
			t, err := parseAuditTime(val)
			if err != nil {
				return f, validation("q", fmt.Sprintf("%s: %v", key, err))
			}
			if key == "since" {
				f.Since = t
			} else {
				f.Until = t
			}
		default:
			return f, validation("q", fmt.Sprintf("unknown filter %q; keys are username, action, resource_type, workspace, outcome, since, until", key))
		}
	}
	return f, nil
}

// parseAuditTime reads an RFC 3339 time or a date (midnight UTC).
func parseAuditTime(s string) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	if t, err := time.Parse(time.DateOnly, s); err == nil {
		return t, nil
	}
	return time.Time{}, fmt.Errorf("%q is neither an RFC 3339 time (2006-01-02T15:04:05Z07:00) nor a date (2006-01-02)", s)
}

// deleteOldAuditLogs applies the retention (AuditRetention > 0).
func (api *API) deleteOldAuditLogs(ctx context.Context) {
	before := api.now().Add(-api.opts.AuditRetention)
	n, err := api.db.DeleteAuditLogsBefore(ctx, before)
	if err != nil {
		if ctx.Err() == nil {
			api.log.Error("apply audit retention", "err", err)
		}
		return
	}
	if n > 0 {
		api.log.Info("deleted audit records past retention", "count", n, "before", before.Format(time.RFC3339), "retention", api.opts.AuditRetention)
	}
}

// auditRetentionInterval is how often old records are deleted.
const auditRetentionInterval = time.Hour

// deploymentVersionKey holds the version the deployment last started with.
const deploymentVersionKey = "last_started_version"

// recordVersion records the deployment starting on a version other than the
// one it last ran: its install (first start), or an upgrade or rollback.
// Replicas starting together write one record.
func (api *API) recordVersion(ctx context.Context) {
	v := api.opts.Version
	if v == "" {
		return
	}
	err := api.db.InTx(ctx, func(tx *database.DB) error {
		previous, changed, err := tx.SwapDeploymentValue(ctx, deploymentVersionKey, v)
		if err != nil || !changed {
			return err
		}
		row := database.AuditLog{
			Action: string(codersdk.AuditActionUpgrade), ResourceType: string(codersdk.AuditResourceDeployment), ResourceTarget: v,
			StatusCode: http.StatusOK, Success: true, Description: fmt.Sprintf("server started version %s (previous %s)", v, previous),
		}
		if previous == "" {
			row.Action, row.Description = string(codersdk.AuditActionInstall), "server started version "+v+" (first start)"
		}
		row.AdditionalFields, _ = json.Marshal(map[string]string{"version": v, "previous_version": previous})
		_, err = tx.InsertAuditLog(ctx, row)
		return err
	})
	if err != nil && ctx.Err() == nil {
		api.log.Error("record the server version in the audit log", "version", v, "err", err)
	}
}

// ingestAuditJournal copies the audit journal's new records (what the
// appliance did while the server was down, or on the host while it runs)
// into the audit log.
func (api *API) ingestAuditJournal(ctx context.Context) {
	if api.opts.AuditJournal == "" {
		return
	}
	n, err := importAuditJournal(ctx, api.db, api.opts.AuditJournal, api.log)
	if err != nil {
		if ctx.Err() == nil {
			api.log.Error("copy the audit journal into the audit log", "err", err)
		}
		return
	}
	if n > 0 {
		api.log.Info("copied audit journal records into the audit log", "count", n, "journal", api.opts.AuditJournal)
	}
}

// The audit journal (package auditjournal) meets the audit_logs table
// here, and only here: auditLogRow and journalRecord are the two
// conversions, importAuditJournal reads the journal into the table and
// ExportAuditLog copies the table into the journal.

const (
	// journalOffsetKey is the deployment setting holding how many bytes of
	// the journal the database has read.
	journalOffsetKey = "audit_journal_offset"
	// journalNewerKey is the deployment setting holding "OFFSET VERSION"
	// when records were skipped because a newer release wrote them in a
	// format this one does not read: where the first of them starts, and
	// the lowest such version. A release that reads that version reads
	// the journal again from there (what is stored already is skipped by
	// id), so no record is lost to a rollback.
	journalNewerKey = "audit_journal_newer"
)

// auditLogRow is the audit_logs row of a journal record.
func auditLogRow(r auditjournal.Record) database.AuditLog {
	return database.AuditLog{ID: r.ID, Time: r.Time, UserID: r.UserID, Username: r.Username, IP: r.IP, UserAgent: r.UserAgent,
		Action: r.Action, ResourceType: r.ResourceType, ResourceID: r.ResourceID, ResourceTarget: r.ResourceTarget,
		WorkspaceOwner: r.WorkspaceOwner, WorkspaceName: r.WorkspaceName, StatusCode: r.StatusCode, Success: r.Success,
		AdditionalFields: []byte(r.AdditionalFields), Description: r.Description}
}

// journalRecord is the journal record of an audit_logs row.
func journalRecord(l database.AuditLog) auditjournal.Record {
	r := auditjournal.Record{ID: l.ID, Time: l.Time, UserID: l.UserID, Username: l.Username, IP: l.IP, UserAgent: l.UserAgent,
		Action: l.Action, ResourceType: l.ResourceType, ResourceID: l.ResourceID, ResourceTarget: l.ResourceTarget,
		WorkspaceOwner: l.WorkspaceOwner, WorkspaceName: l.WorkspaceName, StatusCode: l.StatusCode, Success: l.Success,
		AdditionalFields: json.RawMessage(l.AdditionalFields), Description: l.Description}
	if t := bytes.TrimSpace(l.AdditionalFields); len(t) > 0 && t[0] != '{' {
		// The column takes any JSON; the journal only an object.
		r.AdditionalFields, _ = json.Marshal(map[string]json.RawMessage{"value": t})
	}
	return r
}

// importAuditJournal copies the records the database has not read yet from
// the journal at path into the audit log, in one transaction with the new
// read position. A missing journal is nothing to read. A line that is not
// a record (a torn write) is logged and skipped; a record in a newer
// format is logged and left for a release that reads it (journalNewerKey).
// It returns how many records were new.
func importAuditJournal(ctx context.Context, db *database.DB, path string, log *slog.Logger) (int, error) {
	added := 0
	err := db.InTx(ctx, func(tx *database.DB) error {
		v, err := tx.LockDeploymentValue(ctx, journalOffsetKey)
		if err != nil {
			return err
		}
		offset, _ := strconv.ParseInt(v, 10, 64)
		held, err := tx.LockDeploymentValue(ctx, journalNewerKey)
		if err != nil {
			return err
		}
		newer, newerVersion := parseJournalNewer(held)
		if newer >= 0 && newerVersion <= auditjournal.Version {
			// This release reads what an earlier one had to leave.
			offset, newer, newerVersion = min(offset, newer), -1, 0
		}
		r, err := auditjournal.OpenReader(path, offset)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		defer r.Close()
		for {
			rec, err := r.Next()
			if err == io.EOF {
				break
			}
			var lineErr *auditjournal.LineError
			switch {
			case errors.As(err, &lineErr) && errors.Is(err, auditjournal.ErrUnknownVersion):
				log.Warn("audit journal: left a record written by a newer release; start a release that reads its format version to copy it into the audit log (the journal keeps it)",
					"path", path, "offset", lineErr.Offset, "version", lineErr.Version, "reads_up_to", auditjournal.Version)
				if newer < 0 {
					newer, newerVersion = lineErr.Offset, lineErr.Version
				} else {
					newer, newerVersion = min(newer, lineErr.Offset), min(newerVersion, lineErr.Version)
				}
				continue
			case errors.As(err, &lineErr):
				log.Warn("audit journal: skipped a line that is not a record", "path", path, "offset", lineErr.Offset, "err", lineErr.Err)
				continue
			case err != nil:
				return err
			}
			isNew, err := tx.ImportAuditLog(ctx, auditLogRow(rec))
			if err != nil {
				return fmt.Errorf("record %s: %w", rec.ID, err)
			}
			if isNew {
				added++
			}
		}
		if next := formatJournalNewer(newer, newerVersion); next != held {
			if err := tx.SetDeploymentValue(ctx, journalNewerKey, next); err != nil {
				return err
			}
		}
		if next := strconv.FormatInt(r.Offset(), 10); next != v {
			return tx.SetDeploymentValue(ctx, journalOffsetKey, next)
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("audit journal %s: %w", path, err)
	}
	return added, nil
}

// parseJournalNewer reads journalNewerKey's value; offset is -1 when it
// holds nothing.
func parseJournalNewer(s string) (offset int64, version int) {
	o, v, ok := strings.Cut(s, " ")
	offset, oerr := strconv.ParseInt(o, 10, 64)
	version, verr := strconv.Atoi(v)
	if !ok || oerr != nil || verr != nil || offset < 0 {
		return -1, 0
	}
	return offset, version
}

func formatJournalNewer(offset int64, version int) string {
	if offset < 0 {
		return ""
	}
	return fmt.Sprintf("%d %d", offset, version)
}

// ExportAuditLog appends every record of the audit log of the database at
// databaseURL to the audit journal at journal, oldest first, and returns
// how many it appended. It only reads the database; one the server never
// started on has no audit log and nothing to append. The appliance calls
// it before a restore replaces the database, so that the next start copies
// back the records the backup lacks.
func ExportAuditLog(ctx context.Context, databaseURL, journal string) (int, error) {
	db, err := database.Open(ctx, databaseURL)
	if err != nil {
		return 0, err
	}
	defer db.Close()
	if ok, err := db.HasAuditLog(ctx); err != nil || !ok {
		return 0, err
	}
	w, err := auditjournal.Open(journal)
	if err != nil {
		return 0, err
	}
	defer w.Close()
	var batch []auditjournal.Record
	n := 0
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		if err := w.Append(batch...); err != nil {
			return err
		}
		n += len(batch)
		batch = batch[:0]
		return nil
	}
	err = db.EachAuditLog(ctx, func(l database.AuditLog) error {
		batch = append(batch, journalRecord(l))
		if len(batch) == 1000 {
			return flush()
		}
		return nil
	})
	if err == nil {
		err = flush()
	}
	if err != nil {
		return n, fmt.Errorf("copy the audit log to the journal: %w", err)
	}
	return n, nil
}
