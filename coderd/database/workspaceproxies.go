package database

import (
	"context"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// WorkspaceProxy is a row of workspace_proxies: a region's proxy as an owner
// created it and as it last registered.
type WorkspaceProxy struct {
	ID          string `db:"id"`
	Name        string `db:"name"`
	DisplayName string `db:"display_name"`
	Icon        string `db:"icon"`
	// URL and WildcardHostname are what the proxy registered; "" until it
	// registers.
	URL               string `db:"url"`
	WildcardHostname  string `db:"wildcard_hostname"`
	TokenHashedSecret []byte `db:"token_hashed_secret"`
	// Version, ReplicaID and ReplicaHostname are the last registration's.
	Version         string `db:"version"`
	ReplicaID       string `db:"replica_id"`
	ReplicaHostname string `db:"replica_hostname"`
	// HealthReport is the JSON object of the proxy's own health report sent
	// with its last registration ("{}" before the first).
	HealthReport []byte `db:"health_report"`
	// RegisteredAt is the first registration, LastHeartbeatAt the last
	// registration or heartbeat; both zero while it never registered.
	// These three columns are nullable: workspaceProxyRow reads them.
	RegisteredAt    time.Time `db:"-"`
	LastHeartbeatAt time.Time `db:"-"`
	// DeregisteredAt is when it last shut down cleanly, zero when it has
	// registered since.
	DeregisteredAt time.Time `db:"-"`
	CreatedAt      time.Time `db:"created_at"`
	UpdatedAt      time.Time `db:"updated_at"`
	Deleted        bool      `db:"deleted"`
}

// workspaceProxyColumns are the columns of workspace_proxies a
// workspaceProxyRow holds.
const workspaceProxyColumns = `id, name, display_name, icon, url, wildcard_hostname, token_hashed_secret, version, replica_id,
	replica_hostname, health_report, registered_at, last_heartbeat_at, deregistered_at, created_at, updated_at, deleted`

// workspaceProxyRow is a row of workspace_proxies as selected: the
// proxy with its nullable timestamps (NULL: not yet).
type workspaceProxyRow struct {
	WorkspaceProxy
	RegisteredAt    *time.Time `db:"registered_at"`
	LastHeartbeatAt *time.Time `db:"last_heartbeat_at"`
	DeregisteredAt  *time.Time `db:"deregistered_at"`
}

// proxy returns the row's proxy, a NULL timestamp as the zero time.
func (r workspaceProxyRow) proxy() WorkspaceProxy {
	p := r.WorkspaceProxy
	p.RegisteredAt, p.LastHeartbeatAt, p.DeregisteredAt = timeOrZero(r.RegisteredAt), timeOrZero(r.LastHeartbeatAt), timeOrZero(r.DeregisteredAt)
	return p
}

// collectWorkspaceProxy maps the first row of a query of
// workspaceProxyColumns onto a proxy (ErrNotFound when none).
func collectWorkspaceProxy(rows pgx.Rows, err error) (WorkspaceProxy, error) {
	r, err := collectOne[workspaceProxyRow](rows, err)
	return r.proxy(), err
}

// timeOrZero is a nullable timestamp as a time, zero for NULL.
func timeOrZero(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return *t
}

// InsertWorkspaceProxy creates a proxy with a new id; a name taken
// (case-insensitively) by a proxy that is not deleted is ErrConflict.
func (db *DB) InsertWorkspaceProxy(ctx context.Context, p WorkspaceProxy) (WorkspaceProxy, error) {
	now := db.now()
	return collectWorkspaceProxy(db.q().Query(ctx, `INSERT INTO workspace_proxies
		(id, name, display_name, icon, token_hashed_secret, created_at, updated_at)
		VALUES ($1, $2, $3, $4, $5, $6, $6) RETURNING `+workspaceProxyColumns,
		uuid.NewString(), p.Name, p.DisplayName, p.Icon, p.TokenHashedSecret, now))
}

// WorkspaceProxyByID returns a proxy, deleted ones included (a deleted
// proxy's token is refused by name).
func (db *DB) WorkspaceProxyByID(ctx context.Context, id string) (WorkspaceProxy, error) {
	if uuid.Validate(id) != nil {
		return WorkspaceProxy{}, ErrNotFound
	}
	return collectWorkspaceProxy(db.q().Query(ctx, `SELECT `+workspaceProxyColumns+` FROM workspace_proxies WHERE id = $1`, id))
}

// WorkspaceProxyByName returns the proxy called name (case-insensitively)
// that is not deleted.
func (db *DB) WorkspaceProxyByName(ctx context.Context, name string) (WorkspaceProxy, error) {
	return collectWorkspaceProxy(db.q().Query(ctx, `SELECT `+workspaceProxyColumns+` FROM workspace_proxies
		WHERE lower(name) = lower($1) AND NOT deleted`, name))
}

// WorkspaceProxies lists the proxies that are not deleted, by name.
func (db *DB) WorkspaceProxies(ctx context.Context) ([]WorkspaceProxy, error) {
	list, err := collectAll[workspaceProxyRow](db.q().Query(ctx, `SELECT `+workspaceProxyColumns+` FROM workspace_proxies WHERE NOT deleted ORDER BY lower(name)`))
	if err != nil {
		return nil, err
	}
	out := make([]WorkspaceProxy, len(list))
	for i, r := range list {
		out[i] = r.proxy()
	}
	return out, nil
}

// DeleteWorkspaceProxy marks a proxy deleted (ErrNotFound when there is
// none, or it is deleted already). Its row stays, so that its token is
// refused with a reason.
func (db *DB) DeleteWorkspaceProxy(ctx context.Context, id string) (WorkspaceProxy, error) {
	if uuid.Validate(id) != nil {
		return WorkspaceProxy{}, ErrNotFound
	}
	return collectWorkspaceProxy(db.q().Query(ctx, `UPDATE workspace_proxies SET deleted = true, updated_at = $2
		WHERE id = $1 AND NOT deleted RETURNING `+workspaceProxyColumns, id, db.now()))
}

// ChannelWorkspaceProxyDeleted carries a workspace proxy's id when it is
// deleted, so that every replica closes the proxy's relay session at once.
const ChannelWorkspaceProxyDeleted = "coder_workspace_proxy_deleted"

// RegisterWorkspaceProxyParams are what a proxy says when it registers or
// heartbeats.
type RegisterWorkspaceProxyParams struct {
	ID               string
	URL              string
	WildcardHostname string
	Version          string
	ReplicaID        string
	ReplicaHostname  string
	// HealthReport is a JSON object; nil stores "{}".
	HealthReport []byte
	// Now is the registration's time, on coderd's clock.
	Now time.Time
}

// RegisterWorkspaceProxy records a registration or heartbeat: the proxy's
// URLs, version, replica and health report, last_heartbeat_at = Now (and
// registered_at the first time), and clears deregistered_at. A proxy
// deleted meanwhile is ErrNotFound.
func (db *DB) RegisterWorkspaceProxy(ctx context.Context, p RegisterWorkspaceProxyParams) (WorkspaceProxy, error) {
	if p.HealthReport == nil {
		p.HealthReport = []byte("{}")
	}
	return collectWorkspaceProxy(db.q().Query(ctx, `UPDATE workspace_proxies SET url = $2, wildcard_hostname = $3, version = $4,
			replica_id = $5, replica_hostname = $6, health_report = $7, registered_at = coalesce(registered_at, $8),
			last_heartbeat_at = $8, deregistered_at = NULL, updated_at = $8
		WHERE id = $1 AND NOT deleted RETURNING `+workspaceProxyColumns,
		p.ID, p.URL, p.WildcardHostname, p.Version, p.ReplicaID, p.ReplicaHostname, p.HealthReport, p.Now.UTC()))
}

// DeregisterWorkspaceProxy records the clean shutdown of the proxy's
// replica replicaID at now. It reports false, changing nothing, when
// another replica registered last (that one still serves).
func (db *DB) DeregisterWorkspaceProxy(ctx context.Context, id, replicaID string, now time.Time) (bool, error) {
	tag, err := db.q().Exec(ctx, `UPDATE workspace_proxies SET deregistered_at = $3, updated_at = $3
		WHERE id = $1 AND replica_id = $2 AND NOT deleted`, id, replicaID, now.UTC())
	if err != nil {
		return false, err
	}
	return tag.RowsAffected() > 0, nil
}
