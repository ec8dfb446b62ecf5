// Package auditjournal owns the audit journal: an append-only file of
// audit records written by tools that act while the server is down or
// about to lose its database (the appliance's install, upgrade, rollback,
// restore and reset-password), which the server copies into its audit log.
//
// # Format
//
// The journal is UTF-8 text: one JSON object per line, each ended by "\n",
// in the order written. Each line is a [Record]. Its member "v" is the
// format version the line was written in; this package writes [Version].
// The members of a version never change: adding, renaming or removing a
// member, or changing what one means, makes a new version, and readers
// keep reading every version before their own. Version 1 has the members
// of [Record]. Lines without "v" were written by releases before versions
// existed (version 0): the members of version 1 without "v". A line of a
// version newer than [Version] is reported ([ErrUnknownVersion]) rather
// than guessed at, and reading goes on after it. The files under testdata
// pin each version; they are never edited.
//
// A line is appended whole, under an exclusive flock(2), and synced before
// Append returns, so records from concurrent tools never interleave and a
// record Append returned for survives a crash. A crash mid-append leaves
// one torn line, which readers skip; the next append starts a new line.
//
// The journal is never rewritten or truncated: the reader (the server)
// keeps its own position, in its database. So a database put back to an
// earlier state (an upgrade rolled back, a backup restored) reads again
// what it no longer holds, and records already stored are skipped by their
// id.
//
// # Trust
//
// The file is created 0600 in the appliance's data folder; whoever may
// write it (root and the appliance's service user) can add audit records,
// which the server stores as they are. Nothing in a record is executed.
//
// This package must not decide what is audited (callers build the
// records) and must not know the database: it links no other part of
// coderd, so a change to the audit_logs table cannot change this format.
// The server converts records into rows (coderd/auditlogs.go).
package auditjournal

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/google/uuid"
)

// Version is the format version Append writes, and the newest one this
// package reads.
const Version = 1

// Record is one line of the journal: what was done, by whom, to what, and
// how it ended. The members are those of codersdk.AuditLog, with the
// actor's and workspace's names.
type Record struct {
	// V is the format version of the line: Append writes Version whatever
	// V holds; a record read back carries the version it was written in
	// (0 for a line written before versions existed).
	V int `json:"v"`
	// ID identifies the record, a UUID: the server stores each ID once.
	// Append fills in a new one when it is empty.
	ID string `json:"id"`
	// Time is when it happened; Append fills in the current time (to the
	// microsecond, as the database keeps it) when it is zero.
	Time time.Time `json:"time"`
	// UserID (a UUID) and Username name the Coder user who acted; both
	// are empty for the appliance's commands, whose actor (the OS user) is
	// in AdditionalFields.
	UserID   string `json:"user_id,omitempty"`
	Username string `json:"username,omitempty"`
	// IP is the source address of the request, an IPv4 or IPv6 address
	// ("" when there was none).
	IP string `json:"ip,omitempty"`
	// UserAgent names the tool that wrote the record.
	UserAgent string `json:"user_agent,omitempty"`
	// Action is a codersdk.AuditAction ("install", "restore"); required.
	Action string `json:"action"`
	// ResourceType is a codersdk.AuditResourceType ("deployment").
	ResourceType string `json:"resource_type"`
	// ResourceID and ResourceTarget identify the resource acted on: its id
	// and its name (for a deployment, the release).
	ResourceID     string `json:"resource_id,omitempty"`
	ResourceTarget string `json:"resource_target,omitempty"`
	// WorkspaceOwner and WorkspaceName name the workspace acted on (""
	// for none).
	WorkspaceOwner string `json:"workspace_owner,omitempty"`
	WorkspaceName  string `json:"workspace_name,omitempty"`
	// StatusCode is the HTTP status the action would have answered (200
	// for a success, 500 for a failure).
	StatusCode int `json:"status_code"`
	// Success is whether the action succeeded.
	Success bool `json:"success"`
	// AdditionalFields is a JSON object of details (the OS user, host,
	// releases, the error); empty for none.
	AdditionalFields json.RawMessage `json:"additional_fields,omitempty"`
	// Description says what happened, in a sentence.
	Description string `json:"description,omitempty"`
}

