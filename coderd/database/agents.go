package database

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Workspace agents at run time. Every start build gets agent rows of its
// own, but a template's agent keeps its token across builds: the agent that
// presents a token is the NEWEST row with that token.

// ErrAgentLogsFull is returned by InsertAgentLogs once an agent has stored
// its cap of startup script output.
var ErrAgentLogsFull = errors.New("database: agent log limit reached")

// ListeningPort is a TCP port an agent saw listening.
type ListeningPort struct {
	Network string `json:"network"`
	Port    uint16 `json:"port"`
}

// AgentRuntime is what an agent reported about itself.
type AgentRuntime struct {
	Version           string          `db:"version"`
	ExpandedDirectory string          `db:"expanded_directory"`
	ListeningPorts    []ListeningPort `db:"listening_ports"`
	LogsOverflowed    bool            `db:"logs_overflowed"`
}

// WorkspaceAgent is an agent row with its runtime report and the build and
// workspace it belongs to. Apps are not loaded.
type WorkspaceAgent struct {
	Agent
	AgentRuntime
	JobID       string `db:"job_id"`
	BuildID     string `db:"build_id"`
	BuildNumber int32  `db:"build_number"`
	Transition  string `db:"transition"`
	// LatestBuild is whether the agent's build is its workspace's newest.
	LatestBuild      bool   `db:"latest_build"`
	WorkspaceID      string `db:"workspace_id"`
	WorkspaceName    string `db:"workspace_name"`
	WorkspaceDeleted bool   `db:"workspace_deleted"`
	OwnerID          string `db:"owner_id"`
	OwnerName        string `db:"owner_name"`
}

const workspaceAgentSelect = `SELECT ` + agentColumns + `,
		a.version, a.expanded_directory, a.listening_ports, a.logs_overflowed,
		r.job_id, b.id AS build_id, b.build_number, b.transition,
		b.build_number = (SELECT max(build_number) FROM workspace_builds WHERE workspace_id = w.id) AS latest_build,
		w.id AS workspace_id, w.name AS workspace_name, w.deleted AS workspace_deleted, w.owner_id, u.username AS owner_name
	FROM workspace_agents a
	JOIN workspace_resources r ON r.id = a.resource_id
	JOIN workspace_builds b ON b.job_id = r.job_id
	JOIN workspaces w ON w.id = b.workspace_id
	JOIN users u ON u.id = w.owner_id`

// oneWorkspaceAgent is collectOne for workspaceAgentSelect; ListeningPorts
// is never nil.
func oneWorkspaceAgent(rows pgx.Rows, err error) (WorkspaceAgent, error) {
	a, err := collectOne[WorkspaceAgent](rows, err)
	if a.ListeningPorts == nil {
		a.ListeningPorts = []ListeningPort{}
	}
	return a, err
}

// AgentByAuthToken returns the newest workspace agent with the token.
func (db *DB) AgentByAuthToken(ctx context.Context, token string) (WorkspaceAgent, error) {
	if uuid.Validate(token) != nil {
		return WorkspaceAgent{}, ErrNotFound
	}
	return oneWorkspaceAgent(db.q().Query(ctx, workspaceAgentSelect+` WHERE a.auth_token = $1 ORDER BY a.created_at DESC LIMIT 1`, token))
}

// AgentByID returns a workspace agent.
func (db *DB) AgentByID(ctx context.Context, id string) (WorkspaceAgent, error) {
	if uuid.Validate(id) != nil {
		return WorkspaceAgent{}, ErrNotFound
	}
	return oneWorkspaceAgent(db.q().Query(ctx, workspaceAgentSelect+` WHERE a.id = $1`, id))
}

// AgentAppsByAgentID returns an agent's apps.
func (db *DB) AgentAppsByAgentID(ctx context.Context, agentID string) ([]App, error) {
	apps, err := db.appsByAgentIDs(ctx, []string{agentID})
	return apps[agentID], err
}

