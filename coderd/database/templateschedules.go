package database

import (
	"context"
	"time"
)

// Template schedule defaults and dormancy (migration 000016): the TTL a
// new workspace gets, how far activity moves a deadline, and when an
// unused workspace turns dormant and a dormant one is deleted. Zero
// durations mean off, as in Coder.

// TemplateSchedule is a template's schedule defaults, in milliseconds.
type TemplateSchedule struct {
	TemplateID string `db:"template_id"`
	// DefaultTTLMillis is the TTL of a workspace created without one.
	DefaultTTLMillis int64 `db:"default_ttl_ms"`
	// ActivityBumpMillis is how far activity moves a deadline (0: by the
	// workspace's TTL).
	ActivityBumpMillis int64 `db:"activity_bump_ms"`
	// TimeTilDormantMillis is how long a stopped workspace may go unused
	// before it is marked dormant (0: never).
	TimeTilDormantMillis int64 `db:"time_til_dormant_ms"`
	// TimeTilDormantAutodeleteMillis is how long a dormant workspace lives
	// before it is deleted (0: never).
	TimeTilDormantAutodeleteMillis int64 `db:"time_til_dormant_autodelete_ms"`
	// MaxTTLMillis is the longest TTL a workspace of the template may have
	// and the longest a start build runs, activity or not (0: no limit;
	// migration 000018).
	MaxTTLMillis int64 `db:"max_ttl_ms"`
}

// TemplateSchedules returns the schedules of the given templates, keyed by
// id.
func (db *DB) TemplateSchedules(ctx context.Context, templateIDs []string) (map[string]TemplateSchedule, error) {
	out := make(map[string]TemplateSchedule, len(templateIDs))
	if len(templateIDs) == 0 {
		return out, nil
	}
	list, err := collectAll[TemplateSchedule](db.q().Query(ctx, `SELECT id AS template_id, default_ttl_ms, activity_bump_ms, time_til_dormant_ms,
			time_til_dormant_autodelete_ms, max_ttl_ms
		FROM templates WHERE id = ANY($1::uuid[])`, templateIDs))
	for _, s := range list {
		out[s.TemplateID] = s
	}
	return out, err
}

// SetTemplateSchedule stores a template's schedule and moves the deletion
// time of its dormant workspaces to match the new autodelete duration.
func (db *DB) SetTemplateSchedule(ctx context.Context, s TemplateSchedule) error {
	now := db.now()
	if _, err := db.q().Exec(ctx, `UPDATE templates SET default_ttl_ms = $2, activity_bump_ms = $3, time_til_dormant_ms = $4,
		time_til_dormant_autodelete_ms = $5, max_ttl_ms = $7, updated_at = $6 WHERE id = $1`,
		s.TemplateID, s.DefaultTTLMillis, s.ActivityBumpMillis, s.TimeTilDormantMillis, s.TimeTilDormantAutodeleteMillis, now, s.MaxTTLMillis); err != nil {
		return mapErr(err)
	}
	_, err := db.q().Exec(ctx, `UPDATE workspaces SET deleting_at = CASE WHEN $2::bigint > 0 THEN dormant_at + $2::bigint * interval '1 millisecond' END
		WHERE template_id = $1 AND dormant_at IS NOT NULL AND NOT deleted`, s.TemplateID, s.TimeTilDormantAutodeleteMillis)
	return mapErr(err)
}

// WorkspaceDormancy is when a workspace was marked dormant and when it is
// to be deleted; zero times mean not dormant and never.
type WorkspaceDormancy struct {
	DormantAt, DeletingAt time.Time
}

// WorkspaceDormancies returns the dormancy of the given workspaces, keyed
// by id; workspaces that are not dormant are left out.
func (db *DB) WorkspaceDormancies(ctx context.Context, workspaceIDs []string) (map[string]WorkspaceDormancy, error) {
	out := make(map[string]WorkspaceDormancy, len(workspaceIDs))
	if len(workspaceIDs) == 0 {
		return out, nil
	}
	type row struct {
		ID         string     `db:"id"`
		DormantAt  time.Time  `db:"dormant_at"`
		DeletingAt *time.Time `db:"deleting_at"`
	}
	list, err := collectAll[row](db.q().Query(ctx, `SELECT id, dormant_at, deleting_at FROM workspaces
		WHERE id = ANY($1::uuid[]) AND dormant_at IS NOT NULL`, workspaceIDs))
	for _, x := range list {
		d := WorkspaceDormancy{DormantAt: x.DormantAt}
		if x.DeletingAt != nil {
			d.DeletingAt = *x.DeletingAt
		}
		out[x.ID] = d
	}
	return out, err
}

