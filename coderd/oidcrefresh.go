package coderd

import (
	"context"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"golang.org/x/oauth2"

	"airgapcoder/coderd/database"
	"airgapcoder/codersdk"
)

// A session made by an OpenID Connect sign-in lasts as long as the IdP
// lets it (as Coder's APIKey middleware): the sign-in keeps the IdP's
// refresh token (sealed, oidcTokenPurpose) and its access token's expiry
// on the user's link; a request on an oidc session after that expiry
// refreshes the token at the IdP, once per user at a time. When the IdP
// refuses (the grant was revoked, the user disabled there), the session's
// key is deleted, the request is answered 401 and the audit log says so
// with the IdP subject. Without a refresh token (no offline_access in
// --oidc-scopes) the session lasts its own duration.

// oidcTokenPurpose names the key refresh tokens are sealed with at rest.
const oidcTokenPurpose = "coderd oidc refresh token"

// errIdPEndedSession is the 401's message.
const errIdPEndedSession = "The identity provider ended this session (its token could not be refreshed: %s); sign in again"

// sealToken seals a refresh token for user_links ("" stays "").
func (p *oidcProvider) sealToken(plain string) (string, error) {
	return sealAtRest(p.tokens, oidcTokenPurpose, plain)
}

// openToken opens a refresh token sealToken sealed.
func (p *oidcProvider) openToken(sealed string) (string, error) {
	plain, err := openAtRest(p.tokens, oidcTokenPurpose, sealed)
	if err != nil {
		return "", fmt.Errorf("open refresh token: %w", err)
	}
	return plain, nil
}

// sealAtRest seals a secret coderd keeps in the database (the IdP's refresh
// tokens, external auth tokens) with aead, a deploymentAEAD of purpose, which
// is also the additional data: a value sealed for one purpose opens for no
// other. The result is base64 of nonce || ciphertext; "" stays "".
func sealAtRest(aead cipher.AEAD, purpose, plain string) (string, error) {
	if plain == "" {
		return "", nil
	}
	nonce := make([]byte, aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return "", err
	}
	return base64.RawStdEncoding.EncodeToString(aead.Seal(nonce, nonce, []byte(plain), []byte(purpose))), nil
}

// openAtRest opens what sealAtRest sealed for purpose ("" stays "").
func openAtRest(aead cipher.AEAD, purpose, sealed string) (string, error) {
	if sealed == "" {
		return "", nil
	}
	raw, err := base64.RawStdEncoding.DecodeString(sealed)
	if err != nil || len(raw) < aead.NonceSize() {
		return "", errors.New("malformed")
	}
	plain, err := aead.Open(nil, raw[:aead.NonceSize()], raw[aead.NonceSize():], []byte(purpose))
	if err != nil {
		return "", err
	}
	return string(plain), nil
}

// keepOIDCToken stores the sign-in's refresh token (sealed) and expiry on
// the user's link.
func (api *API) keepOIDCToken(ctx context.Context, userID string, token *oauth2.Token) error {
	sealed, err := api.oidc.sealToken(token.RefreshToken)
	if err != nil {
		return err
	}
	// x/oauth2 dates the expiry by the wall clock; coderd's may differ.
	var expiry time.Time
	if !token.Expiry.IsZero() {
		expiry = api.now().Add(time.Until(token.Expiry))
	}
	if err := api.db.UpdateUserLinkToken(ctx, userID, sealed, expiry); err != nil {
		return fmt.Errorf("keep the IdP's refresh token: %w", err)
	}
	api.oidc.fresh.Store(userID, expiry)
	return nil
}

// requestOrigin is the IP and user agent of the request being
// authenticated, for the audit record of a session the IdP ended.
type requestOrigin struct{ ip, userAgent string }

type requestOriginKey struct{}

