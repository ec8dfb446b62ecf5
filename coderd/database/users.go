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
	ID       string `db:"id"`
	Email    string `db:"email"`
	Username string `db:"username"`
	// Name is the full name ("" when not set).
	Name           string   `db:"name"`
	HashedPassword []byte   `db:"hashed_password"`
	Roles          []string `db:"roles"`
	// Status is UserStatusActive or UserStatusSuspended.
	Status     string    `db:"status"`
	CreatedAt  time.Time `db:"created_at"`
	UpdatedAt  time.Time `db:"updated_at"`
	LastSeenAt time.Time `db:"last_seen_at"`
}

// userColumns are the columns of users a User holds.
const userColumns = `id, email, username, name, hashed_password, roles, status, created_at, updated_at, last_seen_at`

// InsertUserParams creates a user.
type InsertUserParams struct {
	Email    string
	Username string
	// Name is the full name ("" when not set).
	Name           string
	HashedPassword []byte
	Roles          []string
}

// InsertUser creates a user and makes it a member of the default organization.
func (db *DB) InsertUser(ctx context.Context, p InsertUserParams) (User, error) {
	now := db.now()
	if p.Roles == nil {
		p.Roles = []string{}
	}
	u, err := collectOne[User](db.q().Query(ctx, `INSERT INTO users (id, email, username, name, hashed_password, roles, created_at, updated_at, last_seen_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $7, $7) RETURNING `+userColumns,
		uuid.NewString(), p.Email, p.Username, p.Name, p.HashedPassword, p.Roles, now))
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
	return collectOne[User](db.q().Query(ctx, `SELECT `+userColumns+` FROM users WHERE id = $1 AND NOT deleted`, id))
}

// UserByEmailOrUsername returns the user with that email or username.
func (db *DB) UserByEmailOrUsername(ctx context.Context, email, username string) (User, error) {
	return collectOne[User](db.q().Query(ctx, `SELECT `+userColumns+` FROM users
		WHERE (lower(email) = lower($1) OR lower(username) = lower($2)) AND NOT deleted LIMIT 1`, email, username))
}

// Users lists users by creation.
func (db *DB) Users(ctx context.Context) ([]User, error) {
	return collectAll[User](db.q().Query(ctx, `SELECT `+userColumns+` FROM users WHERE NOT deleted ORDER BY created_at, username`))
}

// UpdateUserRoles replaces a user's roles.
func (db *DB) UpdateUserRoles(ctx context.Context, id string, roles []string) (User, error) {
	return collectOne[User](db.q().Query(ctx, `UPDATE users SET roles = $2, updated_at = $3 WHERE id = $1 AND NOT deleted RETURNING `+userColumns,
		id, roles, db.now()))
}

