// Package auditjournal owns the audit journal: an append-only file of
// audit records written by tools that act while the server is down or
// about to lose its database (the appliance's install, upgrade, rollback
// and restore), which the server copies into the audit log each time it
// starts.
//
// The journal is never rewritten or truncated; the database remembers how
// far it has read. So a database put back to an earlier state (an upgrade
// rolled back, a backup restored) reads again what it no longer holds, and
// records already stored are skipped by their id. This package must not
// decide what is audited: callers build the records.
package auditjournal

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/google/uuid"

	"airgapcoder/coderd/database"
)

// offsetKey is the deployment setting that holds how many bytes of the
// journal the database has read.
const offsetKey = "audit_journal_offset"

// entry is one line of the journal: an audit record in the shape of the
// API's (codersdk.AuditLog), with the actor's and workspace's names.
type entry struct {
	ID               string          `json:"id"`
	Time             time.Time       `json:"time"`
	UserID           string          `json:"user_id,omitempty"`
	Username         string          `json:"username,omitempty"`
	IP               string          `json:"ip,omitempty"`
	UserAgent        string          `json:"user_agent,omitempty"`
	Action           string          `json:"action"`
	ResourceType     string          `json:"resource_type"`
	ResourceID       string          `json:"resource_id,omitempty"`
	ResourceTarget   string          `json:"resource_target,omitempty"`
	WorkspaceOwner   string          `json:"workspace_owner,omitempty"`
	WorkspaceName    string          `json:"workspace_name,omitempty"`
	StatusCode       int             `json:"status_code"`
	Success          bool            `json:"success"`
	AdditionalFields json.RawMessage `json:"additional_fields,omitempty"`
	Description      string          `json:"description,omitempty"`
}

func toEntry(l database.AuditLog) entry {
	e := entry{ID: l.ID, Time: l.Time, UserID: l.UserID, Username: l.Username, IP: l.IP, UserAgent: l.UserAgent,
		Action: l.Action, ResourceType: l.ResourceType, ResourceID: l.ResourceID, ResourceTarget: l.ResourceTarget,
		WorkspaceOwner: l.WorkspaceOwner, WorkspaceName: l.WorkspaceName, StatusCode: l.StatusCode, Success: l.Success,
		Description: l.Description}
	if len(l.AdditionalFields) > 0 && json.Valid(l.AdditionalFields) {
		e.AdditionalFields = json.RawMessage(l.AdditionalFields)
	}
	return e
}

func (e entry) record() database.AuditLog {
	l := database.AuditLog{ID: e.ID, Time: e.Time, UserID: e.UserID, Username: e.Username, IP: e.IP, UserAgent: e.UserAgent,
		Action: e.Action, ResourceType: e.ResourceType, ResourceID: e.ResourceID, ResourceTarget: e.ResourceTarget,
		WorkspaceOwner: e.WorkspaceOwner, WorkspaceName: e.WorkspaceName, StatusCode: e.StatusCode, Success: e.Success,
		AdditionalFields: []byte(e.AdditionalFields), Description: e.Description}
	if len(l.AdditionalFields) == 0 {
		l.AdditionalFields = []byte("{}")
	}
	return l
}

// Writer appends records to a journal. Each Append is one locked,
// synced write, so records from concurrent tools never interleave and a
// record Append returned for survives a crash.
type Writer struct {
	f *os.File
}

// Open opens (creating it, 0600) the journal at path for appending.
func Open(path string) (*Writer, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("audit journal: %w", err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("audit journal: %w", err)
	}
	return &Writer{f: f}, nil
}

