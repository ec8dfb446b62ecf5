package codersdk

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"
)

// ProvisionerJobStatus is derived from a job's timestamps.
type ProvisionerJobStatus string

// The job statuses, as in Coder.
const (
	ProvisionerJobPending   ProvisionerJobStatus = "pending"
	ProvisionerJobRunning   ProvisionerJobStatus = "running"
	ProvisionerJobSucceeded ProvisionerJobStatus = "succeeded"
	ProvisionerJobCanceling ProvisionerJobStatus = "canceling"
	ProvisionerJobCanceled  ProvisionerJobStatus = "canceled"
	ProvisionerJobFailed    ProvisionerJobStatus = "failed"
)

// Active reports whether the job has not finished yet.
func (s ProvisionerJobStatus) Active() bool {
	return s == ProvisionerJobPending || s == ProvisionerJobRunning || s == ProvisionerJobCanceling
}

// ProvisionerJobType says what a job does.
type ProvisionerJobType string

// The job types.
const (
	ProvisionerJobTypeTemplateVersionImport ProvisionerJobType = "template_version_import"
	ProvisionerJobTypeWorkspaceBuild        ProvisionerJobType = "workspace_build"
)

// Provisioner tag keys with a meaning of their own (see shared/seeds/provisioners.txt).
const (
	TagScope             = "scope"
	TagOwner             = "owner"
	ProvisionerScopeOrg  = "organization"
	ProvisionerScopeUser = "user"
)

// ProvisionerJob is one unit of work for a provisioner daemon.
type ProvisionerJob struct {
	ID             string               `json:"id"`
	CreatedAt      time.Time            `json:"created_at"`
	StartedAt      *time.Time           `json:"started_at,omitempty"`
	CompletedAt    *time.Time           `json:"completed_at,omitempty"`
	CanceledAt     *time.Time           `json:"canceled_at,omitempty"`
	Error          string               `json:"error,omitempty"`
	ErrorCode      string               `json:"error_code,omitempty"`
	Status         ProvisionerJobStatus `json:"status"`
	WorkerID       *string              `json:"worker_id,omitempty"`
	FileID         string               `json:"file_id"`
	Tags           map[string]string    `json:"tags"`
	QueuePosition  int                  `json:"queue_position"`
	QueueSize      int                  `json:"queue_size"`
	OrganizationID string               `json:"organization_id"`
	Type           ProvisionerJobType   `json:"type"`
	Input          ProvisionerJobInput  `json:"input"`
	// MatchedProvisioners counts the daemons whose tags can take this job;
	// zero on a pending job means no provisioner will ever pick it up.
	MatchedProvisioners *MatchedProvisioners `json:"matched_provisioners,omitempty"`
}

// ProvisionerJobInput links a job to what it builds.
type ProvisionerJobInput struct {
	TemplateVersionID string `json:"template_version_id,omitempty"`
	WorkspaceBuildID  string `json:"workspace_build_id,omitempty"`
}

// MatchedProvisioners describes the daemons that could take a job.
type MatchedProvisioners struct {
	Count            int        `json:"count"`
	Available        int        `json:"available"`
	MostRecentlySeen *time.Time `json:"most_recently_seen,omitempty"`
}

// Log levels and sources.
const (
	LogLevelTrace = "trace"
	LogLevelDebug = "debug"
	LogLevelInfo  = "info"
	LogLevelWarn  = "warn"
	LogLevelError = "error"

	LogSourceProvisionerDaemon = "provisioner_daemon"
	LogSourceProvisioner       = "provisioner"
)

// ProvisionerJobLog is one line of a job's output.
type ProvisionerJobLog struct {
	ID        int64     `json:"id"`
	CreatedAt time.Time `json:"created_at"`
	Source    string    `json:"log_source"`
	Level     string    `json:"log_level"`
	Stage     string    `json:"stage"`
	Output    string    `json:"output"`
}

// followJobLogs reads the logs at path (…/logs) starting after id after.
// With follow it keeps reading until the job finishes; the server streams
// one JSON object per line. fn is called for each line in order.
func (c *Client) followJobLogs(ctx context.Context, path string, after int64, follow bool, fn func(ProvisionerJobLog) error) error {
	q := fmt.Sprintf("%s?after=%d", path, after)
	if follow {
		q += "&follow=true"
	}
	resp, err := c.Request(ctx, http.MethodGet, q, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return ReadBodyAsError(resp)
	}
	if !follow {
		var logs []ProvisionerJobLog
		if err := decodeJSON(resp, &logs); err != nil {
			return err
		}
		for _, l := range logs {
			if err := fn(l); err != nil {
				return err
			}
		}
		return nil
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		var l ProvisionerJobLog
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			return fmt.Errorf("decode log line: %w", err)
		}
		if err := fn(l); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read logs: %w", err)
	}
	return ctx.Err()
}