// checkOIDCSession refreshes the IdP token of an oidc session whose token
// expired. It fails with a 401 (and deletes the key) when the IdP refuses
// the refresh.
func (api *API) checkOIDCSession(ctx context.Context, user database.User, key database.APIKey) error {
	p := api.oidc
	if p == nil || key.LoginType != loginTypeOIDC {
		return nil
	}
	now := api.now()
	if exp, ok := p.fresh.Load(user.ID); ok && now.Before(exp.(time.Time)) {
		return nil
	}
	_, err, _ := p.refreshes.Do(user.ID, func() (any, error) { return nil, api.refreshOIDC(ctx, user, now) })
	var ended *idpEndedSession
	if !errors.As(err, &ended) {
		return err
	}
	// Every key in the flight gets here: each deletes its own.
	if err := api.db.DeleteAPIKey(ctx, user.ID, key.ID); err != nil && !errors.Is(err, database.ErrNotFound) {
		return err
	}
	api.authChanged()
	origin, _ := ctx.Value(requestOriginKey{}).(requestOrigin)
	raw, _ := json.Marshal(map[string]any{
		"source": "oidc_refresh", "login_type": loginTypeOIDC, "idp_issuer": ended.link.Issuer,
		"idp_subject": ended.link.Subject, "reason": ended.reason,
	})
	row := database.AuditLog{
		UserID: user.ID, Username: user.Username, IP: origin.ip, UserAgent: origin.userAgent,
		Action: string(codersdk.AuditActionLogout), ResourceType: string(codersdk.AuditResourceAPIKey), ResourceID: key.ID,
		ResourceTarget: user.Username, StatusCode: http.StatusUnauthorized, AdditionalFields: raw,
	}
	row.Description = describe(row) + " (the identity provider ended the session)"
	api.writeAudit(ctx, row)
	return errorf(http.StatusUnauthorized, "", errIdPEndedSession, ended.reason)
}

// idpEndedSession is a refresh the IdP refused.
type idpEndedSession struct {
	link   database.UserLink
	reason string
}

func (e *idpEndedSession) Error() string {
	return "the identity provider refused the refresh: " + e.reason
}

// refreshOIDC refreshes the user's IdP token when it expired at now and
// keeps the new one. It returns *idpEndedSession when the IdP refuses.
func (api *API) refreshOIDC(ctx context.Context, user database.User, now time.Time) error {
	p := api.oidc
	// Other requests wait for this one: the first one's client going away
	// must not fail them all.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	link, err := api.db.UserLinkByUser(ctx, user.ID)
	if errors.Is(err, database.ErrNotFound) {
		return nil // unlinked since: the session lasts its own duration
	}
	if err != nil {
		return err
	}
	switch {
	case now.Before(link.OAuthExpiry):
		p.fresh.Store(user.ID, link.OAuthExpiry)
		return nil
	case link.OAuthRefreshToken == "" || link.OAuthExpiry.IsZero():
		// Nothing to refresh with: asked again in a minute, in case a
		// sign-in on another replica kept a token since.
		p.fresh.Store(user.ID, now.Add(time.Minute))
		return nil
	}
	provider, _, _, err := p.discover(ctx)
	if err != nil {
		return err
	}
	refresh, err := p.openToken(link.OAuthRefreshToken)
	if err != nil {
		return &idpEndedSession{link: link, reason: err.Error()}
	}
	// Only the refresh token: oauth2 then asks the IdP (an unexpired access
	// token would be reused as it is).
	tok, err := p.oauth2(provider, api.oidcRedirectURL()).TokenSource(p.ctx(ctx), &oauth2.Token{RefreshToken: refresh}).Token()
	if err != nil {
		var re *oauth2.RetrieveError
		if errors.As(err, &re) {
			reason := re.ErrorCode
			if reason == "" {
				reason = fmt.Sprintf("HTTP %d", re.Response.StatusCode)
			}
			if re.ErrorDescription != "" {
				reason += ": " + re.ErrorDescription
			}
			return &idpEndedSession{link: link, reason: reason}
		}
		return p.explain("refresh the IdP session", err)
	}
	return api.keepOIDCToken(ctx, user.ID, tok)
}
