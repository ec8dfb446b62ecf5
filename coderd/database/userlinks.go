package database

import (
	"context"
	"time"
)

// UserLink links a user to an identity provider's account (user_links).
type UserLink struct {
	UserID string `db:"user_id"`
	// LoginType is how the user signs in through the link ("oidc").
	LoginType string `db:"login_type"`
	// Issuer and Subject are the ID token's "iss" and "sub".
	Issuer  string `db:"issuer"`
	Subject string `db:"subject"`
	// OAuthRefreshToken is the IdP's refresh token sealed by coderd (never
	// the plaintext); empty when the IdP gave none.
	OAuthRefreshToken string `db:"oauth_refresh_token"`
	// OAuthExpiry is when the IdP's access token expires; zero when
	// unknown (no refresh is attempted).
	OAuthExpiry time.Time `db:"oauth_expiry"`
	CreatedAt   time.Time `db:"created_at"`
	UpdatedAt   time.Time `db:"updated_at"`
}

// userLinkColumns are the columns of user_links a UserLink holds.
const userLinkColumns = `user_id, login_type, issuer, subject, oauth_refresh_token, oauth_expiry, created_at, updated_at`

// UserLinkBySubject returns the link of an identity provider's account
// (ErrNotFound when none).
func (db *DB) UserLinkBySubject(ctx context.Context, issuer, subject string) (UserLink, error) {
	return collectOne[UserLink](db.q().Query(ctx, `SELECT `+userLinkColumns+` FROM user_links WHERE issuer = $1 AND subject = $2`, issuer, subject))
}

// UserLinkByUser returns a user's link (ErrNotFound when none).
func (db *DB) UserLinkByUser(ctx context.Context, userID string) (UserLink, error) {
	return collectOne[UserLink](db.q().Query(ctx, `SELECT `+userLinkColumns+` FROM user_links WHERE user_id = $1`, userID))
}

// UpsertUserLink links a user to an account (replacing the user's previous
// link) and sets the user's login type to the link's. An account linked to
// another user is ErrConflict.
func (db *DB) UpsertUserLink(ctx context.Context, l UserLink) (UserLink, error) {
	now := db.now()
	out, err := collectOne[UserLink](db.q().Query(ctx, `INSERT INTO user_links (user_id, login_type, issuer, subject, created_at, updated_at)
		VALUES ($1, $2, $3, $4, $5, $5)
		ON CONFLICT (user_id) DO UPDATE SET login_type = $2, issuer = $3, subject = $4, updated_at = $5
		RETURNING `+userLinkColumns, l.UserID, l.LoginType, l.Issuer, l.Subject, now))
	if err != nil {
		return out, err
	}
	_, err = db.q().Exec(ctx, `UPDATE users SET login_type = $2, updated_at = $3 WHERE id = $1`, l.UserID, l.LoginType, now)
	return out, mapErr(err)
}

// UpdateUserLinkToken stores the IdP's sealed refresh token and access
// token expiry on a user's link (ErrNotFound when the user has none).
func (db *DB) UpdateUserLinkToken(ctx context.Context, userID, sealedRefreshToken string, expiry time.Time) error {
	return db.execOne(ctx, `UPDATE user_links SET oauth_refresh_token = $2, oauth_expiry = $3, updated_at = $4 WHERE user_id = $1`,
		userID, sealedRefreshToken, expiry, db.now())
}

// UserLoginType returns how a user signs in ("password" unless a link
// changed it).
func (db *DB) UserLoginType(ctx context.Context, userID string) (string, error) {
	var t string
	err := db.q().QueryRow(ctx, `SELECT login_type FROM users WHERE id = $1`, userID).Scan(&t)
	return t, mapErr(err)
}
