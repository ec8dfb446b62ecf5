package database

import (
	"context"
	"fmt"
	"time"
)

// What the database server says about itself, for the owners' diagnostics
// (GET /api/v2/debug/postgres). These read the catalog and the statistics
// views only; which settings may be shown is the caller's decision.

// PostgresServer is the server's version, start and this database's size
// and connections.
type PostgresServer struct {
	// Version is version(); ServerVersion is server_version ("16.9").
	Version       string    `db:"version"`
	ServerVersion string    `db:"server_version"`
	StartedAt     time.Time `db:"started_at"`
	InRecovery    bool      `db:"in_recovery"`
	Database      string    `db:"database"`
	DatabaseSize  int64     `db:"database_size"`
	// Connections counts this database's backends by state ("active",
	// "idle", …; "" for background workers). A second query reads them.
	Connections map[string]int64 `db:"-"`
}

// PostgresServer describes the server and this database.
func (db *DB) PostgresServer(ctx context.Context) (PostgresServer, error) {
	s, err := collectOne[PostgresServer](db.q().Query(ctx, `SELECT version() AS version, current_setting('server_version') AS server_version,
		pg_postmaster_start_time() AS started_at, pg_is_in_recovery() AS in_recovery, current_database() AS database,
		pg_database_size(current_database()) AS database_size`))
	if err != nil {
		return s, fmt.Errorf("describe the postgres server: %w", err)
	}
	type stateCount struct {
		State string `db:"state"`
		N     int64  `db:"n"`
	}
	counts, err := collectAll[stateCount](db.q().Query(ctx, `SELECT COALESCE(state, '') AS state, count(*) AS n FROM pg_stat_activity
		WHERE datname = current_database() GROUP BY 1`))
	if err != nil {
		return s, fmt.Errorf("count postgres connections: %w", err)
	}
	s.Connections = map[string]int64{}
	for _, c := range counts {
		s.Connections[c.State] = c.N
	}
	return s, nil
}

// PostgresSetting is one row of pg_settings.
type PostgresSetting struct {
	Name    string `db:"name"`
	Setting string `db:"setting"`
	Unit    string `db:"unit"`
	Source  string `db:"source"`
}

// PostgresSettings lists pg_settings by name (what this role may read of
// them).
func (db *DB) PostgresSettings(ctx context.Context) ([]PostgresSetting, error) {
	list, err := collectAll[PostgresSetting](db.q().Query(ctx, `SELECT name, COALESCE(setting, '') AS setting, COALESCE(unit, '') AS unit,
		COALESCE(source, '') AS source FROM pg_settings ORDER BY name`))
	if err != nil {
		return nil, fmt.Errorf("read pg_settings: %w", err)
	}
	return list, nil
}

// TableSize is one table's size and estimated rows.
type TableSize struct {
	Schema     string `db:"schema"`
	Name       string `db:"name"`
	Rows       int64  `db:"rows"`
	TotalBytes int64  `db:"total_bytes"`
	TableBytes int64  `db:"table_bytes"`
	IndexBytes int64  `db:"index_bytes"`
}

// LargestTables lists the limit largest tables (with their indexes and
// TOAST) outside the system schemas, largest first. Rows is the
// statistics' live rows, else the planner's estimate.
func (db *DB) LargestTables(ctx context.Context, limit int) ([]TableSize, error) {
	list, err := collectAll[TableSize](db.q().Query(ctx, `SELECT n.nspname AS schema, c.relname AS name,
			COALESCE(s.n_live_tup, GREATEST(c.reltuples, 0))::bigint AS rows,
			pg_total_relation_size(c.oid) AS total_bytes, pg_relation_size(c.oid) AS table_bytes, pg_indexes_size(c.oid) AS index_bytes
		FROM pg_class c
		JOIN pg_namespace n ON n.oid = c.relnamespace
		LEFT JOIN pg_stat_all_tables s ON s.relid = c.oid
		WHERE c.relkind IN ('r', 'p', 'm') AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg_toast%'
		ORDER BY pg_total_relation_size(c.oid) DESC, n.nspname, c.relname
		LIMIT $1`, limit))
	if err != nil {
		return nil, fmt.Errorf("list table sizes: %w", err)
	}
	return list, nil
}
