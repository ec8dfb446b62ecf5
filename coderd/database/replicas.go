package database

import (
	"context"
	"time"
)

// ChannelReplicas carries a replica's id when it joins or leaves, so that
// the other replicas look again at once instead of at their next
// heartbeat.
const ChannelReplicas = "coder_replicas"

// Replica is one coderd process serving this deployment.
type Replica struct {
	ID           string    `db:"id"`
	Hostname     string    `db:"hostname"`
	RelayAddress string    `db:"relay_address"`
	Version      string    `db:"version"`
	StartedAt    time.Time `db:"started_at"`
	// UpdatedAt is the last heartbeat, on the database's clock.
	UpdatedAt time.Time `db:"updated_at"`
}

// replicaColumns are the columns of replicas a Replica holds.
const replicaColumns = `id, hostname, relay_address, version, started_at, updated_at`

// UpsertReplica records a replica's heartbeat: it inserts the row the first
// time (started_at = now) and refreshes updated_at and the replica's
// details after that. Times are the database's.
func (db *DB) UpsertReplica(ctx context.Context, r Replica) (Replica, error) {
	return collectOne[Replica](db.q().Query(ctx, `INSERT INTO replicas (`+replicaColumns+`)
		VALUES ($1, $2, $3, $4, now(), now())
		ON CONFLICT (id) DO UPDATE SET hostname = excluded.hostname, relay_address = excluded.relay_address,
			version = excluded.version, updated_at = now()
		RETURNING `+replicaColumns, r.ID, r.Hostname, r.RelayAddress, r.Version))
}

// LiveReplicas lists the replicas whose last heartbeat is at most maxAge
// old, oldest first.
func (db *DB) LiveReplicas(ctx context.Context, maxAge time.Duration) ([]Replica, error) {
	return collectAll[Replica](db.q().Query(ctx, `SELECT `+replicaColumns+` FROM replicas
		WHERE updated_at > now() - make_interval(secs => $1) ORDER BY started_at, id`, maxAge.Seconds()))
}

// DeleteReplica removes a replica's row (its clean shutdown).
func (db *DB) DeleteReplica(ctx context.Context, id string) error {
	_, err := db.q().Exec(ctx, `DELETE FROM replicas WHERE id = $1`, id)
	return err
}

// DeleteReplicasOlderThan removes the rows of replicas whose last heartbeat
// is older than maxAge and reports how many it removed.
func (db *DB) DeleteReplicasOlderThan(ctx context.Context, maxAge time.Duration) (int64, error) {
	tag, err := db.q().Exec(ctx, `DELETE FROM replicas WHERE updated_at < now() - make_interval(secs => $1)`, maxAge.Seconds())
	return tag.RowsAffected(), err
}
