package database

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// User is a row of users.
type User struct {
	ID             string
	Email          string
	Username       string
	HashedPassword []byte
	Roles          []string
	Status         string
	CreatedAt      time.Time
	UpdatedAt      time.Time
	LastSeenAt     time.Time
}

const userColumns = `id, email, username, hashed_password, roles, status, created_at, updated_at, last_seen_at`

func scanUser(row pgx.Row) (User, error) {
	var u User
	err := row.Scan(&u.ID, &u.Email, &u.Username, &u.HashedPassword, &u.Roles, &u.Status, &u.CreatedAt, &u.UpdatedAt, &u.LastSeenAt)
	return u, mapErr(err)
}

// InsertUserParams creates a user.
type InsertUserParams struct {
	Email          string
	Username       string
	HashedPassword []byte
	Roles          []string
}

// InsertUser creates a user and makes it a member of the default organization.
func (db *DB) InsertUser(ctx context.Context, p InsertUserParams) (User, error) {
	now := db.now()
	if p.Roles == nil {
		p.Roles = []string{}
	}
	u, err := scanUser(db.q().QueryRow(ctx, `INSERT INTO users (id, email, username, hashed_password, roles, created_at, updated_at, last_seen_at)
		VALUES ($1, $2, $3, $4, $5, $6, $6, $6) RETURNING `+userColumns,
		uuid.NewString(), p.Email, p.Username, p.HashedPassword, p.Roles, now))
	if err != nil {
		return User{}, err
	}
	_, err = db.q().Exec(ctx, `INSERT INTO organization_members (organization_id, user_id, created_at)
		SELECT id, $1, $2 FROM organizations WHERE is_default`, u.ID, now)
	return u, mapErr(err)
}

// CountUsers counts the users that are not deleted.
func (db *DB) CountUsers(ctx context.Context) (int64, error) {
	var n int64
	err := db.q().QueryRow(ctx, `SELECT count(*) FROM users WHERE NOT deleted`).Scan(&n)
	return n, err
}

// UserByID returns a user.
func (db *DB) UserByID(ctx context.Context, id string) (User, error) {
	if uuid.Validate(id) != nil {
		return User{}, ErrNotFound
	}
	return scanUser(db.q().QueryRow(ctx, `SELECT `+userColumns+` FROM users WHERE id = $1 AND NOT deleted`, id))
}

// UserByEmailOrUsername returns the user with that email or username.
func (db *DB) UserByEmailOrUsername(ctx context.Context, email, username string) (User, error) {
	return scanUser(db.q().QueryRow(ctx, `SELECT `+userColumns+` FROM users
		WHERE (lower(email) = lower($1) OR lower(username) = lower($2)) AND NOT deleted LIMIT 1`, email, username))
}

// Users lists users by creation.
func (db *DB) Users(ctx context.Context) ([]User, error) {
	rows, err := db.q().Query(ctx, `SELECT `+userColumns+` FROM users WHERE NOT deleted ORDER BY created_at, username`)
	if err != nil {
		return nil, err
	}
	return collect(rows, scanUser)
}

// UpdateUserRoles replaces a user's roles.
func (db *DB) UpdateUserRoles(ctx context.Context, id string, roles []string) (User, error) {
	return scanUser(db.q().QueryRow(ctx, `UPDATE users SET roles = $2, updated_at = $3 WHERE id = $1 AND NOT deleted RETURNING `+userColumns,
		id, roles, db.now()))
}

// TouchUser records that the user was seen.
func (db *DB) TouchUser(ctx context.Context, id string) error {
	_, err := db.q().Exec(ctx, `UPDATE users SET last_seen_at = $2 WHERE id = $1`, id, db.now())
	return err
}

// Organization is a row of organizations.
type Organization struct {
	ID          string
	Name        string
	DisplayName string
	IsDefault   bool
	CreatedAt   time.Time
}

// EnsureDefaultOrganization creates the default organization once.
func (db *DB) EnsureDefaultOrganization(ctx context.Context) (Organization, error) {
	now := db.now()
	_, err := db.q().Exec(ctx, `INSERT INTO organizations (id, name, display_name, is_default, created_at, updated_at)
		VALUES ($1, 'coder', 'Coder', true, $2, $2) ON CONFLICT DO NOTHING`, uuid.NewString(), now)
	if err != nil {
		return Organization{}, fmt.Errorf("create default organization: %w", err)
	}
	return db.DefaultOrganization(ctx)
}