// UpdateAppHealths sets the health of apps of an agent, keyed by app id,
// in one transaction. An id that is not an app of agentID changes nothing
// and makes it return ErrNotFound (and change nothing at all).
func (db *DB) UpdateAppHealths(ctx context.Context, agentID string, healths map[string]string) error {
	return db.InTx(ctx, func(tx *DB) error {
		for id, health := range healths {
			if err := tx.execOne(ctx, `UPDATE workspace_apps SET health = $3 WHERE id = $1 AND agent_id = $2`, id, agentID, health); err != nil {
				return err
			}
		}
		return nil
	})
}

// AgentRuntimes returns what the given agents reported, keyed by agent id.
func (db *DB) AgentRuntimes(ctx context.Context, ids []string) (map[string]AgentRuntime, error) {
	out := map[string]AgentRuntime{}
	if len(ids) == 0 {
		return out, nil
	}
	type runtimeRow struct {
		ID string `db:"id"`
		AgentRuntime
	}
	list, err := collectAll[runtimeRow](db.q().Query(ctx, `SELECT id, version, expanded_directory, listening_ports, logs_overflowed
		FROM workspace_agents WHERE id = ANY($1::uuid[])`, ids))
	if err != nil {
		return nil, err
	}
	for _, r := range list {
		if r.ListeningPorts == nil {
			r.ListeningPorts = []ListeningPort{}
		}
		out[r.ID] = r.AgentRuntime
	}
	return out, nil
}

// MarkAgentConnected records that an agent's connection is up at now.
func (db *DB) MarkAgentConnected(ctx context.Context, id string, now time.Time, replicaID string) error {
	_, err := db.q().Exec(ctx, `UPDATE workspace_agents SET first_connected_at = coalesce(first_connected_at, $2),
		last_connected_at = $2, disconnected_at = NULL, connected_replica_id = $3 WHERE id = $1`, id, now, nullUUID(replicaID))
	return err
}

// AgentTokenHead is the newest agent row of an agent token
// (NewestAgentsByAuthTokens): the row an agent presenting the token is.
type AgentTokenHead struct {
	AuthToken   string `db:"auth_token"`
	ID          string `db:"id"`
	BuildNumber int32  `db:"build_number"`
}

// NewestAgentsByAuthTokens returns, keyed by token, the newest agent row
// of each of tokens, as AgentByAuthToken finds it for one: a token no row
// has (or that is not a UUID) is missing from the map. One query for any
// number of tokens (a replica's heartbeat of all its agent sessions).
func (db *DB) NewestAgentsByAuthTokens(ctx context.Context, tokens []string) (map[string]AgentTokenHead, error) {
	out := map[string]AgentTokenHead{}
	valid := make([]string, 0, len(tokens))
	for _, t := range tokens {
		if uuid.Validate(t) == nil {
			valid = append(valid, t)
		}
	}
	if len(valid) == 0 {
		return out, nil
	}
	heads, err := collectAll[AgentTokenHead](db.q().Query(ctx, `SELECT DISTINCT ON (a.auth_token) a.auth_token::text AS auth_token, a.id, b.build_number
		FROM workspace_agents a
		JOIN workspace_resources r ON r.id = a.resource_id
		JOIN workspace_builds b ON b.job_id = r.job_id
		JOIN workspaces w ON w.id = b.workspace_id
		JOIN users u ON u.id = w.owner_id
		WHERE a.auth_token = ANY($1::uuid[])
		ORDER BY a.auth_token, a.created_at DESC`, valid))
	if err != nil {
		return nil, fmt.Errorf("newest agents of %d tokens: %w", len(valid), err)
	}
	for _, h := range heads {
		out[h.AuthToken] = h
	}
	return out, nil
}

// markAgentsConnected is MarkAgentConnected for the agents ids ($1), at
// $2 on replica $3. It locks the rows in id order, so that two such
// updates of overlapping agents (a heartbeat and a burst of connects)
// wait for each other instead of deadlocking.
const markAgentsConnected = `UPDATE workspace_agents a SET first_connected_at = coalesce(a.first_connected_at, $2),
		last_connected_at = $2, disconnected_at = NULL, connected_replica_id = $3
	FROM (SELECT id FROM workspace_agents WHERE id = ANY($1::uuid[]) ORDER BY id FOR UPDATE) l
	WHERE a.id = l.id`

