package database

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Notification channels. Payloads are job ids.
const (
	// ChannelJobPosted wakes provisioner daemons waiting for work.
	ChannelJobPosted = "coder_job_posted"
	// ChannelJobUpdated tells log followers that a job has new logs or ended.
	ChannelJobUpdated = "coder_job_updated"
)

// Job types.
const (
	JobTypeTemplateVersionImport = "template_version_import"
	JobTypeWorkspaceBuild        = "workspace_build"
)

// JobInput links a job to what it builds.
type JobInput struct {
	TemplateVersionID string `json:"template_version_id,omitempty"`
	WorkspaceBuildID  string `json:"workspace_build_id,omitempty"`
	// EphemeralParameters are a build's values of ephemeral parameters:
	// kept here only until a daemon acquires the job (or the job ends
	// without one), never with the build.
	EphemeralParameters []ParameterValue `json:"ephemeral_parameters,omitempty"`
}

// ParameterValue is a named parameter value.
type ParameterValue struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// ProvisionerJob is a row of provisioner_jobs.
type ProvisionerJob struct {
	ID             string            `db:"id"`
	CreatedAt      time.Time         `db:"created_at"`
	UpdatedAt      time.Time         `db:"updated_at"`
	StartedAt      *time.Time        `db:"started_at"`
	CompletedAt    *time.Time        `db:"completed_at"`
	CanceledAt     *time.Time        `db:"canceled_at"`
	Error          string            `db:"error"`
	ErrorCode      string            `db:"error_code"`
	OrganizationID string            `db:"organization_id"`
	InitiatorID    string            `db:"initiator_id"`
	Type           string            `db:"type"`
	Input          JobInput          `db:"input"`
	Tags           map[string]string `db:"tags"`
	FileID         string            `db:"file_id"`
	WorkerID       *string           `db:"worker_id"`
}

// Job statuses, derived as in Coder.
const (
	JobPending   = "pending"
	JobRunning   = "running"
	JobSucceeded = "succeeded"
	JobCanceling = "canceling"
	JobCanceled  = "canceled"
	JobFailed    = "failed"
)

// Status derives the job's status from its timestamps.
func (j ProvisionerJob) Status() string {
	switch {
	case j.CanceledAt != nil && j.CompletedAt == nil:
		return JobCanceling
	case j.CanceledAt != nil:
		return JobCanceled
	case j.StartedAt == nil:
		return JobPending
	case j.CompletedAt != nil && j.Error == "":
		return JobSucceeded
	case j.CompletedAt != nil:
		return JobFailed
	}
	return JobRunning
}

const jobColumns = `id, created_at, updated_at, started_at, completed_at, canceled_at, error, error_code,
	organization_id, initiator_id, type, input, tags, file_id, worker_id`

// InsertJobParams enqueues a job.
type InsertJobParams struct {
	OrganizationID string
	InitiatorID    string
	Type           string
	Input          JobInput
	Tags           map[string]string
	FileID         string
}

// InsertJob enqueues a job and wakes waiting daemons when the transaction
// commits.
func (db *DB) InsertJob(ctx context.Context, p InsertJobParams) (ProvisionerJob, error) {
	now := db.now()
	if p.Tags == nil {
		p.Tags = map[string]string{}
	}
	j, err := collectOne[ProvisionerJob](db.q().Query(ctx, `INSERT INTO provisioner_jobs (id, created_at, updated_at, organization_id, initiator_id, type, input, tags, file_id)
		VALUES ($1, $2, $2, $3, $4, $5, $6, $7, $8) RETURNING `+jobColumns,
		uuid.NewString(), now, p.OrganizationID, p.InitiatorID, p.Type, p.Input, p.Tags, p.FileID))
	if err != nil {
		return ProvisionerJob{}, fmt.Errorf("insert job: %w", err)
	}
	if err := db.Notify(ctx, ChannelJobPosted, j.ID); err != nil {
		return ProvisionerJob{}, fmt.Errorf("notify job posted: %w", err)
	}
	return j, nil
}

// JobByID returns a job.
func (db *DB) JobByID(ctx context.Context, id string) (ProvisionerJob, error) {
	if uuid.Validate(id) != nil {
		return ProvisionerJob{}, ErrNotFound
	}
	return collectOne[ProvisionerJob](db.q().Query(ctx, `SELECT `+jobColumns+` FROM provisioner_jobs WHERE id = $1`, id))
}

