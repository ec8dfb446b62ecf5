package database

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// What the database server says about itself, for the owners' diagnostics
// (GET /api/v2/debug/postgres). These read the catalog and the statistics
// views only; which settings may be shown is the caller's decision.

// PostgresServer is the server's version, start and this database's size
// and connections.
type PostgresServer struct {
	// Version is version(); ServerVersion is server_version ("16.9").
	Version       string
	ServerVersion string
	StartedAt     time.Time
	InRecovery    bool
	Database      string
	DatabaseSize  int64
	// Connections counts this database's backends by state ("active",
	// "idle", …; "" for background workers).
	Connections map[string]int64
}

// PostgresServer describes the server and this database.
func (db *DB) PostgresServer(ctx context.Context) (PostgresServer, error) {
	var s PostgresServer
	err := db.q().QueryRow(ctx, `SELECT version(), current_setting('server_version'), pg_postmaster_start_time(),
		pg_is_in_recovery(), current_database(), pg_database_size(current_database())`).
		Scan(&s.Version, &s.ServerVersion, &s.StartedAt, &s.InRecovery, &s.Database, &s.DatabaseSize)
	if err != nil {
		return s, fmt.Errorf("describe the postgres server: %w", err)
	}
	rows, err := db.q().Query(ctx, `SELECT COALESCE(state, ''), count(*) FROM pg_stat_activity
		WHERE datname = current_database() GROUP BY 1`)
	if err != nil {
		return s, fmt.Errorf("count postgres connections: %w", err)
	}
	s.Connections = map[string]int64{}
	var state string
	var n int64
	_, err = pgx.ForEachRow(rows, []any{&state, &n}, func() error {
		s.Connections[state] = n
		return nil
	})
	if err != nil {
		return s, fmt.Errorf("count postgres connections: %w", err)
	}
	return s, nil
}

// PostgresSetting is one row of pg_settings.
type PostgresSetting struct {
	Name, Setting, Unit, Source string
}

// PostgresSettings lists pg_settings by name (what this role may read of
// them).
func (db *DB) PostgresSettings(ctx context.Context) ([]PostgresSetting, error) {
	rows, err := db.q().Query(ctx, `SELECT name, COALESCE(setting, ''), COALESCE(unit, ''), COALESCE(source, '')
		FROM pg_settings ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("read pg_settings: %w", err)
	}
	return collect(rows, func(r pgx.Row) (PostgresSetting, error) {
		var s PostgresSetting
		return s, r.Scan(&s.Name, &s.Setting, &s.Unit, &s.Source)
	})
}

// TableSize is one table's size and estimated rows.
type TableSize struct {
	Schema, Name                             string
	Rows, TotalBytes, TableBytes, IndexBytes int64
}

// LargestTables lists the limit largest tables (with their indexes and
// TOAST) outside the system schemas, largest first. Rows is the
// statistics' live rows, else the planner's estimate.
func (db *DB) LargestTables(ctx context.Context, limit int) ([]TableSize, error) {
	rows, err := db.q().Query(ctx, `SELECT n.nspname, c.relname,
			COALESCE(s.n_live_tup, GREATEST(c.reltuples, 0))::bigint,
			pg_total_relation_size(c.oid), pg_relation_size(c.oid), pg_indexes_size(c.oid)
		FROM pg_class c
		JOIN pg_namespace n ON n.oid = c.relnamespace
		LEFT JOIN pg_stat_all_tables s ON s.relid = c.oid
		WHERE c.relkind IN ('r', 'p', 'm') AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg_toast%'
		ORDER BY pg_total_relation_size(c.oid) DESC, n.nspname, c.relname
		LIMIT $1`, limit)
	if err != nil {
		return nil, fmt.Errorf("list table sizes: %w", err)
	}
	return collect(rows, func(r pgx.Row) (TableSize, error) {
		var t TableSize
		return t, r.Scan(&t.Schema, &t.Name, &t.Rows, &t.TotalBytes, &t.TableBytes, &t.IndexBytes)
	})
}