// Writer appends records to a journal.
type Writer struct {
	f *os.File
}

// Open opens the journal at path for appending, creating it (0600, in a
// folder created 0700) when it does not exist.
func Open(path string) (*Writer, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("auditjournal: %w", err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("auditjournal: %w", err)
	}
	return &Writer{f: f}, nil
}

// Append writes records in the current Version, filling in an empty ID and
// a zero Time, in one locked, synced write. A record the server could not
// store (no Action, an ID or UserID that is not a UUID, an IP that is not
// an address, AdditionalFields that is not a JSON object) is refused, and
// then none is written.
func (w *Writer) Append(recs ...Record) error {
	var buf bytes.Buffer
	for _, r := range recs {
		b, err := encode(r)
		if err != nil {
			return err
		}
		buf.Write(b)
		buf.WriteByte('\n')
	}
	if err := flock(w.f, syscall.LOCK_EX); err != nil {
		return err
	}
	defer unlock(w.f)
	// A writer that crashed mid-line left a torn record: end it, so that
	// it stays one unreadable line instead of spoiling this one.
	if st, err := w.f.Stat(); err == nil && st.Size() > 0 {
		last := make([]byte, 1)
		if _, err := w.f.ReadAt(last, st.Size()-1); err == nil && last[0] != '\n' {
			if _, err := w.f.Write([]byte{'\n'}); err != nil {
				return fmt.Errorf("auditjournal: %w", err)
			}
		}
	}
	if _, err := w.f.Write(buf.Bytes()); err != nil {
		return fmt.Errorf("auditjournal: %w", err)
	}
	if err := w.f.Sync(); err != nil {
		return fmt.Errorf("auditjournal: %w", err)
	}
	return nil
}

// encode returns r's line, without its newline.
func encode(r Record) ([]byte, error) {
	r.V = Version
	if r.ID == "" {
		r.ID = uuid.NewString()
	}
	if r.Time.IsZero() {
		r.Time = time.Now().UTC().Truncate(time.Microsecond)
	}
	if err := check(r); err != nil {
		return nil, fmt.Errorf("auditjournal: %w", err)
	}
	b, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("auditjournal: %w", err)
	}
	return b, nil
}

// check reports what in r the server could not store. Records are
// checked on both sides: a writer learns at once, and a reader skips the
// line rather than fail on it every time it reads the journal.
func check(r Record) error {
	if r.ID == "" || r.Time.IsZero() || r.Action == "" {
		return errors.New("a record needs an id, a time and an action")
	}
	if !isUUID(r.ID) {
		return fmt.Errorf("id %q is not a UUID", r.ID)
	}
	if r.UserID != "" && !isUUID(r.UserID) {
		return fmt.Errorf("user_id %q is not a UUID", r.UserID)
	}
	if _, err := netip.ParseAddr(r.IP); r.IP != "" && err != nil {
		return fmt.Errorf("ip %q is not an IP address", r.IP)
	}
	var fields map[string]json.RawMessage
	if len(r.AdditionalFields) > 0 && (json.Unmarshal(r.AdditionalFields, &fields) != nil || fields == nil) {
		return fmt.Errorf("additional_fields is not a JSON object: %s", r.AdditionalFields)
	}
	return nil
}

// isUUID reports whether s is a UUID in its usual form (36 characters).
func isUUID(s string) bool {
	_, err := uuid.Parse(s)
	return err == nil && len(s) == 36
}

// Close closes the journal.
func (w *Writer) Close() error { return w.f.Close() }

// Append opens the journal at path, appends records and closes it.
func Append(path string, recs ...Record) error {
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

func flock(f *os.File, how int) error {
	if err := syscall.Flock(int(f.Fd()), how); err != nil {
		return fmt.Errorf("auditjournal: lock %s: %w", f.Name(), err)
	}
	return nil
}

func unlock(f *os.File) { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN) }
