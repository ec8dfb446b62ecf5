package coderd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"airgapcoder/coderd/database"
	"airgapcoder/coderd/schedule"
	"airgapcoder/codersdk"
)

// The workspace lifecycle scheduler (issue 35; docs/schedules.md). Every
// Lifecycle.Tick each replica tries the scheduler's advisory lock
// (database.WithScheduleLock); the one that holds it reads the candidates
// and queues
//
//   - a stop build (reason "autostop") for each running workspace whose
//     latest build's deadline has passed (a deadline never passes the
//     build's max_deadline, its template's maximum TTL after it started:
//     templateschedules.go), and
//   - a start build (reason "autostart") for each stopped workspace whose
//     autostart schedule had an occurrence after both its latest build and
//     the moment the schedule was set,
//
// each initiated by the workspace's owner and audited as the owner's
// start/stop with automatic_actor "coder". The decisions depend only on
// the database (a queued build is the workspace's new latest build, which
// is no candidate), so a replica that takes the lock after another one
// finished sees its builds and does not repeat them.

// Build reasons, as Coder's.
const (
	BuildReasonInitiator = "initiator"
	BuildReasonAutostart = "autostart"
	BuildReasonAutostop  = "autostop"
)

// LifecycleOptions tune the lifecycle scheduler and the schedule API.
type LifecycleOptions struct {
	// Tick is how often the scheduler looks for workspaces to stop or
	// start; 0 means DefaultLifecycleTick.
	Tick time.Duration
	// MinTTL is the shortest TTL and extension the API accepts; 0 means
	// DefaultMinTTL (Coder's minute). Tests set less.
	MinTTL time.Duration
}

// DefaultLifecycleTick and DefaultMinTTL are LifecycleOptions' defaults.
const (
	DefaultLifecycleTick = time.Minute
	DefaultMinTTL        = time.Minute
	// maxTTL caps a TTL as Coder does (30 days).
	maxTTL = 30 * 24 * time.Hour
)

func (o LifecycleOptions) withDefaults() LifecycleOptions {
	if o.Tick <= 0 {
		o.Tick = DefaultLifecycleTick
	}
	if o.MinTTL <= 0 {
		o.MinTTL = DefaultMinTTL
	}
	return o
}

// bumpEvery is how often at most an open session writes a workspace's
// deadline: a minute, or half the shortest TTL when that is less, so that
// a TTL cannot lapse between two bumps of an open session.
func (o LifecycleOptions) bumpEvery() time.Duration {
	return min(time.Minute, o.MinTTL/2)
}

// runLifecycle starts the scheduler and the activity bumper on ctx, on
// api.opts.Clock's tickers (tagged "coderd", "lifecycle" and "tick" or
// "bump"); the returned stop ends both and waits for them.
func (api *API) runLifecycle(ctx context.Context) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	opts := api.opts.Lifecycle
	tick := api.opts.Clock.TickerFunc(ctx, opts.Tick, func() error {
		api.LifecycleTick(ctx)
		return nil
	}, "coderd", "lifecycle", "tick")
	bump := api.opts.Clock.TickerFunc(ctx, opts.bumpEvery(), func() error {
		api.activity.bumpOpen(ctx, api)
		return nil
	}, "coderd", "lifecycle", "bump")
	return func() {
		cancel()
		_ = tick.Wait() // the context's error: nothing to report
		_ = bump.Wait()
	}
}

// LifecycleResult is what one tick did.
type LifecycleResult struct {
	// Held: this replica held the lock and looked at the candidates.
	Held bool
	// Stopped and Started are the ids of the workspaces built.
	Stopped, Started []string
	// Dormant and Deleted are the ids of the workspaces marked dormant
	// and those whose delete build was queued (templateschedules.go).
	Dormant, Deleted []string
}

// LifecycleTick runs one tick of the scheduler now (Run calls it every
// Lifecycle.Tick; tests may call it directly).
func (api *API) LifecycleTick(ctx context.Context) LifecycleResult {
	var res LifecycleResult
	now := api.now()
	held, err := api.db.WithScheduleLock(ctx, func() error {
		cands, err := api.db.LifecycleCandidates(ctx, now)
		if err != nil {
			return err
		}
		for _, c := range cands {
			transition, reason := api.lifecycleTransition(c, now)
			if transition == "" || (transition == codersdk.WorkspaceTransitionStart && api.isDormant(ctx, c.WorkspaceID)) {
				continue
			}
			if err := api.autobuild(ctx, c, transition, reason); err != nil {
				if ctx.Err() == nil {
					api.log.Warn("lifecycle: queue build", "workspace", c.WorkspaceID, "transition", transition, "reason", reason, "err", err)
				}
				continue
			}
			if transition == codersdk.WorkspaceTransitionStop {
				res.Stopped = append(res.Stopped, c.WorkspaceID)
			} else {
				res.Started = append(res.Started, c.WorkspaceID)
			}
		}
		return api.dormancyTick(ctx, now, &res) // templateschedules.go
	})
	res.Held = held
	if err != nil && ctx.Err() == nil {
		api.log.Error("lifecycle tick", "err", err)
	}
	return res
}