// DefaultOrganization returns the default organization.
func (db *DB) DefaultOrganization(ctx context.Context) (Organization, error) {
	var o Organization
	err := db.q().QueryRow(ctx, `SELECT id, name, display_name, is_default, created_at FROM organizations WHERE is_default`).
		Scan(&o.ID, &o.Name, &o.DisplayName, &o.IsDefault, &o.CreatedAt)
	return o, mapErr(err)
}

// APIKey is a row of api_keys.
type APIKey struct {
	ID              string
	HashedSecret    []byte
	UserID          string
	LoginType       string
	TokenName       string
	LifetimeSeconds int64
	ExpiresAt       time.Time
	CreatedAt       time.Time
	LastUsed        time.Time
}

const apiKeyColumns = `id, hashed_secret, user_id, login_type, token_name, lifetime_seconds, expires_at, created_at, last_used`

func scanAPIKey(row pgx.Row) (APIKey, error) {
	var k APIKey
	err := row.Scan(&k.ID, &k.HashedSecret, &k.UserID, &k.LoginType, &k.TokenName, &k.LifetimeSeconds, &k.ExpiresAt, &k.CreatedAt, &k.LastUsed)
	return k, mapErr(err)
}

// InsertAPIKey stores a key.
func (db *DB) InsertAPIKey(ctx context.Context, k APIKey) (APIKey, error) {
	now := db.now()
	return scanAPIKey(db.q().QueryRow(ctx, `INSERT INTO api_keys (`+apiKeyColumns+`)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $8) RETURNING `+apiKeyColumns,
		k.ID, k.HashedSecret, k.UserID, k.LoginType, k.TokenName, k.LifetimeSeconds, k.ExpiresAt, now))
}

// APIKeyByID returns a key.
func (db *DB) APIKeyByID(ctx context.Context, id string) (APIKey, error) {
	return scanAPIKey(db.q().QueryRow(ctx, `SELECT `+apiKeyColumns+` FROM api_keys WHERE id = $1`, id))
}

// APIKeysByUser lists a user's keys of one login type.
func (db *DB) APIKeysByUser(ctx context.Context, userID, loginType string) ([]APIKey, error) {
	rows, err := db.q().Query(ctx, `SELECT `+apiKeyColumns+` FROM api_keys WHERE user_id = $1 AND login_type = $2 ORDER BY created_at`, userID, loginType)
	if err != nil {
		return nil, err
	}
	return collect(rows, scanAPIKey)
}

// TouchAPIKey records a key's use.
func (db *DB) TouchAPIKey(ctx context.Context, id string, at time.Time) error {
	_, err := db.q().Exec(ctx, `UPDATE api_keys SET last_used = $2 WHERE id = $1`, id, at)
	return err
}

// DeleteAPIKey removes a key; deleting a missing key is ErrNotFound.
func (db *DB) DeleteAPIKey(ctx context.Context, userID, id string) error {
	tag, err := db.q().Exec(ctx, `DELETE FROM api_keys WHERE id = $1 AND user_id = $2`, id, userID)
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return ErrNotFound
	}
	return nil
}

// DeploymentValue returns a deployment-wide setting, creating it with
// initial when it does not exist yet.
func (db *DB) DeploymentValue(ctx context.Context, key, initial string) (string, error) {
	var v string
	err := db.q().QueryRow(ctx, `WITH ins AS (INSERT INTO deployment (key, value) VALUES ($1, $2) ON CONFLICT (key) DO NOTHING RETURNING value)
		SELECT value FROM ins UNION ALL SELECT value FROM deployment WHERE key = $1 LIMIT 1`, key, initial).Scan(&v)
	return v, mapErr(err)
}

// collect scans every row with scan.
func collect[T any](rows pgx.Rows, scan func(pgx.Row) (T, error)) ([]T, error) {
	defer rows.Close()
	out := []T{}
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// ErrFirstUserExists is returned by InsertFirstUser once any user exists.
var ErrFirstUserExists = errors.New("database: the first user already exists")

// InsertFirstUser creates the first user, or fails with ErrFirstUserExists.
// Two racing calls cannot both succeed: the users table is locked.
func (db *DB) InsertFirstUser(ctx context.Context, p InsertUserParams) (User, error) {
	var u User
	err := db.InTx(ctx, func(tx *DB) error {
		if _, err := tx.q().Exec(ctx, `LOCK TABLE users IN SHARE ROW EXCLUSIVE MODE`); err != nil {
			return err
		}
		n, err := tx.CountUsers(ctx)
		if err != nil {
			return err
		}
		if n > 0 {
			return ErrFirstUserExists
		}
		u, err = tx.InsertUser(ctx, p)
		return err
	})
	return u, err
}