// MarkAgentsConnected records that the agents' connections are up at now
// (MarkAgentConnected for many, in one statement).
func (db *DB) MarkAgentsConnected(ctx context.Context, ids []string, now time.Time, replicaID string) error {
	if len(ids) == 0 {
		return nil
	}
	if _, err := db.q().Exec(ctx, markAgentsConnected, ids, now, nullUUID(replicaID)); err != nil {
		return fmt.Errorf("mark %d agents connected: %w", len(ids), err)
	}
	return nil
}

// ConnectAgents records that the agents' connections came up at now on
// replica replicaID and announces each agent on ChannelAgentConnection
// (MarkAgentConnected and Notify for many, in one statement: a burst of
// agents connecting at once costs one round trip).
func (db *DB) ConnectAgents(ctx context.Context, ids []string, now time.Time, replicaID string) error {
	if len(ids) == 0 {
		return nil
	}
	_, err := db.q().Exec(ctx, `WITH u AS (`+markAgentsConnected+` RETURNING a.id)
		SELECT count(pg_notify($4, u.id::text)) FROM u`, ids, now, nullUUID(replicaID), ChannelAgentConnection)
	if err != nil {
		return fmt.Errorf("record %d agent connections: %w", len(ids), err)
	}
	return nil
}

// ChannelAgentConnection carries an agent's id when its relay connection
// comes up or goes down on some replica, so that a replica waiting to reach
// the agent looks again at once.
const ChannelAgentConnection = "coder_agent_connection"

// MarkAgentDisconnected records that an agent's connection to replica
// replicaID went down at now. It changes nothing when the agent has
// connected to another replica since.
func (db *DB) MarkAgentDisconnected(ctx context.Context, id string, now time.Time, replicaID string) error {
	_, err := db.q().Exec(ctx, `UPDATE workspace_agents SET disconnected_at = $2, connected_replica_id = NULL
		WHERE id = $1 AND connected_replica_id IS NOT DISTINCT FROM $3`, id, now, nullUUID(replicaID))
	return err
}

// nullUUID is id, or NULL for "".
func nullUUID(id string) *string {
	if id == "" {
		return nil
	}
	return &id
}

// UpdateAgentLifecycle records a lifecycle state.
func (db *DB) UpdateAgentLifecycle(ctx context.Context, id, state string, changedAt time.Time) error {
	_, err := db.q().Exec(ctx, `UPDATE workspace_agents SET lifecycle_state = $2, lifecycle_changed_at = $3 WHERE id = $1`, id, state, changedAt)
	return err
}

// UpdateAgentStartup records an agent's version, platform and directory.
func (db *DB) UpdateAgentStartup(ctx context.Context, id, version, os, arch, expandedDirectory string) error {
	_, err := db.q().Exec(ctx, `UPDATE workspace_agents SET version = $2, operating_system = $3, architecture = $4,
		expanded_directory = $5 WHERE id = $1`, id, version, os, arch, expandedDirectory)
	return err
}

// UpdateAgentPorts replaces an agent's listening ports.
func (db *DB) UpdateAgentPorts(ctx context.Context, id string, ports []ListeningPort) error {
	if ports == nil {
		ports = []ListeningPort{}
	}
	_, err := db.q().Exec(ctx, `UPDATE workspace_agents SET listening_ports = $2 WHERE id = $1`, id, ports)
	return err
}

// AgentLog is a row of workspace_agent_logs.
type AgentLog struct {
	ID        int64     `db:"id"`
	AgentID   string    `db:"agent_id"`
	CreatedAt time.Time `db:"created_at"`
	Level     string    `db:"level"`
	Output    string    `db:"output"`
	// Source is the display name of the script that wrote the line ("" for
	// the agent itself).
	Source string `db:"source"`
}