// AcquireJob claims the oldest pending job of the organization whose tags
// are all carried by tags, for the daemon. Concurrent claimers never get the
// same job: the row is locked with FOR UPDATE SKIP LOCKED. It returns
// ErrNotFound when no job matches.
func (db *DB) AcquireJob(ctx context.Context, organizationID, daemonID string, tags map[string]string) (ProvisionerJob, error) {
	now := db.now()
	return collectOne[ProvisionerJob](db.q().Query(ctx, `UPDATE provisioner_jobs SET started_at = $1, updated_at = $1, worker_id = $2
		WHERE id = (
			SELECT id FROM provisioner_jobs
			WHERE started_at IS NULL AND canceled_at IS NULL AND completed_at IS NULL
				AND organization_id = $3 AND tags <@ $4::jsonb
			ORDER BY created_at, id
			FOR UPDATE SKIP LOCKED
			LIMIT 1)
		RETURNING `+jobColumns, now, daemonID, organizationID, tags))
}

// ReleaseJob puts back in the queue a job that daemonID acquired but was
// never handed (coderd could not prepare it: the database went away
// mid-way), as if it had not been acquired, and wakes waiting daemons.
// ErrNotFound means the daemon no longer holds it, or it already ended.
func (db *DB) ReleaseJob(ctx context.Context, jobID, daemonID string) error {
	if err := db.execOne(ctx, `UPDATE provisioner_jobs SET started_at = NULL, worker_id = NULL, updated_at = $3
		WHERE id = $1 AND worker_id = $2 AND completed_at IS NULL`, jobID, daemonID, db.now()); err != nil {
		return err
	}
	return db.Notify(ctx, ChannelJobPosted, jobID)
}

// HeartbeatJob records that daemonID is still working on the job and reports
// whether the job was canceled. ErrNotFound means the daemon does not hold
// the job (any more): it was failed by the reaper or completed.
func (db *DB) HeartbeatJob(ctx context.Context, jobID, daemonID string) (canceled bool, err error) {
	if uuid.Validate(jobID) != nil {
		return false, ErrNotFound
	}
	var canceledAt *time.Time
	err = db.q().QueryRow(ctx, `UPDATE provisioner_jobs SET updated_at = $3
		WHERE id = $1 AND worker_id = $2 AND started_at IS NOT NULL AND completed_at IS NULL
		RETURNING canceled_at`, jobID, daemonID, db.now()).Scan(&canceledAt)
	return canceledAt != nil, mapErr(err)
}

// FinishJob ends a job the daemon holds, with errMsg empty on success.
func (db *DB) FinishJob(ctx context.Context, jobID, daemonID, errMsg, errCode string) (ProvisionerJob, error) {
	if uuid.Validate(jobID) != nil {
		return ProvisionerJob{}, ErrNotFound
	}
	now := db.now()
	j, err := collectOne[ProvisionerJob](db.q().Query(ctx, `UPDATE provisioner_jobs SET completed_at = $3, updated_at = $3, error = $4, error_code = $5,
			input = input - 'ephemeral_parameters'
		WHERE id = $1 AND worker_id = $2 AND started_at IS NOT NULL AND completed_at IS NULL
		RETURNING `+jobColumns, jobID, daemonID, now, errMsg, errCode))
	if err != nil {
		return j, err
	}
	return j, db.notifyJobUpdated(ctx, jobID)
}

// CancelJob cancels a job: a pending job ends at once, a running one is
// marked canceling until its daemon stops.
func (db *DB) CancelJob(ctx context.Context, jobID string) (ProvisionerJob, error) {
	now := db.now()
	j, err := collectOne[ProvisionerJob](db.q().Query(ctx, `UPDATE provisioner_jobs SET canceled_at = $2, updated_at = $2,
			input = input - 'ephemeral_parameters',
			completed_at = CASE WHEN started_at IS NULL THEN $2::timestamptz ELSE NULL END,
			error = CASE WHEN started_at IS NULL THEN 'canceled before a provisioner picked it up' ELSE error END
		WHERE id = $1 AND completed_at IS NULL AND canceled_at IS NULL
		RETURNING `+jobColumns, jobID, now))
	if err != nil {
		return j, err
	}
	return j, db.notifyJobUpdated(ctx, jobID)
}