// lifecycleTransition is the build a candidate needs at now, if any.
func (api *API) lifecycleTransition(c database.LifecycleCandidate, now time.Time) (codersdk.WorkspaceTransition, string) {
	switch c.Transition {
	case string(codersdk.WorkspaceTransitionStart):
		if !c.Deadline.IsZero() && !c.Deadline.After(now) {
			return codersdk.WorkspaceTransitionStop, BuildReasonAutostop
		}
	case string(codersdk.WorkspaceTransitionStop):
		sched, err := schedule.Weekly(c.AutostartSchedule)
		if err != nil {
			api.log.Warn("lifecycle: workspace has an unusable autostart schedule", "workspace", c.WorkspaceID, "err", err)
			return "", ""
		}
		after := c.BuildCreatedAt
		if c.AutostartScheduleSetAt.After(after) {
			after = c.AutostartScheduleSetAt
		}
		if sched.Due(after, now) {
			return codersdk.WorkspaceTransitionStart, BuildReasonAutostart
		}
	}
	return "", ""
}

// autobuild queues transition for the candidate's workspace with its latest
// build's version and parameter values, initiated by the owner, and audits
// it. A workspace whose latest build changed since it was read is left
// alone.
func (api *API) autobuild(ctx context.Context, c database.LifecycleCandidate, transition codersdk.WorkspaceTransition, reason string) error {
	w, err := api.db.WorkspaceByID(ctx, c.WorkspaceID)
	if err != nil {
		return err
	}
	if w.Deleted || w.LatestBuild.ID != c.LatestBuildID {
		return nil
	}
	latest := w.LatestBuild
	v, err := api.db.TemplateVersionByID(ctx, latest.TemplateVersionID)
	if err != nil {
		return err
	}
	var previous []codersdk.WorkspaceBuildParameter
	if err := unmarshalList(latest.RichParameterValues, &previous); err != nil {
		return fmt.Errorf("decode parameters of build %s: %w", latest.ID, err)
	}
	build, err := api.prepareBuild(ctx, v, w.OwnerID, previous, nil)
	if err != nil {
		return err
	}
	fields, _ := json.Marshal(map[string]any{
		"automatic_actor": "coder", "automatic_subsystem": "lifecycle", "build_reason": reason,
		"transition": transition, "template_version": v.Name, "workspace_id": w.ID,
	})
	record := database.AuditLog{
		UserID: w.OwnerID, Username: w.OwnerName, Action: string(transition), ResourceType: string(codersdk.AuditResourceWorkspaceBuild),
		ResourceTarget: w.Name, WorkspaceOwner: w.OwnerName, WorkspaceName: w.Name, StatusCode: http.StatusCreated, Success: true,
	}
	return api.db.InTx(ctx, func(tx *database.DB) error {
		if transition == codersdk.WorkspaceTransitionStart {
			// An autostart is held to the owner's quota like a start by
			// hand (quotas.go); a refusal is logged by the tick.
			if err := api.checkQuota(ctx, tx, w.OwnerID, w.ID, v.ID); err != nil {
				return err
			}
		}
		buildID, err := api.queueBuild(ctx, tx, w.OwnerID, w.ID, string(transition), build)
		if err != nil {
			return err
		}
		if err := tx.SetBuildReason(ctx, buildID, reason); err != nil {
			return err
		}
		record.ResourceID, record.AdditionalFields = buildID, fields
		record.Description = fmt.Sprintf("%s %s %s (%s)", record.Action, record.ResourceType, w.Name, reason)
		_, err = tx.InsertAuditLog(ctx, record)
		api.log.Info("lifecycle: queued build", "workspace", w.OwnerName+"/"+w.Name, "transition", transition, "reason", reason, "build", buildID)
		return err
	})
}

// queueBuild queues a build and its job inside tx, initiated by
// initiatorID, and returns the build's id. The build stores its
// non-ephemeral values; ephemeral ones ride in the job's input until a
// daemon takes the job.
func (api *API) queueBuild(ctx context.Context, tx *database.DB, initiatorID, workspaceID, transition string, b preparedBuild) (string, error) {
	stored := b.values.Stored
	if stored == nil {
		stored = []codersdk.WorkspaceBuildParameter{}
	}
	params, err := json.Marshal(stored)
	if err != nil {
		return "", err
	}
	var ephemeral []database.ParameterValue
	for _, p := range b.values.Ephemeral {
		ephemeral = append(ephemeral, database.ParameterValue{Name: p.Name, Value: p.Value})
	}
	job, err := tx.InsertJob(ctx, database.InsertJobParams{
		OrganizationID: api.org.ID, InitiatorID: initiatorID, Type: database.JobTypeWorkspaceBuild,
		Tags: b.tags, FileID: b.fileID,
	})
	if err != nil {
		return "", err
	}
	buildID, err := tx.InsertWorkspaceBuild(ctx, database.InsertBuildParams{
		WorkspaceID: workspaceID, TemplateVersionID: b.version.ID, Transition: transition, InitiatorID: initiatorID,
		JobID: job.ID, RichParameterValues: params,
	})
	if errors.Is(err, database.ErrConflict) {
		return "", conflict("Another build of this workspace was queued at the same moment; try again")
	}
	if err != nil {
		return "", err
	}
	return buildID, tx.SetJobInput(ctx, job.ID, database.JobInput{WorkspaceBuildID: buildID, EphemeralParameters: ephemeral})
}
