package database

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// AuditLog is a row of audit_logs.
type AuditLog struct {
	ID   string    `db:"id"`
	Time time.Time `db:"time"`
	// UserID and Username name the actor; both are "" for anonymous
	// requests and for the deployment itself.
	UserID   string `db:"user_id"`
	Username string `db:"username"`
	// IP is the request's source address ("" when there was no request).
	IP             string `db:"ip"`
	UserAgent      string `db:"user_agent"`
	Action         string `db:"action"`
	ResourceType   string `db:"resource_type"`
	ResourceID     string `db:"resource_id"`
	ResourceTarget string `db:"resource_target"`
	// WorkspaceOwner and WorkspaceName name the workspace the action
	// touched ("" for actions on no workspace).
	WorkspaceOwner string `db:"workspace_owner"`
	WorkspaceName  string `db:"workspace_name"`
	StatusCode     int    `db:"status_code"`
	Success        bool   `db:"success"`
	// AdditionalFields is a JSON object (nil stores {}).
	AdditionalFields []byte `db:"additional_fields"`
	Description      string `db:"description"`
}

// auditColumns are the columns of audit_logs an AuditLog holds, the
// nullable ones as "".
const auditColumns = `id, time, coalesce(user_id::text, '') AS user_id, username, coalesce(host(ip), '') AS ip, user_agent, action,
	resource_type, resource_id, resource_target, workspace_owner, workspace_name, status_code, success, additional_fields, description`

// InsertAuditLog stores a record. An empty ID or Time is filled in (a new
// UUID, the database clock). Inside InTx the record commits or rolls back
// with the action it describes.
func (db *DB) InsertAuditLog(ctx context.Context, l AuditLog) (AuditLog, error) {
	return db.insertAuditLog(ctx, l, "")
}

// ImportAuditLog stores a record written elsewhere first (the audit
// journal, an export made before a restore): one whose ID is already
// stored is left as it is, so importing twice stores it once. It reports
// whether the record was new.
func (db *DB) ImportAuditLog(ctx context.Context, l AuditLog) (bool, error) {
	if l.ID == "" || l.Time.IsZero() {
		return false, errors.New("import audit log: the record has no id or time")
	}
	_, err := db.insertAuditLog(ctx, l, " ON CONFLICT (id) DO NOTHING")
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

func (db *DB) insertAuditLog(ctx context.Context, l AuditLog, onConflict string) (AuditLog, error) {
	if l.ID == "" {
		l.ID = uuid.NewString()
	}
	if l.Time.IsZero() {
		l.Time = db.now()
	}
	if len(l.AdditionalFields) == 0 {
		l.AdditionalFields = []byte("{}")
	}
	var userID *string
	if l.UserID != "" {
		userID = &l.UserID
	}
	return collectOne[AuditLog](db.q().Query(ctx, `INSERT INTO audit_logs (id, time, user_id, username, ip, user_agent, action, resource_type,
		resource_id, resource_target, workspace_owner, workspace_name, status_code, success, additional_fields, description)
		VALUES ($1, $2, $3, $4, NULLIF($5, '')::inet, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)`+onConflict+` RETURNING `+auditColumns,
		l.ID, l.Time, userID, l.Username, l.IP, l.UserAgent, l.Action, l.ResourceType,
		l.ResourceID, l.ResourceTarget, l.WorkspaceOwner, l.WorkspaceName, l.StatusCode, l.Success, l.AdditionalFields, l.Description))
}

// AuditLogFilter selects audit records; zero fields match everything.
type AuditLogFilter struct {
	// Username matches the actor by the name recorded with the action, or
	// by the user that name belongs to now (so renames do not hide
	// records).
	Username     string
	Action       string
	ResourceType string
	// WorkspaceName matches the workspace's name; WorkspaceOwner, when set
	// too, its owner's username.
	WorkspaceName  string
	WorkspaceOwner string
	// Since is inclusive, Until exclusive.
	Since, Until time.Time
	// Success, when set, selects successes (true) or failures (false).
	Success *bool
	// Limit caps the rows returned (0: no cap); Offset skips the newest.
	Limit, Offset int
}

func (f AuditLogFilter) where() (string, []any) {
	var conds []string
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return fmt.Sprintf("$%d", len(args))
	}
	if f.Username != "" {
		p := arg(f.Username)
		conds = append(conds, `(lower(username) = lower(`+p+`) OR user_id = (SELECT id FROM users WHERE lower(username) = lower(`+p+`) AND NOT deleted))`)
	}
	if f.Action != "" {
		conds = append(conds, `action = `+arg(f.Action))
	}
	if f.ResourceType != "" {
		conds = append(conds, `resource_type = `+arg(f.ResourceType))
	}
	if f.WorkspaceName != "" {
		conds = append(conds, `lower(workspace_name) = lower(`+arg(f.WorkspaceName)+`) AND workspace_name <> ''`)
	}
	if f.WorkspaceOwner != "" {
		conds = append(conds, `lower(workspace_owner) = lower(`+arg(f.WorkspaceOwner)+`)`)
	}
	if !f.Since.IsZero() {
		conds = append(conds, `time >= `+arg(f.Since))
	}
	if !f.Until.IsZero() {
		conds = append(conds, `time < `+arg(f.Until))
	}
	if f.Success != nil {
		conds = append(conds, `success = `+arg(*f.Success))
	}
	if len(conds) == 0 {
		return "", args
	}
	return " WHERE " + strings.Join(conds, " AND "), args
}