// FailStaleJobs fails every running job whose daemon has not sent a
// heartbeat since before, and returns them.
func (db *DB) FailStaleJobs(ctx context.Context, before time.Time) ([]ProvisionerJob, error) {
	now := db.now()
	jobs, err := collectAll[ProvisionerJob](db.q().Query(ctx, `UPDATE provisioner_jobs SET completed_at = $2, updated_at = $2,
			error = 'the provisioner daemon stopped sending heartbeats (it may have crashed or lost its connection); run the build again',
			error_code = 'HEARTBEAT_TIMEOUT', input = input - 'ephemeral_parameters'
		WHERE started_at IS NOT NULL AND completed_at IS NULL AND updated_at < $1
		RETURNING `+jobColumns, before, now))
	if err != nil {
		return nil, err
	}
	for _, j := range jobs {
		if err := db.notifyJobUpdated(ctx, j.ID); err != nil {
			return jobs, err
		}
	}
	return jobs, nil
}

func (db *DB) notifyJobUpdated(ctx context.Context, jobID string) error {
	return db.Notify(ctx, ChannelJobUpdated, jobID)
}

// QueuePosition returns the job's 1-based position among pending jobs of its
// organization and the number of pending jobs; 0 when it is not pending.
func (db *DB) QueuePosition(ctx context.Context, j ProvisionerJob) (position, size int, err error) {
	type queue struct {
		Position int `db:"position"`
		Size     int `db:"size"`
	}
	q, err := collectOne[queue](db.q().Query(ctx, `SELECT
			count(*) FILTER (WHERE (created_at, id) <= ($2, $3::uuid)) AS position,
			count(*) AS size
		FROM provisioner_jobs WHERE organization_id = $1 AND started_at IS NULL AND canceled_at IS NULL AND completed_at IS NULL`,
		j.OrganizationID, j.CreatedAt, j.ID))
	if j.Status() != JobPending {
		q.Position = 0
	}
	return q.Position, q.Size, err
}

// PendingJob is a job in its organization's queue: not started, not
// canceled, not completed.
type PendingJob struct {
	ID        string    `db:"id"`
	CreatedAt time.Time `db:"created_at"`
}

// PendingJobs returns the organization's queue, oldest first: what
// QueuePosition counts, for every job at once.
func (db *DB) PendingJobs(ctx context.Context, organizationID string) ([]PendingJob, error) {
	return collectAll[PendingJob](db.q().Query(ctx, `SELECT id, created_at FROM provisioner_jobs
		WHERE organization_id = $1 AND started_at IS NULL AND canceled_at IS NULL AND completed_at IS NULL
		ORDER BY created_at, id`, organizationID))
}

// JobLog is a row of provisioner_job_logs.
type JobLog struct {
	ID        int64     `db:"id"`
	JobID     string    `db:"job_id"`
	CreatedAt time.Time `db:"created_at"`
	Source    string    `db:"source"`
	Level     string    `db:"level"`
	Stage     string    `db:"stage"`
	Output    string    `db:"output"`
}

// InsertJobLogs appends logs to a job and tells followers.
func (db *DB) InsertJobLogs(ctx context.Context, jobID string, logs []JobLog) error {
	if len(logs) == 0 {
		return nil
	}
	rows := make([][]any, len(logs))
	for i, l := range logs {
		if l.CreatedAt.IsZero() {
			l.CreatedAt = db.now()
		}
		rows[i] = []any{jobID, l.CreatedAt, l.Source, l.Level, l.Stage, l.Output}
	}
	_, err := db.q().CopyFrom(ctx, pgx.Identifier{"provisioner_job_logs"},
		[]string{"job_id", "created_at", "source", "level", "stage", "output"}, pgx.CopyFromRows(rows))
	if err != nil {
		return fmt.Errorf("insert job logs: %w", err)
	}
	return db.notifyJobUpdated(ctx, jobID)
}

// JobLogsAfter returns the job's logs with an id greater than after.
func (db *DB) JobLogsAfter(ctx context.Context, jobID string, after int64) ([]JobLog, error) {
	return collectAll[JobLog](db.q().Query(ctx, `SELECT id, job_id, created_at, source, level, stage, output FROM provisioner_job_logs
		WHERE job_id = $1 AND id > $2 ORDER BY id`, jobID, after))
}

// ProvisionerDaemon is a row of provisioner_daemons.
type ProvisionerDaemon struct {
	ID             string            `db:"id"`
	OrganizationID string            `db:"organization_id"`
	Name           string            `db:"name"`
	Version        string            `db:"version"`
	Tags           map[string]string `db:"tags"`
	CreatedAt      time.Time         `db:"created_at"`
	LastSeenAt     time.Time         `db:"last_seen_at"`
	// CurrentJobID is the job it is running, if any (filled by listings).
	CurrentJobID *string `db:"current_job_id"`
}