// SetWorkspaceDormant marks a workspace dormant at at (its deletion time
// follows from its template), or, when not dormant, active again: then it
// counts as used at at, so that the next tick does not mark it again. It
// reports whether the workspace changed.
//
// ifLatestBuild, when not empty, marks the workspace only while that build
// is still its latest: the scheduler's mark loses to a build queued since
// it chose the workspace.
func (db *DB) SetWorkspaceDormant(ctx context.Context, workspaceID string, dormant bool, at time.Time, ifLatestBuild string) (bool, error) {
	if !dormant {
		tag, err := db.q().Exec(ctx, `UPDATE workspaces SET dormant_at = NULL, deleting_at = NULL, last_used_at = greatest(last_used_at, $2), updated_at = $3
			WHERE id = $1 AND dormant_at IS NOT NULL`, workspaceID, at, db.now())
		return err == nil && tag.RowsAffected() > 0, mapErr(err)
	}
	tag, err := db.q().Exec(ctx, `UPDATE workspaces w SET dormant_at = $2,
		deleting_at = CASE WHEN t.time_til_dormant_autodelete_ms > 0 THEN $2::timestamptz + t.time_til_dormant_autodelete_ms * interval '1 millisecond' END,
		updated_at = $3
		FROM templates t WHERE w.id = $1 AND t.id = w.template_id AND w.dormant_at IS NULL
		  AND ($4 = '' OR $4 = (SELECT b.id::text FROM workspace_builds b WHERE b.workspace_id = w.id ORDER BY b.build_number DESC LIMIT 1))`,
		workspaceID, at, db.now(), ifLatestBuild)
	return err == nil && tag.RowsAffected() > 0, mapErr(err)
}

// DormancyCandidate is a workspace the scheduler marks dormant or deletes.
type DormancyCandidate struct {
	WorkspaceID   string `db:"workspace_id"`
	LatestBuildID string `db:"latest_build_id"`
	// Delete: the workspace is dormant and its deletion time has come;
	// otherwise it is due to be marked dormant.
	Delete bool `db:"delete"`
}

// DormancyCandidates lists live workspaces whose latest build ended well
// and that either are stopped, not dormant, and unused (last_used_at, else
// the latest build's end) for their template's time_til_dormant, or are
// dormant with a deletion time at or before now and not being deleted.
func (db *DB) DormancyCandidates(ctx context.Context, now time.Time) ([]DormancyCandidate, error) {
	return collectAll[DormancyCandidate](db.q().Query(ctx, `SELECT w.id AS workspace_id, b.id AS latest_build_id, w.dormant_at IS NOT NULL AS delete
		FROM workspaces w
		JOIN templates t ON t.id = w.template_id
		JOIN LATERAL (SELECT * FROM workspace_builds WHERE workspace_id = w.id ORDER BY build_number DESC LIMIT 1) b ON true
		JOIN provisioner_jobs j ON j.id = b.job_id
		WHERE NOT w.deleted AND `+jobSucceeded+`
		  AND ((w.dormant_at IS NULL AND b.transition = 'stop' AND t.time_til_dormant_ms > 0
		        AND greatest(w.last_used_at, j.completed_at) + t.time_til_dormant_ms * interval '1 millisecond' <= $1)
		    OR (w.dormant_at IS NOT NULL AND b.transition <> 'delete' AND w.deleting_at <= $1))
		ORDER BY w.id`, now))
}

// BumpWorkspaceActivity records activity on a workspace at now (Coder's
// activity bump): its last_used_at, and, when its latest build is a
// running start build with a deadline, a deadline of now plus the
// template's activity_bump_ms when set, else plus the workspace's TTL,
// whenever less than that remains, never past the build's max_deadline. It
// reports whether the deadline moved.
func (db *DB) BumpWorkspaceActivity(ctx context.Context, workspaceID string, now time.Time) (bool, error) {
	if _, err := db.q().Exec(ctx, `UPDATE workspaces SET last_used_at = $2 WHERE id = $1 AND last_used_at < $2`, workspaceID, now); err != nil {
		return false, mapErr(err)
	}
	const bump = `(CASE WHEN t.activity_bump_ms > 0 THEN t.activity_bump_ms ELSE w.ttl_ms END * interval '1 millisecond')`
	const bumped = `(CASE WHEN b.max_deadline > '0001-01-01 00:00:00+00' THEN least($2::timestamptz + ` + bump + `, b.max_deadline)
		ELSE $2::timestamptz + ` + bump + ` END)`
	tag, err := db.q().Exec(ctx, `UPDATE workspace_builds b SET deadline = `+bumped+`, updated_at = $2
		FROM workspaces w, templates t, provisioner_jobs j
		WHERE w.id = $1 AND t.id = w.template_id AND b.workspace_id = w.id AND j.id = b.job_id
		  AND b.build_number = (SELECT max(build_number) FROM workspace_builds WHERE workspace_id = w.id)
		  AND b.transition = 'start' AND `+jobSucceeded+` AND NOT w.deleted AND w.ttl_ms > 0
		  AND b.deadline > '0001-01-01 00:00:00+00' AND b.deadline < `+bumped, workspaceID, now)
	if err != nil {
		return false, mapErr(err)
	}
	return tag.RowsAffected() > 0, nil
}