// AuditLogs returns the matching records, newest first, and how many match
// in all (counted in the same statement, so the two agree).
func (db *DB) AuditLogs(ctx context.Context, f AuditLogFilter) ([]AuditLog, int64, error) {
	where, args := f.where()
	q := `SELECT ` + auditColumns + `, count(*) OVER () AS total FROM audit_logs` + where + ` ORDER BY time DESC, id DESC`
	if f.Limit > 0 {
		q += fmt.Sprintf(" LIMIT %d", f.Limit)
	}
	if f.Offset > 0 {
		q += fmt.Sprintf(" OFFSET %d", f.Offset)
	}
	type counted struct {
		AuditLog
		Total int64 `db:"total"`
	}
	page, err := collectAll[counted](db.q().Query(ctx, q, args...))
	if err != nil {
		return nil, 0, err
	}
	var count int64
	logs := make([]AuditLog, len(page))
	for i, r := range page {
		logs[i], count = r.AuditLog, r.Total
	}
	if len(logs) > 0 || f.Offset == 0 {
		return logs, count, nil
	}
	// A page past the end: count on its own.
	err = db.q().QueryRow(ctx, `SELECT count(*) FROM audit_logs`+where, args...).Scan(&count)
	return logs, count, err
}

// auditDeleteBatch bounds one retention DELETE, so that a first run over
// years of records holds no long lock.
const auditDeleteBatch = 10000

// DeleteAuditLogsBefore deletes the records older than before, in batches,
// and returns how many it deleted.
func (db *DB) DeleteAuditLogsBefore(ctx context.Context, before time.Time) (int64, error) {
	var total int64
	for {
		tag, err := db.q().Exec(ctx, `DELETE FROM audit_logs WHERE id IN (SELECT id FROM audit_logs WHERE time < $1 LIMIT $2)`,
			before, auditDeleteBatch)
		if err != nil {
			return total, fmt.Errorf("delete old audit logs: %w", err)
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < auditDeleteBatch {
			return total, nil
		}
	}
}

// SwapDeploymentValue sets a deployment-wide setting to value and returns
// what it held before ("" when it did not exist) and whether it changed.
// Concurrent callers are serialized on the row: of replicas starting
// together with the same value, exactly one sees a change.
func (db *DB) SwapDeploymentValue(ctx context.Context, key, value string) (previous string, changed bool, err error) {
	err = db.InTx(ctx, func(tx *DB) error {
		if previous, err = tx.LockDeploymentValue(ctx, key); err != nil || previous == value {
			return err
		}
		changed = true
		return tx.SetDeploymentValue(ctx, key, value)
	})
	return previous, changed, err
}

// LockDeploymentValue returns a deployment-wide setting ("" when it does
// not exist) and locks it until the transaction ends: call it inside InTx.
func (db *DB) LockDeploymentValue(ctx context.Context, key string) (string, error) {
	if db.tx == nil {
		return "", errors.New("lock deployment value: not in a transaction")
	}
	if _, err := db.q().Exec(ctx, `INSERT INTO deployment (key, value) VALUES ($1, '') ON CONFLICT (key) DO NOTHING`, key); err != nil {
		return "", err
	}
	var v string
	err := db.q().QueryRow(ctx, `SELECT value FROM deployment WHERE key = $1 FOR UPDATE`, key).Scan(&v)
	return v, mapErr(err)
}

// SetDeploymentValue sets a deployment-wide setting.
func (db *DB) SetDeploymentValue(ctx context.Context, key, value string) error {
	_, err := db.q().Exec(ctx, `INSERT INTO deployment (key, value) VALUES ($1, $2) ON CONFLICT (key) DO UPDATE SET value = excluded.value`, key, value)
	return err
}

// HasAuditLog reports whether the audit log exists (the migrations ran).
func (db *DB) HasAuditLog(ctx context.Context) (bool, error) {
	var ok bool
	err := db.q().QueryRow(ctx, `SELECT to_regclass('audit_logs') IS NOT NULL`).Scan(&ok)
	return ok, err
}

// EachAuditLog calls fn with every record, oldest first, reading them as
// fn goes (an export of the whole log does not hold it in memory).
func (db *DB) EachAuditLog(ctx context.Context, fn func(AuditLog) error) error {
	rows, err := db.q().Query(ctx, `SELECT `+auditColumns+` FROM audit_logs ORDER BY time, id`)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		l, err := pgx.RowToStructByName[AuditLog](rows)
		if err != nil {
			return err
		}
		if err := fn(l); err != nil {
			return err
		}
	}
	return rows.Err()
}