// daemonColumns are the provisioner_daemons columns of a ProvisionerDaemon
// but its current job, for a table aliased d.
const daemonColumns = `d.id, d.organization_id, d.name, d.version, d.tags, d.created_at, d.last_seen_at`

// UpsertProvisionerDaemon registers a daemon by organization, name and tags;
// a daemon that restarts with the same name and tags keeps its id.
func (db *DB) UpsertProvisionerDaemon(ctx context.Context, d ProvisionerDaemon) (ProvisionerDaemon, error) {
	now := db.now()
	type stored struct {
		ID         string    `db:"id"`
		CreatedAt  time.Time `db:"created_at"`
		LastSeenAt time.Time `db:"last_seen_at"`
	}
	s, err := collectOne[stored](db.q().Query(ctx, `INSERT INTO provisioner_daemons (id, organization_id, name, version, tags, created_at, last_seen_at)
		VALUES ($1, $2, $3, $4, $5, $6, $6)
		ON CONFLICT (organization_id, name, tags) DO UPDATE SET version = excluded.version, last_seen_at = excluded.last_seen_at
		RETURNING id, created_at, last_seen_at`, uuid.NewString(), d.OrganizationID, d.Name, d.Version, d.Tags, now))
	if err == nil {
		d.ID, d.CreatedAt, d.LastSeenAt = s.ID, s.CreatedAt, s.LastSeenAt
	}
	return d, err
}

// ProvisionerDaemonByID returns a daemon.
func (db *DB) ProvisionerDaemonByID(ctx context.Context, id string) (ProvisionerDaemon, error) {
	if uuid.Validate(id) != nil {
		return ProvisionerDaemon{}, ErrNotFound
	}
	return collectOne[ProvisionerDaemon](db.q().Query(ctx, `SELECT `+daemonColumns+`, NULL::uuid AS current_job_id
		FROM provisioner_daemons d WHERE d.id = $1`, id))
}

// TouchProvisionerDaemon records that the daemon was seen.
func (db *DB) TouchProvisionerDaemon(ctx context.Context, id string) error {
	_, err := db.q().Exec(ctx, `UPDATE provisioner_daemons SET last_seen_at = $2 WHERE id = $1`, id, db.now())
	return err
}

// ProvisionerDaemons lists the organization's daemons with their current job.
func (db *DB) ProvisionerDaemons(ctx context.Context, organizationID string) ([]ProvisionerDaemon, error) {
	return collectAll[ProvisionerDaemon](db.q().Query(ctx, `SELECT `+daemonColumns+`,
			(SELECT j.id FROM provisioner_jobs j WHERE j.worker_id = d.id AND j.completed_at IS NULL ORDER BY j.started_at DESC LIMIT 1) AS current_job_id
		FROM provisioner_daemons d WHERE d.organization_id = $1 ORDER BY d.name, d.created_at`, organizationID))
}

// MatchedProvisioners counts the daemons whose tags carry all of tags, and
// those of them seen since availableSince.
func (db *DB) MatchedProvisioners(ctx context.Context, organizationID string, tags map[string]string, availableSince time.Time) (count, available int, lastSeen *time.Time, err error) {
	type matched struct {
		Count     int        `db:"count"`
		Available int        `db:"available"`
		LastSeen  *time.Time `db:"last_seen"`
	}
	m, err := collectOne[matched](db.q().Query(ctx, `SELECT count(*) AS count, count(*) FILTER (WHERE last_seen_at >= $3) AS available,
			max(last_seen_at) AS last_seen
		FROM provisioner_daemons WHERE organization_id = $1 AND $2::jsonb <@ tags`, organizationID, tags, availableSince))
	return m.Count, m.Available, m.LastSeen, err
}

// SetJobInput records what a job builds once that row exists.
func (db *DB) SetJobInput(ctx context.Context, jobID string, in JobInput) error {
	_, err := db.q().Exec(ctx, `UPDATE provisioner_jobs SET input = $2 WHERE id = $1`, jobID, in)
	return err
}

// DaemonHoldsFile reports whether the daemon runs a job that uses the file.
func (db *DB) DaemonHoldsFile(ctx context.Context, daemonID, fileID string) (bool, error) {
	var ok bool
	err := db.q().QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM provisioner_jobs
		WHERE worker_id = $1 AND file_id = $2 AND completed_at IS NULL)`, daemonID, fileID).Scan(&ok)
	return ok, err
}
