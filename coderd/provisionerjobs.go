package coderd

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"

	"airgapcoder/coderd/database"
	"airgapcoder/codersdk"
)

// daemonStaleAfter is how long a daemon may be silent and still count as
// available for a job.
const daemonStaleAfter = 90 * time.Second

// convertJob turns a job row into its API shape, with queue position and
// the daemons that could take it when it is pending.
func (api *API) convertJob(c *gin.Context, j database.ProvisionerJob) (codersdk.ProvisionerJob, error) {
	out := codersdk.ProvisionerJob{
		ID: j.ID, CreatedAt: j.CreatedAt, StartedAt: j.StartedAt, CompletedAt: j.CompletedAt, CanceledAt: j.CanceledAt,
		Error: j.Error, ErrorCode: j.ErrorCode, Status: codersdk.ProvisionerJobStatus(j.Status()), WorkerID: j.WorkerID,
		FileID: j.FileID, Tags: displayTags(j.Tags), OrganizationID: j.OrganizationID, Type: codersdk.ProvisionerJobType(j.Type),
		Input: codersdk.ProvisionerJobInput{TemplateVersionID: j.Input.TemplateVersionID, WorkspaceBuildID: j.Input.WorkspaceBuildID},
	}
	if j.Status() != database.JobPending {
		return out, nil
	}
	ctx := c.Request.Context()
	pos, size, err := api.db.QueuePosition(ctx, j)
	if err != nil {
		return out, err
	}
	out.QueuePosition, out.QueueSize = pos, size
	count, available, seen, err := api.db.MatchedProvisioners(ctx, j.OrganizationID, j.Tags, api.now().Add(-daemonStaleAfter))
	if err != nil {
		return out, err
	}
	out.MatchedProvisioners = &codersdk.MatchedProvisioners{Count: count, Available: available, MostRecentlySeen: seen}
	return out, nil
}

func convertLog(l database.JobLog) codersdk.ProvisionerJobLog {
	return codersdk.ProvisionerJobLog{ID: l.ID, CreatedAt: l.CreatedAt, Source: l.Source, Level: l.Level, Stage: l.Stage, Output: l.Output}
}

// streamJobLogs answers GET …/logs. Without follow it returns the logs after
// ?after= as a JSON array. With follow=true it streams one JSON object per
// line (chunked) as lines arrive, woken by PostgreSQL notifications, and ends
// when the job has ended and every line is out.
func (api *API) streamJobLogs(c *gin.Context, jobID string) error {
	ctx := c.Request.Context()
	after, _ := strconv.ParseInt(c.Query("after"), 10, 64)
	if c.Query("follow") != "true" {
		logs, err := api.db.JobLogsAfter(ctx, jobID, after)
		if err != nil {
			return err
		}
		out := []codersdk.ProvisionerJobLog{}
		for _, l := range logs {
			out = append(out, convertLog(l))
		}
		c.JSON(http.StatusOK, out)
		return nil
	}

	wake := make(chan struct{}, 1)
	cancel := api.ps.Subscribe(database.ChannelJobUpdated, func(payload string) {
		if payload == jobID || payload == "" {
			select {
			case wake <- struct{}{}:
			default:
			}
		}
	})
	defer cancel()

	c.Header("Content-Type", "application/x-ndjson")
	c.Header("Cache-Control", "no-cache")
	c.Header("X-Accel-Buffering", "no")
	c.Status(http.StatusOK)
	enc := json.NewEncoder(c.Writer)
	for {
		// Read the job first: a job seen as done here has all its logs in.
		job, err := api.db.JobByID(ctx, jobID)
		if err != nil {
			return err
		}
		logs, err := api.db.JobLogsAfter(ctx, jobID, after)
		if err != nil {
			return err
		}
		for _, l := range logs {
			if err := enc.Encode(convertLog(l)); err != nil {
				return nil // client went away
			}
			after = l.ID
		}
		c.Writer.Flush()
		if !codersdk.ProvisionerJobStatus(job.Status()).Active() {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-wake:
		case <-time.After(30 * time.Second):
			// A safety net only: notifications drive the stream.
		}
	}
}

func (api *API) jobOrNotFound(c *gin.Context, id, what string) (database.ProvisionerJob, error) {
	j, err := api.db.JobByID(c.Request.Context(), id)
	if errors.Is(err, database.ErrNotFound) {
		return j, notFound(what)
	}
	return j, err
}

// cancelJob cancels a job that has not ended.
func (api *API) cancelJob(c *gin.Context, j database.ProvisionerJob) error {
	if !codersdk.ProvisionerJobStatus(j.Status()).Active() || j.CanceledAt != nil {
		return badRequest("The job is %s and cannot be canceled", j.Status())
	}
	j, err := api.db.CancelJob(c.Request.Context(), j.ID)
	if errors.Is(err, database.ErrNotFound) {
		return badRequest("The job ended before it could be canceled")
	}
	if err != nil {
		return err
	}
	c.JSON(http.StatusOK, codersdk.Response{Message: "Job " + j.Status()})
	return nil
}