// InsertAgentLogs stores script output of an agent and appends jobLogs
// (typically the lines of run-on-start scripts) to the job logs of the
// agent's build, so build log followers see them too. Once the agent has
// stored maxBytes of output, it stores nothing more and returns
// ErrAgentLogsFull.
func (db *DB) InsertAgentLogs(ctx context.Context, agentID, jobID string, logs []AgentLog, jobLogs []JobLog, maxBytes int) error {
	if len(logs) == 0 {
		return nil
	}
	size := 0
	for _, l := range logs {
		size += len(l.Output)
	}
	err := db.InTx(ctx, func(tx *DB) error {
		tag, err := tx.q().Exec(ctx, `UPDATE workspace_agents SET logs_length = logs_length + $2
			WHERE id = $1 AND NOT logs_overflowed AND logs_length + $2 <= $3`, agentID, size, maxBytes)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return ErrAgentLogsFull
		}
		now := db.now()
		rows := make([][]any, len(logs))
		for i, l := range logs {
			if l.CreatedAt.IsZero() {
				l.CreatedAt = now
			}
			rows[i] = []any{agentID, l.CreatedAt, l.Level, l.Output, l.Source}
		}
		if _, err := tx.q().CopyFrom(ctx, pgx.Identifier{"workspace_agent_logs"}, []string{"agent_id", "created_at", "level", "output", "source"},
			pgx.CopyFromRows(rows)); err != nil {
			return err
		}
		return tx.InsertJobLogs(ctx, jobID, jobLogs)
	})
	if errors.Is(err, ErrAgentLogsFull) {
		if _, uerr := db.q().Exec(ctx, `UPDATE workspace_agents SET logs_overflowed = true WHERE id = $1`, agentID); uerr != nil {
			return uerr
		}
	}
	return err
}

// AgentLogsAfter returns an agent's stored output with an id greater than
// after.
func (db *DB) AgentLogsAfter(ctx context.Context, agentID string, after int64) ([]AgentLog, error) {
	return collectAll[AgentLog](db.q().Query(ctx, `SELECT id, agent_id, created_at, level, output, source FROM workspace_agent_logs
		WHERE agent_id = $1 AND id > $2 ORDER BY id`, agentID, after))
}

// AgentMetadataResult is a row of workspace_agent_metadata: the latest
// result of one metadata key.
type AgentMetadataResult struct {
	AgentID     string    `db:"agent_id"`
	Key         string    `db:"key"`
	Value       string    `db:"value"`
	Error       string    `db:"error"`
	CollectedAt time.Time `db:"collected_at"`
}

// UpsertAgentMetadata records the latest results of an agent's metadata
// keys; a result older than the stored one for its key is ignored.
func (db *DB) UpsertAgentMetadata(ctx context.Context, results []AgentMetadataResult) error {
	if len(results) == 0 {
		return nil
	}
	return db.InTx(ctx, func(tx *DB) error {
		for _, r := range results {
			if _, err := tx.q().Exec(ctx, `INSERT INTO workspace_agent_metadata (agent_id, key, value, error, collected_at)
				VALUES ($1, $2, $3, $4, $5)
				ON CONFLICT (agent_id, key) DO UPDATE SET value = excluded.value, error = excluded.error, collected_at = excluded.collected_at
				WHERE workspace_agent_metadata.collected_at <= excluded.collected_at`,
				r.AgentID, r.Key, r.Value, r.Error, r.CollectedAt); err != nil {
				return fmt.Errorf("store metadata %s: %w", r.Key, err)
			}
		}
		return nil
	})
}

// AgentMetadataResults returns the latest metadata results of the given
// agents, keyed by agent id and then by key.
func (db *DB) AgentMetadataResults(ctx context.Context, agentIDs []string) (map[string]map[string]AgentMetadataResult, error) {
	out := map[string]map[string]AgentMetadataResult{}
	if len(agentIDs) == 0 {
		return out, nil
	}
	results, err := collectAll[AgentMetadataResult](db.q().Query(ctx, `SELECT agent_id, key, value, error, collected_at FROM workspace_agent_metadata
		WHERE agent_id = ANY($1::uuid[])`, agentIDs))
	for _, m := range results {
		if out[m.AgentID] == nil {
			out[m.AgentID] = map[string]AgentMetadataResult{}
		}
		out[m.AgentID][m.Key] = m
	}
	return out, err
}
