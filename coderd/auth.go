package coderd

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	"golang.org/x/crypto/bcrypt"

	"airgapcoder/coderd/database"
	"airgapcoder/codersdk"
)

// Login types of API keys.
const (
	loginTypePassword = "password"
	loginTypeToken    = "token"
)

const (
	keyIDLength     = 10
	keySecretLength = 22
	alphanumeric    = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
)

func randomString(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	for i := range b {
		b[i] = alphanumeric[int(b[i])%len(alphanumeric)]
	}
	return string(b)
}

func hashPassword(pw string) ([]byte, error) {
	return bcrypt.GenerateFromPassword([]byte(pw), bcrypt.DefaultCost)
}

// dummyHash keeps a login for an unknown email as slow as a real one: a
// bcrypt hash at bcrypt.DefaultCost (of "not a password"), written out
// rather than computed at start, which cost every process of the binary
// (coder ssh, the agent) 60 ms. TestDummyHashCost keeps its cost the
// default's.
var dummyHash = []byte("$2a$10$Tk1dTSjFl3AC/imPR.9V9e1RCyWAUwkhehr0O7d6ECeC2pFSaBvxW")

// hashSecret is what api_keys stores of a key's secret.
func hashSecret(secret string) []byte {
	sum := sha256.Sum256([]byte(secret))
	return sum[:]
}

// newAPIKey creates a key for user and returns the token "<id>-<secret>".
func (api *API) newAPIKey(ctx context.Context, userID, loginType, name string, lifetime time.Duration) (string, database.APIKey, error) {
	id, secret := randomString(keyIDLength), randomString(keySecretLength)
	key, err := api.db.InsertAPIKey(ctx, database.APIKey{
		ID: id, HashedSecret: hashSecret(secret), UserID: userID, LoginType: loginType, TokenName: name,
		LifetimeSeconds: int64(lifetime.Seconds()), ExpiresAt: api.now().Add(lifetime),
	})
	if err != nil {
		return "", key, fmt.Errorf("create api key: %w", err)
	}
	return id + "-" + secret, key, nil
}

func tokenFromRequest(r *http.Request) string {
	if t := r.Header.Get(codersdk.SessionTokenHeader); t != "" {
		return t
	}
	if c, err := r.Cookie(codersdk.SessionTokenCookie); err == nil {
		return c.Value
	}
	return ""
}

// authenticate resolves a session token to its user. It returns an apiError
// with status 401 that says why when the token is missing, malformed,
// unknown or expired, or its user is suspended.
func (api *API) authenticate(ctx context.Context, token string) (database.User, database.APIKey, error) {
	unauthorized := func(format string, args ...any) error {
		return errorf(http.StatusUnauthorized, "", format, args...)
	}
	if token == "" {
		return database.User{}, database.APIKey{}, unauthorized("You are not signed in: send a session token in the %s header (run `coder login`)", codersdk.SessionTokenHeader)
	}
	id, secret, ok := strings.Cut(token, "-")
	if !ok || len(id) != keyIDLength || len(secret) != keySecretLength {
		return database.User{}, database.APIKey{}, unauthorized("Invalid session token: it must look like <10 characters>-<22 characters>")
	}
	key, user, userDeleted, err := api.db.APIKeyWithUser(ctx, id)
	if err != nil {
		if err == database.ErrNotFound {
			return database.User{}, database.APIKey{}, unauthorized("Invalid session token: no such key (it was deleted or never existed); log in again")
		}
		return database.User{}, database.APIKey{}, err
	}
	sum := sha256.Sum256([]byte(secret))
	if subtle.ConstantTimeCompare(sum[:], key.HashedSecret) != 1 {
		return database.User{}, database.APIKey{}, unauthorized("Invalid session token: the secret does not match; log in again")
	}
	now := api.now()
	if !now.Before(key.ExpiresAt) {
		return database.User{}, database.APIKey{}, unauthorized("Session token expired at %s; log in again or create a new token", key.ExpiresAt.Format(time.RFC3339))
	}
	if userDeleted {
		return database.User{}, database.APIKey{}, unauthorized("The user of this session token no longer exists")
	}
	// Checked on every request, so suspending a user stops its sessions
	// and tokens at once; they work again when it is activated.
	if user.Status != database.UserStatusActive {
		return database.User{}, database.APIKey{}, unauthorized("User %s is %s: its sessions and API tokens are refused until an owner activates it", user.Username, user.Status)
	}
	// A session from the IdP ends with the IdP's (oidcrefresh.go).
	if err := api.checkOIDCSession(ctx, user, key); err != nil {
		return database.User{}, database.APIKey{}, err
	}
	// Record use at most once a minute to spare the database.
	if now.Sub(key.LastUsed) > time.Minute {
		_ = api.db.TouchAPIKey(ctx, key.ID, now)
		_ = api.db.TouchUser(ctx, user.ID)
	}
	return user, key, nil
}

const (
	ctxUser   = "coderd.user"
	ctxAPIKey = "coderd.apikey"
	// ctxAuth holds a request's authResult (authOnce).
	ctxAuth = "coderd.auth"
)

// authResult is the outcome of authenticating a request's token.
type authResult struct {
	user database.User
	key  database.APIKey
	// epoch is the count of auth changes taken before the check
	// (authchanges.go): a change during it counts.
	epoch uint64
	err   error
}

// authOnce authenticates the request's session token once per request:
// the API rate limit does it first (it counts a request against its token
// only once the token's secret has matched), and requireAuth reuses the
// answer instead of asking the database again. A failure that is not the
// token's fault (the database) is not kept, so the next caller asks again.
func (api *API) authOnce(c *gin.Context) authResult {
	if v, ok := c.Get(ctxAuth); ok {
		return v.(authResult)
	}
	a := authResult{epoch: api.authEpoch.Load()}
	ctx := context.WithValue(c.Request.Context(), requestOriginKey{}, requestOrigin{ip: sourceIP(c.Request), userAgent: c.Request.UserAgent()})
	a.user, a.key, a.err = api.authenticate(ctx, tokenFromRequest(c.Request))
	var ae *apiError
	if a.err == nil || errors.As(a.err, &ae) {
		c.Set(ctxAuth, a)
	}
	return a
}

// requireAuth is middleware that rejects requests without a valid token.
func (api *API) requireAuth() gin.HandlerFunc {
	return api.handleMiddleware(func(c *gin.Context) error {
		a := api.authOnce(c)
		if a.err != nil {
			return a.err
		}
		c.Set(ctxUser, a.user)
		c.Set(ctxAPIKey, a.key)
		c.Set(ctxAuthEpoch, a.epoch)
		return nil
	})
}

// handleMiddleware runs h and aborts the chain when it fails (also when
// the failure was the client going away, which gets no answer) or
// answered.
func (api *API) handleMiddleware(h handler) gin.HandlerFunc {
	return func(c *gin.Context) {
		if err := h(c); err != nil {
			api.renderError(c, err)
			c.Abort()
			return
		}
		if c.Writer.Written() {
			c.Abort()
			return
		}
		c.Next()
	}
}

func actor(c *gin.Context) database.User {
	return c.MustGet(ctxUser).(database.User)
}

// authorize fails with 403 unless the caller may act on a resource owned by
// ownerID.
func authorize(c *gin.Context, res resource, act action, ownerID string) error {
	if !can(actor(c), res, act, ownerID) {
		return forbidden()
	}
	return nil
}
