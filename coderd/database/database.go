// Package database is coderd's only door to PostgreSQL: the schema (versioned
// migrations run at start), the queries, and the job queue. Nothing else in
// the product talks SQL. It must not know about HTTP, roles or the API's JSON;
// callers pass plain values and get plain rows back.
package database

import (
	"context"
	"crypto/x509"
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ErrNotFound is returned when a row a caller asked for does not exist.
var ErrNotFound = errors.New("database: not found")

// ErrConflict is returned when a write breaks a unique constraint.
var ErrConflict = errors.New("database: already exists")

//go:embed migrations/*.sql
var migrations embed.FS

// DB is a connection pool with the product's queries.
type DB struct {
	pool *pgxpool.Pool
	// URL is the connection URL, kept for the pubsub's dedicated connection.
	url string
	now func() time.Time
	// tx is set inside InTx.
	tx pgx.Tx
}

// Open connects to PostgreSQL at url and checks the connection.
func Open(ctx context.Context, url string) (*DB, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("parse postgres url: %w", err)
	}
	if cfg.MaxConns < 10 {
		cfg.MaxConns = 10
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to postgres: %w", err)
	}
	pingCtx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := pool.Ping(pingCtx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connect to postgres at %s: %w%s", redact(url), err, tlsHint(err))
	}
	return &DB{pool: pool, url: url, now: func() time.Time { return time.Now().UTC().Truncate(time.Microsecond) }}, nil
}

// Close closes every connection.
func (db *DB) Close() { db.pool.Close() }

// Pool exposes the pool for tests and benchmarks.
func (db *DB) Pool() *pgxpool.Pool { return db.pool }

// Ping checks that the database answers.
func (db *DB) Ping(ctx context.Context) error { return db.pool.Ping(ctx) }

// tlsHint says what to change in the URL when the database's TLS is why a
// connection failed; empty otherwise.
func tlsHint(err error) string {
	var unknown x509.UnknownAuthorityError
	var host x509.HostnameError
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &unknown):
		return "; the database's certificate was issued by a CA this host does not trust: add sslrootcert=FILE (the PEM of that CA) and sslmode=verify-full to the postgres URL"
	case errors.As(err, &host):
		names := slices.Clone(host.Certificate.DNSNames)
		for _, ip := range host.Certificate.IPAddresses {
			names = append(names, ip.String())
		}
		return fmt.Sprintf("; connect to the database by a name the certificate holds (%s), not %s", strings.Join(names, ", "), host.Host)
	case errors.As(err, &pgErr) && pgErr.Code == "28000" && strings.Contains(pgErr.Message, "no encryption"):
		return "; the database takes encrypted connections only: set sslmode=verify-full and sslrootcert=FILE (the PEM of the CA that issued its certificate) in the postgres URL"
	}
	return ""
}

func redact(url string) string {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return "(unparseable url)"
	}
	return fmt.Sprintf("%s:%d/%s", cfg.Host, cfg.Port, cfg.Database)
}

// Migrate applies every migration not yet applied, in order, each in its own
// transaction, under an advisory lock so that replicas starting together do
// not race. Running it twice is a no-op.
func (db *DB) Migrate(ctx context.Context, log *slog.Logger) error {
	names, err := fs.Glob(migrations, "migrations/*.sql")
	if err != nil {
		return err
	}
	sort.Strings(names)
	conn, err := db.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	defer conn.Release()
	const lockID = 7031_2026
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, lockID); err != nil {
		return fmt.Errorf("migrate: take lock: %w", err)
	}
	defer conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, lockID) //nolint:errcheck
	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return fmt.Errorf("migrate: create schema_migrations: %w", err)
	}
	for _, name := range names {
		base := strings.TrimPrefix(name, "migrations/")
		version, err := strconv.Atoi(strings.SplitN(base, "_", 2)[0])
		if err != nil {
			return fmt.Errorf("migrate: bad migration file name %s", base)
		}
		var applied bool
		if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM schema_migrations WHERE version = $1)`, version).Scan(&applied); err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
		if applied {
			continue
		}
		sql, err := migrations.ReadFile(name)
		if err != nil {
			return err
		}
		err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, string(sql)); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `INSERT INTO schema_migrations (version, name) VALUES ($1, $2)`, version, base)
			return err
		})
		if err != nil {
			return fmt.Errorf("migrate: apply %s: %w", base, err)
		}
		log.Info("applied database migration", "version", version, "name", base)
	}
	return nil
}

// SchemaVersion returns the newest applied migration.
func (db *DB) SchemaVersion(ctx context.Context) (int, error) {
	var v int
	err := db.pool.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM schema_migrations`).Scan(&v)
	return v, err
}

// InTx runs fn in a transaction: committed when fn returns nil. Inside a
// transaction already, fn joins it.
func (db *DB) InTx(ctx context.Context, fn func(tx *DB) error) error {
	if db.tx != nil {
		return fn(db)
	}
	return pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
		return fn(&DB{pool: nil, url: db.url, now: db.now, tx: tx})
	})
}

// querier is what both a pool and a transaction offer.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error)
}

func (db *DB) q() querier {
	if db.tx != nil {
		return db.tx
	}
	return db.pool
}

// execOne runs a statement that must change a row: one that changes none
// is ErrNotFound (the row is not there, or not in the state the statement
// asks for).
func (db *DB) execOne(ctx context.Context, sql string, args ...any) error {
	tag, err := db.q().Exec(ctx, sql, args...)
	if err != nil {
		return mapErr(err)
	}
	if tag.RowsAffected() == 0 {
		return ErrNotFound
	}
	return nil
}

// mapErr turns driver errors into this package's errors.
func mapErr(err error) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return ErrNotFound
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" {
		return fmt.Errorf("%w: %s", ErrConflict, pgErr.ConstraintName)
	}
	return err
}

// Unavailable reports whether err says that PostgreSQL could not be
// reached or went away during the statement (a restart, a crash, a lost
// connection): the same statement can succeed once it is back. An error
// about the data or the statement itself is not.
func Unavailable(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		// Class 08: connection exception; 57P01-57P03: the server is
		// shutting down, crashed or is starting up.
		return strings.HasPrefix(pgErr.Code, "08") || pgErr.Code == "57P01" || pgErr.Code == "57P02" || pgErr.Code == "57P03"
	}
	var connectErr *pgconn.ConnectError
	var netErr net.Error
	return errors.As(err, &connectErr) || errors.As(err, &netErr) || errors.Is(err, io.ErrUnexpectedEOF) ||
		pgconn.SafeToRetry(err) || pgconn.Timeout(err)
}

// Now is the database layer's clock, truncated to PostgreSQL's precision.
func (db *DB) Now() time.Time { return db.now() }
