package coderd

import (
	"context"
	"sync"
	"time"
)

// Activity through the relay moves a workspace's deadline (Coder's
// activity bump; docs/schedules.md). The relay reports two things:
//
//   - a session (coder ssh, port-forward, the web terminal) is open for as
//     long as it lasts: trackSession at its start, the returned func at its
//     end. While one is open its workspace is active;
//   - a dev URL request is activity at that moment: noteActivity.
//
// Each replica bumps the workspaces of its own sessions, writing at most
// once per LifecycleOptions.bumpEvery per workspace: the deadline becomes
// now plus the TTL when less than the TTL remains, and last_used_at now.

type activity struct {
	mu sync.Mutex
	// open counts open sessions by agent id.
	open map[string]int
	// workspaceOf caches each agent's workspace (an agent belongs to one
	// build of one workspace for good).
	workspaceOf map[string]string
	// bumped is when each workspace's activity was last written.
	bumped map[string]time.Time
}

func (a *activity) init() {
	if a.open == nil {
		a.open, a.workspaceOf, a.bumped = map[string]int{}, map[string]string{}, map[string]time.Time{}
	}
}

// trackSession records an open relay session to agentID, and activity now;
// the returned func, called when the session ends, closes it.
func (api *API) trackSession(agentID string) (done func()) {
	if agentID == "" {
		return func() {}
	}
	api.activity.mu.Lock()
	api.activity.init()
	api.activity.open[agentID]++
	api.activity.mu.Unlock()
	api.noteActivity(agentID)
	var once sync.Once
	return func() {
		once.Do(func() {
			api.activity.mu.Lock()
			defer api.activity.mu.Unlock()
			if api.activity.open[agentID]--; api.activity.open[agentID] <= 0 {
				delete(api.activity.open, agentID)
			}
		})
	}
}

// noteActivity records activity on agentID's workspace now, unless it was
// written less than bumpEvery ago.
func (api *API) noteActivity(agentID string) {
	if agentID == "" {
		return
	}
	ctx, cancel := context.WithTimeout(api.hooksCtx, 10*time.Second)
	defer cancel()
	api.activity.bump(ctx, api, agentID)
}

// bumpOpen bumps the workspace of every open session that is due.
func (a *activity) bumpOpen(ctx context.Context, api *API) {
	a.mu.Lock()
	agents := make([]string, 0, len(a.open))
	for id := range a.open {
		agents = append(agents, id)
	}
	a.mu.Unlock()
	for _, id := range agents {
		a.bump(ctx, api, id)
	}
}

// bump writes activity for agentID's workspace when it is due.
func (a *activity) bump(ctx context.Context, api *API, agentID string) {
	a.mu.Lock()
	a.init()
	wsID, known := a.workspaceOf[agentID]
	a.mu.Unlock()
	if !known {
		id, err := api.db.AgentWorkspaceID(ctx, agentID)
		if err != nil {
			if ctx.Err() == nil {
				api.log.Warn("activity bump: find the agent's workspace", "agent", agentID, "err", err)
			}
			return
		}
		wsID = id
	}
	now := api.now()
	a.mu.Lock()
	a.workspaceOf[agentID] = wsID
	if last, ok := a.bumped[wsID]; ok && now.Sub(last) < api.opts.Lifecycle.bumpEvery() {
		a.mu.Unlock()
		return
	}
	a.bumped[wsID] = now
	// Forget workspaces not bumped for long, and agents without a session
	// once there are many, so the maps stay small.
	for id, t := range a.bumped {
		if now.Sub(t) > time.Hour {
			delete(a.bumped, id)
		}
	}
	if len(a.workspaceOf) > 10_000 {
		for id := range a.workspaceOf {
			if a.open[id] == 0 {
				delete(a.workspaceOf, id)
			}
		}
	}
	a.mu.Unlock()
	moved, err := api.db.BumpWorkspaceActivity(ctx, wsID, now) // the template's activity bump, else the TTL
	if err != nil {
		if ctx.Err() == nil {
			api.log.Warn("activity bump", "workspace", wsID, "err", err)
		}
		return
	}
	if moved {
		api.log.Debug("activity bump: deadline moved", "workspace", wsID)
	}
}
