package database

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// Workspace schedules (migration 000014): a workspace's TTL and autostart
// schedule, its builds' deadlines, the activity that moves a deadline, and
// what the lifecycle scheduler reads and takes each tick. The zero time
// stands for "none" in deadlines and last_used_at, as in Coder.

// scheduleLockID is the advisory lock that serializes the lifecycle
// scheduler's ticks across replicas (pg_try_advisory_xact_lock).
const scheduleLockID = 7031_0035

// jobSucceeded is the SQL condition of a job alias j that ended well
// (ProvisionerJob.Status's "succeeded").
const jobSucceeded = `(j.canceled_at IS NULL AND j.started_at IS NOT NULL AND j.completed_at IS NOT NULL AND j.error = '')`

// WorkspaceSchedule is a workspace's autostop and autostart settings.
type WorkspaceSchedule struct {
	WorkspaceID string `db:"workspace_id"`
	// TTLMillis is how long a start build runs; nil means until stopped
	// by hand.
	TTLMillis *int64 `db:"ttl_ms"`
	// AutostartSchedule is a cron line ("CRON_TZ=… M H * * DOW"), "" for
	// none; AutostartScheduleSetAt is when it last changed.
	AutostartSchedule      string    `db:"autostart_schedule"`
	AutostartScheduleSetAt time.Time `db:"autostart_schedule_set_at"`
	// LastUsedAt is the last activity the relay reported (zero: never).
	LastUsedAt time.Time `db:"last_used_at"`
}

// WorkspaceSchedules returns the schedules of the given workspaces, keyed
// by id.
func (db *DB) WorkspaceSchedules(ctx context.Context, workspaceIDs []string) (map[string]WorkspaceSchedule, error) {
	out := make(map[string]WorkspaceSchedule, len(workspaceIDs))
	if len(workspaceIDs) == 0 {
		return out, nil
	}
	list, err := collectAll[WorkspaceSchedule](db.q().Query(ctx, `SELECT id AS workspace_id, ttl_ms, autostart_schedule, autostart_schedule_set_at, last_used_at
		FROM workspaces WHERE id = ANY($1::uuid[])`, workspaceIDs))
	for _, s := range list {
		out[s.WorkspaceID] = s
	}
	return out, err
}

// BuildDeadlines returns the deadlines of the given builds, keyed by id;
// a build without one maps to the zero time.
func (db *DB) BuildDeadlines(ctx context.Context, buildIDs []string) (map[string]time.Time, error) {
	return db.buildTimes(ctx, `SELECT id, deadline AS at FROM workspace_builds WHERE id = ANY($1::uuid[])`, buildIDs)
}

// buildTimes runs query, which selects the id and one time of the builds
// $1, keyed by id; '0001-01-01' (none) maps to the zero time.
func (db *DB) buildTimes(ctx context.Context, query string, buildIDs []string) (map[string]time.Time, error) {
	out := make(map[string]time.Time, len(buildIDs))
	if len(buildIDs) == 0 {
		return out, nil
	}
	list, err := collectAll[buildTime](db.q().Query(ctx, query, buildIDs))
	for _, p := range list {
		out[p.ID] = zeroIfNone(p.At)
	}
	return out, err
}

// buildTime is a build's id with one of its times.
type buildTime struct {
	ID string    `db:"id"`
	At time.Time `db:"at"`
}

// zeroIfNone maps PostgreSQL's '0001-01-01' (which comes back in the
// session's zone) to Go's zero time.
func zeroIfNone(t time.Time) time.Time {
	if t.Year() <= 1 {
		return time.Time{}
	}
	return t
}

// SetWorkspaceTTL changes a workspace's TTL (nil: none). It does not touch
// the deadline of a build that is running.
func (db *DB) SetWorkspaceTTL(ctx context.Context, workspaceID string, ttlMillis *int64) error {
	_, err := db.q().Exec(ctx, `UPDATE workspaces SET ttl_ms = $2, updated_at = $3 WHERE id = $1`, workspaceID, ttlMillis, db.now())
	return mapErr(err)
}

// SetWorkspaceAutostart changes a workspace's autostart schedule ("" for
// none) and records when, so that earlier occurrences do not count.
func (db *DB) SetWorkspaceAutostart(ctx context.Context, workspaceID, schedule string, at time.Time) error {
	_, err := db.q().Exec(ctx, `UPDATE workspaces SET autostart_schedule = $2, autostart_schedule_set_at = $3, updated_at = $4 WHERE id = $1`,
		workspaceID, schedule, at, db.now())
	return mapErr(err)
}

// SetBuildDeadline sets a build's deadline (the zero time: none).
func (db *DB) SetBuildDeadline(ctx context.Context, buildID string, deadline time.Time) error {
	if deadline.IsZero() {
		_, err := db.q().Exec(ctx, `UPDATE workspace_builds SET deadline = '0001-01-01 00:00:00+00', updated_at = $2 WHERE id = $1`, buildID, db.now())
		return mapErr(err)
	}
	_, err := db.q().Exec(ctx, `UPDATE workspace_builds SET deadline = $2, updated_at = $3 WHERE id = $1`, buildID, deadline, db.now())
	return mapErr(err)
}