// LockActiveOwners returns the ids of the active owners, locking their
// rows until the transaction ends, so that two transactions that each
// demote an owner cannot both believe another one remains.
func (db *DB) LockActiveOwners(ctx context.Context) ([]string, error) {
	rows, err := db.q().Query(ctx, `SELECT id FROM users WHERE 'owner' = ANY(roles) AND status = 'active' AND NOT deleted ORDER BY id FOR UPDATE`)
	if err != nil {
		return nil, mapErr(err)
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// UpdateUserProfile changes a user's username and full name.
func (db *DB) UpdateUserProfile(ctx context.Context, id, username, name string) (User, error) {
	return collectOne[User](db.q().Query(ctx, `UPDATE users SET username = $2, name = $3, updated_at = $4 WHERE id = $1 AND NOT deleted RETURNING `+userColumns,
		id, username, name, db.now()))
}

// User statuses: a suspended user can neither log in nor use a session or
// token it already has.
// ChannelAuthChanged carries the id of a user whose roles, status or API
// keys changed (a trigger sends it, migration 000007), on commit.
const ChannelAuthChanged = "coder_auth_changed"

const (
	UserStatusActive    = "active"
	UserStatusSuspended = "suspended"
)

// UpdateUserStatus sets a user's status (UserStatusActive or
// UserStatusSuspended).
func (db *DB) UpdateUserStatus(ctx context.Context, id, status string) (User, error) {
	return collectOne[User](db.q().Query(ctx, `UPDATE users SET status = $2, updated_at = $3 WHERE id = $1 AND NOT deleted RETURNING `+userColumns,
		id, status, db.now()))
}

// TouchUser records that the user was seen.
func (db *DB) TouchUser(ctx context.Context, id string) error {
	_, err := db.q().Exec(ctx, `UPDATE users SET last_seen_at = $2 WHERE id = $1`, id, db.now())
	return err
}

// Organization is a row of organizations.
type Organization struct {
	ID          string    `db:"id"`
	Name        string    `db:"name"`
	DisplayName string    `db:"display_name"`
	IsDefault   bool      `db:"is_default"`
	CreatedAt   time.Time `db:"created_at"`
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
	return collectOne[Organization](db.q().Query(ctx, `SELECT id, name, display_name, is_default, created_at FROM organizations WHERE is_default`))
}

// APIKey is a row of api_keys.
type APIKey struct {
	ID              string    `db:"id"`
	HashedSecret    []byte    `db:"hashed_secret"`
	UserID          string    `db:"user_id"`
	LoginType       string    `db:"login_type"`
	TokenName       string    `db:"token_name"`
	LifetimeSeconds int64     `db:"lifetime_seconds"`
	ExpiresAt       time.Time `db:"expires_at"`
	CreatedAt       time.Time `db:"created_at"`
	LastUsed        time.Time `db:"last_used"`
}

// apiKeyColumns are the columns of api_keys an APIKey holds.
const apiKeyColumns = `id, hashed_secret, user_id, login_type, token_name, lifetime_seconds, expires_at, created_at, last_used`

// InsertAPIKey stores a key.
func (db *DB) InsertAPIKey(ctx context.Context, k APIKey) (APIKey, error) {
	now := db.now()
	return collectOne[APIKey](db.q().Query(ctx, `INSERT INTO api_keys (`+apiKeyColumns+`)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $8) RETURNING `+apiKeyColumns,
		k.ID, k.HashedSecret, k.UserID, k.LoginType, k.TokenName, k.LifetimeSeconds, k.ExpiresAt, now))
}

// APIKeyWithUser returns a key and its user in one query (every
// authenticated request asks for both). userDeleted reports a user that
// was deleted since the key was made.
func (db *DB) APIKeyWithUser(ctx context.Context, id string) (k APIKey, u User, userDeleted bool, err error) {
	// The user's columns come as "u.id", "u.created_at", …: both tables
	// have an id and a created_at.
	rows, err := db.q().Query(ctx, `SELECT `+qualified("k", apiKeyColumns)+`, `+prefixed("u", userColumns)+`, u.deleted AS "u.deleted"
		FROM api_keys k JOIN users u ON u.id = k.user_id WHERE k.id = $1`, id)
	type userRow struct {
		User
		Deleted bool `db:"deleted"`
	}
	type keyUser struct {
		key  APIKey
		user userRow
	}
	r, err := collectOneBy(rows, err, func(row pgx.CollectableRow) (keyUser, error) {
		parts := splitRow(row, "u.")
		var r keyUser
		var err error
		if r.user, err = pgx.RowToStructByName[userRow](parts[0]); err != nil {
			return r, err
		}
		r.key, err = pgx.RowToStructByName[APIKey](parts[1])
		return r, err
	})
	return r.key, r.user.User, r.user.Deleted, err
}

// APIKeysByUser lists a user's keys of one login type.
func (db *DB) APIKeysByUser(ctx context.Context, userID, loginType string) ([]APIKey, error) {
	return collectAll[APIKey](db.q().Query(ctx, `SELECT `+apiKeyColumns+` FROM api_keys WHERE user_id = $1 AND login_type = $2 ORDER BY created_at`,
		userID, loginType))
}

// TouchAPIKey records a key's use.
func (db *DB) TouchAPIKey(ctx context.Context, id string, at time.Time) error {
	_, err := db.q().Exec(ctx, `UPDATE api_keys SET last_used = $2 WHERE id = $1`, id, at)
	return err
}

// ReplaceAPIKeyByName stores k in place of the user's key with the same
// token name, if any, in one transaction.
func (db *DB) ReplaceAPIKeyByName(ctx context.Context, k APIKey) (APIKey, error) {
	var out APIKey
	err := db.InTx(ctx, func(tx *DB) error {
		if _, err := tx.q().Exec(ctx, `DELETE FROM api_keys WHERE user_id = $1 AND token_name = $2`, k.UserID, k.TokenName); err != nil {
			return err
		}
		var err error
		out, err = tx.InsertAPIKey(ctx, k)
		return err
	})
	return out, err
}

// DeleteAPIKeyByName removes the user's key with that token name, if any.
func (db *DB) DeleteAPIKeyByName(ctx context.Context, userID, name string) error {
	_, err := db.q().Exec(ctx, `DELETE FROM api_keys WHERE user_id = $1 AND token_name = $2`, userID, name)
	return err
}

// DeleteAPIKeysByUser removes every key of a user (sessions and tokens)
// and returns how many there were.
func (db *DB) DeleteAPIKeysByUser(ctx context.Context, userID string) (int64, error) {
	tag, err := db.q().Exec(ctx, `DELETE FROM api_keys WHERE user_id = $1`, userID)
	if err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}

// DeleteAPIKey removes a key; deleting a missing key is ErrNotFound.
func (db *DB) DeleteAPIKey(ctx context.Context, userID, id string) error {
	return db.execOne(ctx, `DELETE FROM api_keys WHERE id = $1 AND user_id = $2`, id, userID)
}

// DeploymentValue returns a deployment-wide setting, creating it with
// initial when it does not exist yet.
func (db *DB) DeploymentValue(ctx context.Context, key, initial string) (string, error) {
	var v string
	var err error
	// A replica that creates the value at the same moment makes this
	// statement's INSERT wait and then do nothing, while its SELECT still
	// sees the table as it was when the statement began: without the row.
	// The next statement sees it.
	for range 3 {
		err = mapErr(db.q().QueryRow(ctx, `WITH ins AS (INSERT INTO deployment (key, value) VALUES ($1, $2) ON CONFLICT (key) DO NOTHING RETURNING value)
			SELECT value FROM ins UNION ALL SELECT value FROM deployment WHERE key = $1 LIMIT 1`, key, initial).Scan(&v))
		if !errors.Is(err, ErrNotFound) {
			break
		}
	}
	return v, err
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

// SSHKey is a row of user_ssh_keys.
type SSHKey struct {
	UserID     string    `db:"user_id"`
	PublicKey  string    `db:"public_key"`
	PrivateKey string    `db:"private_key"`
	CreatedAt  time.Time `db:"created_at"`
	UpdatedAt  time.Time `db:"updated_at"`
}

// SSHKeyByUser returns the user's SSH key pair, storing the one gen makes
// when the user has none yet. Concurrent first calls agree on one pair.
func (db *DB) SSHKeyByUser(ctx context.Context, userID string, gen func() (public, private string, err error)) (SSHKey, error) {
	const cols = `user_id, public_key, private_key, created_at, updated_at`
	k, err := collectOne[SSHKey](db.q().Query(ctx, `SELECT `+cols+` FROM user_ssh_keys WHERE user_id = $1`, userID))
	if !errors.Is(err, ErrNotFound) {
		return k, err
	}
	public, private, err := gen()
	if err != nil {
		return k, fmt.Errorf("generate ssh key: %w", err)
	}
	now := db.now()
	if _, err := db.q().Exec(ctx, `INSERT INTO user_ssh_keys (`+cols+`) VALUES ($1, $2, $3, $4, $4) ON CONFLICT (user_id) DO NOTHING`,
		userID, public, private, now); err != nil {
		return k, mapErr(err)
	}
	return collectOne[SSHKey](db.q().Query(ctx, `SELECT `+cols+` FROM user_ssh_keys WHERE user_id = $1`, userID))
}
