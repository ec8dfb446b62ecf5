package coderd

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/gin-gonic/gin"
	"golang.org/x/sync/errgroup"

	"airgapcoder/coderd/database"
	"airgapcoder/codersdk"
	"airgapcoder/internal/clockwait"
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
	if v, ok := c.Get(ctxJobQueue); ok {
		return out, v.(*jobQueueView).fill(&out, j)
	}
	g, ctx := errgroup.WithContext(c.Request.Context())
	g.Go(func() (err error) {
		out.QueuePosition, out.QueueSize, err = api.db.QueuePosition(ctx, j)
		return err
	})
	g.Go(func() error {
		count, available, seen, err := api.db.MatchedProvisioners(ctx, j.OrganizationID, j.Tags, api.now().Add(-daemonStaleAfter))
		out.MatchedProvisioners = &codersdk.MatchedProvisioners{Count: count, Available: available, MostRecentlySeen: seen}
		return err
	})
	return out, g.Wait()
}

// ctxJobQueue holds the jobQueueView of a request that converts many jobs
// (a workspace list, where every pending build would otherwise cost two
// queries of its own).
const ctxJobQueue = "coderd.jobqueue"

// jobQueueView is one request's view of the job queue: each organization's
// queue, and the daemons that match each tag set, read once, the first
// time a pending job needs them.
type jobQueueView struct {
	api *API
	ctx context.Context

	mu      sync.Mutex
	queues  map[string]func() ([]database.PendingJob, error)         // by organization
	matched map[string]func() (*codersdk.MatchedProvisioners, error) // by organization and tags
}

// viewJobQueue makes the rest of c's request read the job queue once
// (convertJob).
func (api *API) viewJobQueue(c *gin.Context) {
	c.Set(ctxJobQueue, &jobQueueView{
		api: api, ctx: c.Request.Context(),
		queues:  map[string]func() ([]database.PendingJob, error){},
		matched: map[string]func() (*codersdk.MatchedProvisioners, error){},
	})
}

// fill sets out's queue position and size and the daemons that match it,
// as QueuePosition and MatchedProvisioners would for the pending job j.
func (v *jobQueueView) fill(out *codersdk.ProvisionerJob, j database.ProvisionerJob) error {
	tags, err := json.Marshal(j.Tags) // map keys sorted: one key per tag set
	if err != nil {
		return err
	}
	v.mu.Lock()
	queue, ok := v.queues[j.OrganizationID]
	if !ok {
		queue = sync.OnceValues(func() ([]database.PendingJob, error) { return v.api.db.PendingJobs(v.ctx, j.OrganizationID) })
		v.queues[j.OrganizationID] = queue
	}
	key := j.OrganizationID + " " + string(tags)
	matched, ok := v.matched[key]
	if !ok {
		matched = sync.OnceValues(func() (*codersdk.MatchedProvisioners, error) {
			count, available, seen, err := v.api.db.MatchedProvisioners(v.ctx, j.OrganizationID, j.Tags, v.api.now().Add(-daemonStaleAfter))
			return &codersdk.MatchedProvisioners{Count: count, Available: available, MostRecentlySeen: seen}, err
		})
		v.matched[key] = matched
	}
	v.mu.Unlock()
	pending, err := queue()
	if err != nil {
		return err
	}
	// Position counts the jobs queued before j, and j: (created_at, id) as
	// PostgreSQL orders them (a uuid's text sorts as its bytes).
	out.QueueSize = len(pending)
	out.QueuePosition = sort.Search(len(pending), func(i int) bool {
		p := pending[i]
		return p.CreatedAt.After(j.CreatedAt) || (p.CreatedAt.Equal(j.CreatedAt) && p.ID > j.ID)
	})
	out.MatchedProvisioners, err = matched()
	return err
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
		// Notifications drive the stream; the 30 s wake is a safety net only.
		if !clockwait.Sleep(ctx, api.opts.Clock, 30*time.Second, wake, "coderd", "jobLogs", "safetyNet") {
			return nil
		}
	}
}

func (api *API) jobOrNotFound(c *gin.Context, id, what string) (database.ProvisionerJob, error) {
	j, err := api.db.JobByID(c.Request.Context(), id)
	return j, notFoundAs(what, err)
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