// Append writes records, filling in an empty ID (a new UUID) and Time
// (now).
func (w *Writer) Append(recs ...database.AuditLog) error {
	var buf bytes.Buffer
	for _, r := range recs {
		if r.ID == "" {
			r.ID = uuid.NewString()
		}
		if r.Time.IsZero() {
			r.Time = time.Now().UTC().Truncate(time.Microsecond)
		}
		b, err := json.Marshal(toEntry(r))
		if err != nil {
			return fmt.Errorf("audit journal: %w", err)
		}
		buf.Write(b)
		buf.WriteByte('\n')
	}
	if err := lock(w.f); err != nil {
		return err
	}
	defer unlock(w.f)
	// A writer that crashed mid-line left a torn record: end it, so that
	// it stays one unreadable line instead of spoiling this one.
	if st, err := w.f.Stat(); err == nil && st.Size() > 0 {
		last := make([]byte, 1)
		if _, err := w.f.ReadAt(last, st.Size()-1); err == nil && last[0] != '\n' {
			if _, err := w.f.Write([]byte{'\n'}); err != nil {
				return fmt.Errorf("audit journal: %w", err)
			}
		}
	}
	if _, err := w.f.Write(buf.Bytes()); err != nil {
		return fmt.Errorf("audit journal: %w", err)
	}
	if err := w.f.Sync(); err != nil {
		return fmt.Errorf("audit journal: %w", err)
	}
	return nil
}

// Close closes the journal.
func (w *Writer) Close() error { return w.f.Close() }

// Append opens the journal at path, appends records and closes it.
func Append(path string, recs ...database.AuditLog) error {
	w, err := Open(path)
	if err != nil {
		return err
	}
	if err := w.Append(recs...); err != nil {
		_ = w.Close()
		return err
	}
	return w.Close()
}

// Ingest copies the records the database has not read yet from the
// journal at path into the audit log, in one transaction with the new read
// offset. A missing journal is nothing to read. Unreadable lines (a torn
// write) are logged and skipped. It returns how many records were new.
func Ingest(ctx context.Context, db *database.DB, path string, log *slog.Logger) (int, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("audit journal: %w", err)
	}
	defer f.Close()
	// A shared lock: appends wait until this read is done, so none lands
	// half-read.
	if err := lockShared(f); err != nil {
		return 0, err
	}
	defer unlock(f)
	added := 0
	err = db.InTx(ctx, func(tx *database.DB) error {
		added = 0
		v, err := tx.LockDeploymentValue(ctx, offsetKey)
		if err != nil {
			return err
		}
		offset, _ := strconv.ParseInt(v, 10, 64)
		st, err := f.Stat()
		if err != nil {
			return err
		}
		if offset < 0 || offset > st.Size() {
			// Not this journal (replaced, or a database from elsewhere):
			// read it all; what is stored already is skipped.
			offset = 0
		}
		if _, err := f.Seek(offset, io.SeekStart); err != nil {
			return err
		}
		r := bufio.NewReader(f)
		for {
			line, err := r.ReadBytes('\n')
			if err == io.EOF {
				break // a line without its newline is still being written, or torn
			}
			if err != nil {
				return err
			}
			offset += int64(len(line))
			var e entry
			if err := json.Unmarshal(line, &e); err != nil || e.ID == "" || e.Action == "" {
				log.Warn("audit journal: skipped an unreadable record", "path", path, "offset", offset-int64(len(line)), "err", err)
				continue
			}
			isNew, err := tx.ImportAuditLog(ctx, e.record())
			if err != nil {
				return fmt.Errorf("record %s: %w", e.ID, err)
			}
			if isNew {
				added++
			}
		}
		return tx.SetDeploymentValue(ctx, offsetKey, strconv.FormatInt(offset, 10))
	})
	if err != nil {
		return 0, fmt.Errorf("audit journal %s: %w", path, err)
	}
	return added, nil
}

func lock(f *os.File) error {
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("audit journal: lock %s: %w", f.Name(), err)
	}
	return nil
}

func lockShared(f *os.File) error {
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH); err != nil {
		return fmt.Errorf("audit journal: lock %s: %w", f.Name(), err)
	}
	return nil
}

func unlock(f *os.File) { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN) }