// SetBuildReason records why a build was queued ("initiator", "autostart",
// "autostop").
func (db *DB) SetBuildReason(ctx context.Context, buildID, reason string) error {
	_, err := db.q().Exec(ctx, `UPDATE workspace_builds SET reason = $2 WHERE id = $1`, buildID, reason)
	return mapErr(err)
}

// ArmBuildDeadline gives a start build that has just finished its deadline:
// now plus its workspace's TTL, capped by its template's max_ttl_ms, which
// also sets its max_deadline (now plus max_ttl_ms); a workspace without a
// TTL gets the max_deadline as its deadline. Other builds, and workspaces
// without a TTL of templates without a maximum, keep none. Called when the
// build's job completes.
func (db *DB) ArmBuildDeadline(ctx context.Context, buildID string) error {
	// least() skips NULLs; nullif turns "none" (NULL or 0) into NULL.
	_, err := db.q().Exec(ctx, `UPDATE workspace_builds b SET
		deadline = $2::timestamptz + least(nullif(w.ttl_ms, 0), nullif(t.max_ttl_ms, 0)) * interval '1 millisecond',
		max_deadline = CASE WHEN t.max_ttl_ms > 0 THEN $2::timestamptz + t.max_ttl_ms * interval '1 millisecond' ELSE b.max_deadline END
		FROM workspaces w, templates t WHERE b.id = $1 AND w.id = b.workspace_id AND t.id = w.template_id AND b.transition = 'start'
		  AND (w.ttl_ms > 0 OR t.max_ttl_ms > 0)`, buildID, db.now())
	return mapErr(err)
}

// BuildMaxDeadlines returns the max_deadline of the given builds, keyed by
// id; a build without one maps to the zero time.
func (db *DB) BuildMaxDeadlines(ctx context.Context, buildIDs []string) (map[string]time.Time, error) {
	return db.buildTimes(ctx, `SELECT id, max_deadline AS at FROM workspace_builds WHERE id = ANY($1::uuid[])`, buildIDs)
}

// AgentWorkspaceID returns the id of the workspace an agent belongs to.
func (db *DB) AgentWorkspaceID(ctx context.Context, agentID string) (string, error) {
	var id string
	err := db.q().QueryRow(ctx, `SELECT b.workspace_id FROM workspace_agents a
		JOIN workspace_resources r ON r.id = a.resource_id
		JOIN workspace_builds b ON b.job_id = r.job_id
		WHERE a.id = $1`, agentID).Scan(&id)
	return id, mapErr(err)
}

// LifecycleCandidate is a workspace the scheduler may have to build: its
// latest build has ended well and it either has a deadline or an
// autostart schedule.
type LifecycleCandidate struct {
	WorkspaceID   string `db:"workspace_id"`
	OwnerID       string `db:"owner_id"`
	LatestBuildID string `db:"latest_build_id"`
	// Transition and CreatedAt are the latest build's.
	Transition             string    `db:"transition"`
	BuildCreatedAt         time.Time `db:"build_created_at"`
	Deadline               time.Time `db:"deadline"`
	AutostartSchedule      string    `db:"autostart_schedule"`
	AutostartScheduleSetAt time.Time `db:"autostart_schedule_set_at"`
}

// LifecycleCandidates lists live workspaces whose latest build succeeded
// and that are either started with a deadline at or before now, or
// stopped with an autostart schedule (whether it is due is the caller's
// to say: the schedule is a cron line).
func (db *DB) LifecycleCandidates(ctx context.Context, now time.Time) ([]LifecycleCandidate, error) {
	list, err := collectAll[LifecycleCandidate](db.q().Query(ctx, `SELECT w.id AS workspace_id, w.owner_id, b.id AS latest_build_id, b.transition,
			b.created_at AS build_created_at, b.deadline, w.autostart_schedule, w.autostart_schedule_set_at
		FROM workspaces w
		JOIN LATERAL (SELECT * FROM workspace_builds WHERE workspace_id = w.id ORDER BY build_number DESC LIMIT 1) b ON true
		JOIN provisioner_jobs j ON j.id = b.job_id
		WHERE NOT w.deleted AND `+jobSucceeded+`
		  AND ((b.transition = 'start' AND b.deadline > '0001-01-01 00:00:00+00' AND b.deadline <= $1)
		    OR (b.transition = 'stop' AND w.autostart_schedule <> ''))
		ORDER BY w.id`, now))
	if err != nil {
		return nil, err
	}
	for i := range list {
		list[i].Deadline = zeroIfNone(list[i].Deadline)
	}
	return list, nil
}

// WithScheduleLock runs fn while this connection holds the scheduler's
// advisory lock (pg_try_advisory_xact_lock, released when the holding
// transaction ends). When another replica holds it, fn does not run and
// held is false. fn does its work on other connections: the transaction
// only holds the lock.
func (db *DB) WithScheduleLock(ctx context.Context, fn func() error) (held bool, err error) {
	err = pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `SELECT pg_try_advisory_xact_lock($1)`, scheduleLockID).Scan(&held); err != nil {
			return err
		}
		if !held {
			return nil
		}
		return fn()
	})
	return held, err
}
