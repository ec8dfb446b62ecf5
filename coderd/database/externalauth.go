package database

import (
	"context"
	"time"

	"github.com/google/uuid"
)

// ExternalAuthLink is a user's link to an external auth provider
// (external_auth_links).
type ExternalAuthLink struct {
	UserID     string `db:"user_id"`
	ProviderID string `db:"provider_id"`
	// OAuthAccessToken and OAuthRefreshToken are sealed by coderd (never
	// the plaintext); the refresh token is empty when the provider gave
	// none.
	OAuthAccessToken  string `db:"oauth_access_token"`
	OAuthRefreshToken string `db:"oauth_refresh_token"`
	// OAuthExpiry is when the access token expires; zero when unknown.
	OAuthExpiry time.Time `db:"oauth_expiry"`
	// OAuthExtra is a JSON object of the token response's extra fields.
	OAuthExtra []byte    `db:"oauth_extra"`
	CreatedAt  time.Time `db:"created_at"`
	UpdatedAt  time.Time `db:"updated_at"`
}

// externalAuthLinkColumns are the columns of external_auth_links an
// ExternalAuthLink holds.
const externalAuthLinkColumns = `user_id, provider_id, oauth_access_token, oauth_refresh_token, oauth_expiry, oauth_extra, created_at, updated_at`

// ExternalAuthLink returns a user's link to a provider (ErrNotFound when
// none).
func (db *DB) ExternalAuthLink(ctx context.Context, userID, providerID string) (ExternalAuthLink, error) {
	return collectOne[ExternalAuthLink](db.q().Query(ctx, `SELECT `+externalAuthLinkColumns+` FROM external_auth_links
		WHERE user_id = $1 AND provider_id = $2`, userID, providerID))
}

// ExternalAuthLinksByUser lists a user's links, by provider ID.
func (db *DB) ExternalAuthLinksByUser(ctx context.Context, userID string) ([]ExternalAuthLink, error) {
	return collectAll[ExternalAuthLink](db.q().Query(ctx, `SELECT `+externalAuthLinkColumns+` FROM external_auth_links
		WHERE user_id = $1 ORDER BY provider_id`, userID))
}

// UpsertExternalAuthLink stores a user's link to a provider, replacing the
// tokens of an earlier one (whose created_at stays).
func (db *DB) UpsertExternalAuthLink(ctx context.Context, l ExternalAuthLink) (ExternalAuthLink, error) {
	if l.OAuthExtra == nil {
		l.OAuthExtra = []byte("{}")
	}
	return collectOne[ExternalAuthLink](db.q().Query(ctx, `INSERT INTO external_auth_links
		(user_id, provider_id, oauth_access_token, oauth_refresh_token, oauth_expiry, oauth_extra, created_at, updated_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $7)
		ON CONFLICT (user_id, provider_id) DO UPDATE SET oauth_access_token = $3, oauth_refresh_token = $4, oauth_expiry = $5,
			oauth_extra = $6, updated_at = $7
		RETURNING `+externalAuthLinkColumns,
		l.UserID, l.ProviderID, l.OAuthAccessToken, l.OAuthRefreshToken, l.OAuthExpiry.UTC(), l.OAuthExtra, db.now()))
}

// UpdateExternalAuthLinkToken replaces a link's tokens after a refresh, if
// its refresh token is still oldRefreshToken (a refresh on another replica
// that won the race is kept). It returns the link as stored, and false when
// the link changed or is gone (ErrNotFound then when it is gone).
func (db *DB) UpdateExternalAuthLinkToken(ctx context.Context, l ExternalAuthLink, oldRefreshToken string) (ExternalAuthLink, bool, error) {
	if l.OAuthExtra == nil {
		l.OAuthExtra = []byte("{}")
	}
	out, err := collectOne[ExternalAuthLink](db.q().Query(ctx, `UPDATE external_auth_links
		SET oauth_access_token = $3, oauth_refresh_token = $4, oauth_expiry = $5, oauth_extra = $6, updated_at = $7
		WHERE user_id = $1 AND provider_id = $2 AND oauth_refresh_token = $8
		RETURNING `+externalAuthLinkColumns,
		l.UserID, l.ProviderID, l.OAuthAccessToken, l.OAuthRefreshToken, l.OAuthExpiry.UTC(), l.OAuthExtra, db.now(), oldRefreshToken))
	if err == ErrNotFound {
		current, err := db.ExternalAuthLink(ctx, l.UserID, l.ProviderID)
		return current, false, err
	}
	return out, err == nil, err
}

// DeleteExternalAuthLink unlinks a user from a provider (ErrNotFound when
// not linked).
func (db *DB) DeleteExternalAuthLink(ctx context.Context, userID, providerID string) error {
	return db.execOne(ctx, `DELETE FROM external_auth_links WHERE user_id = $1 AND provider_id = $2`, userID, providerID)
}

// DeleteExternalAuthLinkIfToken deletes a link whose sealed access token is
// still accessToken (a stale link, unless another request replaced it
// meanwhile); it reports whether it did.
func (db *DB) DeleteExternalAuthLinkIfToken(ctx context.Context, userID, providerID, accessToken string) (bool, error) {
	tag, err := db.q().Exec(ctx, `DELETE FROM external_auth_links WHERE user_id = $1 AND provider_id = $2 AND oauth_access_token = $3`,
		userID, providerID, accessToken)
	if err != nil {
		return false, err
	}
	return tag.RowsAffected() > 0, nil
}

// TemplateVersionExternalAuthProviders returns the JSON array of the
// external auth providers a version's import found ("[]" for none).
func (db *DB) TemplateVersionExternalAuthProviders(ctx context.Context, versionID string) ([]byte, error) {
	if uuid.Validate(versionID) != nil {
		return nil, ErrNotFound
	}
	var b []byte
	err := db.q().QueryRow(ctx, `SELECT external_auth_providers FROM template_versions WHERE id = $1`, versionID).Scan(&b)
	return b, mapErr(err)
}

// SetTemplateVersionExternalAuthProviders stores the external auth
// providers a version's import found (a JSON array).
func (db *DB) SetTemplateVersionExternalAuthProviders(ctx context.Context, versionID string, providers []byte) error {
	return db.execOne(ctx, `UPDATE template_versions SET external_auth_providers = $2 WHERE id = $1`, versionID, providers)
}
