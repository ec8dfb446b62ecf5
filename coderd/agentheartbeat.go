package coderd

import (
	"context"
	"sync"
	"time"

	"airgapcoder/coderd/database"
)

// Agent liveness in PostgreSQL, written per replica rather than per agent
// session, so that thousands of agents do not queue the API behind the
// database's pool (bench/README.md, BenchmarkLoad5000Agents):
//
//   - The heartbeat: every AgentHeartbeatInterval one query finds the
//     newest agent row of every session's token (a newer build gives a
//     token a new row, and the session moves to it) and one UPDATE records
//     every session alive, in batches of heartbeatBatch.
//   - Connections: an agent's connection is recorded, and announced on
//     database.ChannelAgentConnection, in batches (connectBatcher): one
//     statement in flight at a time, the connections that arrive while it
//     runs make the next. A lone connection is written at once; a
//     reconnect storm costs a statement per round trip, not per agent, and
//     holds one of the pool's connections, not all of them.

// heartbeatBatch bounds the agents of one heartbeat statement, so that no
// statement holds thousands of row locks for long.
const heartbeatBatch = 1000

// runAgentHeartbeats starts the replica's agent heartbeat on ctx, on
// api.opts.Clock's ticker (tagged "coderd", "agent" and "heartbeat"); the
// returned stop ends it and waits for it.
func (api *API) runAgentHeartbeats(ctx context.Context) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	w := api.opts.Clock.TickerFunc(ctx, api.opts.AgentHeartbeatInterval, func() error {
		api.agentHeartbeat(ctx)
		return nil
	}, "coderd", "agent", "heartbeat")
	return func() {
		cancel()
		_ = w.Wait() // the context's error: nothing to report
	}
}

// movedSession is a session the heartbeat moved to its token's newest row.
type movedSession struct {
	s    *agentSession
	head database.AgentTokenHead
}

// agentHeartbeat records that every agent session on this replica is
// alive. A session whose token a newer build gave a new row moves to it
// (the row it left is disconnected three intervals later), and its side
// is told (agentSession.moved).
func (api *API) agentHeartbeat(ctx context.Context) {
	for _, m := range api.beatAgents(ctx) {
		m.s.log.Info("workspace agent moved to a new build", "new_agent", m.head.ID, "build", m.head.BuildNumber)
		if m.s.moved != nil {
			m.s.moved(m.head.ID)
		}
	}
}

// beatAgents is agentHeartbeat's database side; it returns the sessions it
// moved, whose sides are told after it let go of relay.beat.
func (api *API) beatAgents(ctx context.Context) []movedSession {
	api.relay.beat.Lock()
	defer api.relay.beat.Unlock()
	sessions := api.relay.all()
	var moved []movedSession
	for start := 0; start < len(sessions); start += heartbeatBatch {
		moved = append(moved, api.beatBatch(ctx, sessions[start:min(start+heartbeatBatch, len(sessions))])...)
	}
	return moved
}

// beatBatch records sessions alive: two statements for all of them.
func (api *API) beatBatch(ctx context.Context, sessions []*agentSession) []movedSession {
	tokens := make([]string, len(sessions))
	for i, s := range sessions {
		tokens[i] = s.token
	}
	heads, err := api.db.NewestAgentsByAuthTokens(ctx, tokens)
	if err != nil {
		if ctx.Err() == nil {
			api.log.Warn("agent heartbeat", "agents", len(sessions), "err", err)
		}
		return nil
	}
	var moved []movedSession
	ids := make([]string, 0, len(sessions))
	for _, s := range sessions {
		head, ok := heads[s.token]
		if !ok {
			s.log.Warn("agent heartbeat", "err", "no workspace agent has the session's token any more")
			continue
		}
		if head.ID != api.relay.idOf(s) {
			old, ok := api.relay.move(s, head.ID)
			if !ok {
				continue // a newer session of the agent replaced s
			}
			if old != nil && old != s {
				old.end()
			}
			moved = append(moved, movedSession{s: s, head: head})
		}
		ids = append(ids, head.ID)
	}
	if err := api.db.MarkAgentsConnected(ctx, ids, api.now(), api.ReplicaID()); err != nil && ctx.Err() == nil {
		api.log.Warn("agent heartbeat", "agents", len(ids), "err", err)
	}
	return moved
}

// connectBatcher writes agents' connections in batches (group commit):
// one batch is written at a time, by one of the callers whose connection
// it holds; the connections recorded meanwhile gather in the next, whose
// turn one of its callers takes when the write ends.
type connectBatcher struct {
	mu      sync.Mutex
	writing bool          // a batch is being written
	next    *connectBatch // the batch that gathers connections; nil when none waits
}

// connectBatch is the connections one statement records.
type connectBatch struct {
	ids []string
	// turn hands the batch to one of its callers to write; done is closed
	// once it is written, with err.
	turn chan struct{}
	done chan struct{}
	err  error
}

// recordAgentConnected records that agent agentID's connection came up
// now on this replica, and announces it on ChannelAgentConnection. It
// returns once the record is committed, so that a disconnection recorded
// after it cannot be overwritten by it.
func (api *API) recordAgentConnected(ctx context.Context, agentID string) error {
	w := &api.relay.connects
	w.mu.Lock()
	if w.next == nil {
		w.next = &connectBatch{turn: make(chan struct{}, 1), done: make(chan struct{})}
	}
	b := w.next
	b.ids = append(b.ids, agentID)
	if w.writing {
		w.mu.Unlock()
		select {
		case <-b.done:
			return b.err
		case <-b.turn:
		}
	} else {
		w.writing = true
		w.mu.Unlock()
	}
	// This caller writes b; nothing joins it from now on.
	w.mu.Lock()
	if w.next == b {
		w.next = nil
	}
	w.mu.Unlock()
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	b.err = api.db.ConnectAgents(wctx, b.ids, api.now(), api.ReplicaID())
	cancel()
	close(b.done)
	w.mu.Lock()
	if w.next != nil {
		w.next.turn <- struct{}{} // the first send on a buffered channel of one
	} else {
		w.writing = false
	}
	w.mu.Unlock()
	return b.err
}
