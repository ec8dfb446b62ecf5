package coderd

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gin-gonic/gin"
	"golang.org/x/time/rate"
)

// Rate limits
//
// coderd bounds two things, kept in this replica's memory (nothing is
// shared through PostgreSQL: with N replicas behind a load balancer a
// client may get up to N times a limit):
//
//   - password logins (ratelimit_login.go). Failures are counted per
//     (account, source IP) pair and per source IP over all accounts. After
//     LoginPerAccount failures, each further attempt from that pair waits a
//     delay that doubles with every failure (1s, 2s, 4s, … at most 5
//     minutes) from the pair's latest failure; a success from that pair, or
//     LoginWindow of quiet after the delay ended, forgets its failures. An
//     address also has a bucket of LoginPerIP failures over all accounts,
//     refilled evenly over LoginWindow. Other addresses are never delayed
//     by these counts, so nobody can lock an account's owner out by failing
//     on purpose. An attempt that must wait answers 429 without its
//     password being checked, right or wrong, and is audited (account,
//     source IP, reason);
//   - the API as a whole (this file): a bucket of API requests per session
//     token, refilled evenly over APIWindow, counted as the token only once
//     it has authenticated; a request without a token, or whose token fails
//     (a forged secret), counts against its source IP. Agents
//     (/api/v2/workspaceagents/me/), workspace proxies
//     (/api/v2/workspaceproxies/me/), provisioner daemons
//     (/api/v2/provisionerdaemons/...), relay WebSockets (.../connect) and
//     everything outside /api/v2 (/healthz, /bin/, dev URLs, the
//     dashboard's pages, whose in-process API calls are counted) are not
//     counted.
//
// "N per window" is a token bucket (golang.org/x/time/rate): N at once,
// then one more every window/N, so N per window sustained; a client that
// starts with a full bucket can get up to 2N-1 within its first window, and
// a refused one may retry as soon as one token is back (window/N), not when
// its oldest request leaves a sliding window.
//
// A refused request gets 429 Too Many Requests, a Retry-After header (whole
// seconds until the attempt would be allowed) and the error envelope. The
// source IP is the TCP peer's address: X-Forwarded-For is not trusted, so
// behind a reverse proxy every anonymous client shares the proxy's address
// (and its login counts: a guesser delays everyone behind the same proxy).

// RateLimits configure coderd's request limits. Zero values mean the
// defaults; a negative limit turns that limit off.
type RateLimits struct {
	// API is the number of requests per APIWindow allowed per authenticated
	// session token, or per source IP for requests without a valid one
	// (default 512, as Coder).
	API int
	// APIWindow is the API limit's window, over which a bucket of API
	// requests refills (default one minute).
	APIWindow time.Duration
	// LoginPerAccount is the number of failed password logins allowed for
	// one account from one source IP before each further attempt from that
	// address waits a doubling delay (default 5).
	LoginPerAccount int
	// LoginPerIP is the number of failed password logins per LoginWindow
	// allowed from one source IP, over all accounts (default 20).
	LoginPerIP int
	// LoginWindow is the per-IP login limit's window, over which its
	// bucket refills, and the quiet after which an (account, IP) pair's
	// failures are forgotten (default one minute).
	LoginWindow time.Duration
}

// Default rate limits.
const (
	DefaultAPIRateLimit        = 512
	DefaultLoginRateLimit      = 5
	DefaultLoginRateLimitPerIP = 20
)

func (l RateLimits) withDefaults() RateLimits {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&l.API, DefaultAPIRateLimit)
	def(&l.LoginPerAccount, DefaultLoginRateLimit)
	def(&l.LoginPerIP, DefaultLoginRateLimitPerIP)
	if l.APIWindow <= 0 {
		l.APIWindow = time.Minute
	}
	if l.LoginWindow <= 0 {
		l.LoginWindow = time.Minute
	}
	return l
}

// rateLimiters are the API's limiters; a nil one is a limit turned off.
type rateLimiters struct {
	api          *tokenBuckets
	loginBackoff *loginBackoff
	loginPerIP   *tokenBuckets
	// logged lets each key's refusals be logged once a minute, not once
	// per refused request.
	logged *tokenBuckets
}

func newRateLimiters(l RateLimits, now func() time.Time) *rateLimiters {
	l = l.withDefaults()
	return &rateLimiters{
		api:          newTokenBuckets(l.API, l.APIWindow, now),
		loginBackoff: newLoginBackoff(l.LoginPerAccount, l.LoginWindow, now),
		loginPerIP:   newTokenBuckets(l.LoginPerIP, l.LoginWindow, now),
		logged:       newTokenBuckets(1, time.Minute, now),
	}
}

// firstRefusal reports whether a refusal for key should be logged.
func (r *rateLimiters) firstRefusal(key string) bool {
	_, ok := r.logged.take(key)
	return ok
}

// tokenBuckets are a token bucket per key (golang.org/x/time/rate): each
// holds at most limit tokens, refilled evenly over window (one every
// window/limit), and an event takes one. A bucket that is full again is no
// different from a new one, so a sweep once a window drops those: memory
// holds only the keys seen within about a window. Every call reads the
// clock under mu, so each bucket sees time move forward. A nil
// *tokenBuckets (a limit turned off) allows everything.
type tokenBuckets struct {
	limit  int
	window time.Duration
	now    func() time.Time

	mu        sync.Mutex
	buckets   map[string]*rate.Limiter
	nextSweep time.Time
}

func newTokenBuckets(limit int, window time.Duration, now func() time.Time) *tokenBuckets {
	if limit <= 0 {
		return nil
	}
	return &tokenBuckets{limit: limit, window: window, now: now, buckets: map[string]*rate.Limiter{}}
}

// bucket is key's bucket, a full one when key has none. It drops the full
// buckets first when a window passed since the last sweep. The caller
// holds mu.
func (b *tokenBuckets) bucket(key string, now time.Time) *rate.Limiter {
	if !now.Before(b.nextSweep) {
		for k, l := range b.buckets {
			if l.TokensAt(now) >= float64(b.limit) {
				delete(b.buckets, k)
			}
		}
		b.nextSweep = now.Add(b.window)
	}
	l, ok := b.buckets[key]
	if !ok {
		l = rate.NewLimiter(rate.Limit(float64(b.limit)/b.window.Seconds()), b.limit)
		b.buckets[key] = l
	}
	return l
}

// reserve takes a token of key at now and returns its reservation (to give
// it back with refund); when key has none it takes nothing and returns how
// long until it will. The caller holds mu.
func (b *tokenBuckets) reserve(key string, now time.Time) (*rate.Reservation, time.Duration) {
	r := b.bucket(key, now).ReserveN(now, 1)
	if wait := r.DelayFrom(now); wait > 0 {
		r.CancelAt(now)
		return nil, wait
	}
	return r, 0
}

// take takes a token of key when it has one, and otherwise returns how
// long until it will.
func (b *tokenBuckets) take(key string) (time.Duration, bool) {
	if b == nil {
		return 0, true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	r, wait := b.reserve(key, b.now())
	return wait, r != nil
}

// refund gives back the token r took at time at, as far as
// rate.Reservation.CancelAt can: exactly when the bucket saw no other
// event since at, within the refill of the moments in between when it
// granted others, and not at all when it refused key in between (erring on
// the side of counting). A nil r (nothing taken) gives back nothing.
func (b *tokenBuckets) refund(r *rate.Reservation, at time.Time) {
	if b == nil || r == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	r.CancelAt(at)
}

// len is the number of keys held (for tests).
func (b *tokenBuckets) len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.buckets)
}

// tooManyRequests is the 429 answer: Retry-After in whole seconds (at least
// one) and the error envelope.
func tooManyRequests(c *gin.Context, wait time.Duration, detail, format string, args ...any) error {
	secs := retryAfterSeconds(wait)
	c.Header("Retry-After", strconv.Itoa(secs))
	return errorf(http.StatusTooManyRequests, detail, "%s; retry in %ds", fmt.Sprintf(format, args...), secs)
}

// retryAfterSeconds is wait in whole seconds, rounded up, at least one.
func retryAfterSeconds(wait time.Duration) int {
	return max(int(math.Ceil(wait.Seconds())), 1)
}

// windowName is "minute" for a minute, else the duration.
func windowName(d time.Duration) string {
	if d == time.Minute {
		return "minute"
	}
	return d.String()
}

// rateLimitExempt reports whether a request is outside the API limit:
// anything not under /api/v2, and the agent, workspace proxy, provisioner
// daemon and relay WebSocket endpoints, whose callers are machines that coderd itself
// schedules.
func rateLimitExempt(r *http.Request) bool {
	p := r.URL.Path
	switch {
	case !strings.HasPrefix(p, "/api/v2/"):
		return true
	case strings.HasPrefix(p, "/api/v2/workspaceagents/me/"):
		return true
	case strings.HasPrefix(p, "/api/v2/workspaceproxies/me/"):
		// A proxy asks about each of its region's connections and sends
		// their records: a busy region must not get 429s for its users.
		return true
	case strings.HasPrefix(p, "/api/v2/provisionerdaemons/"),
		p == "/api/v2/provisionerdaemons" && r.Method == http.MethodPost:
		return true
	case strings.HasPrefix(p, "/api/v2/workspaceagents/") && strings.HasSuffix(p, "/connect"):
		return true
	}
	return false
}

// apiRateLimitKey is who a request counts against: the id of its session
// token once that token has been authenticated (keyID, "" when it was not),
// else its source IP. A token that fails authentication counts against the
// address that sent it, so forging a victim's token id spends the forger's
// budget, not the victim's, and random ids do not buy fresh budgets.
func apiRateLimitKey(r *http.Request, keyID string) (key, who string) {
	if keyID != "" {
		return "token:" + keyID, "session token"
	}
	return "ip:" + sourceIP(r), "IP address"
}

// rateLimitAPI is middleware that answers 429 once a token (or an
// address) has used up the API limit. It authenticates the request's token
// first (authOnce; requireAuth reuses the result), so only a token whose
// secret matched is counted as itself.
func (api *API) rateLimitAPI() gin.HandlerFunc {
	lim := api.limits.api
	if lim == nil {
		return func(*gin.Context) {}
	}
	return api.handleMiddleware(func(c *gin.Context) error {
		if rateLimitExempt(c.Request) {
			return nil
		}
		keyID := ""
		if tokenFromRequest(c.Request) != "" {
			if a := api.authOnce(c); a.err == nil {
				keyID = a.key.ID
			}
		}
		key, who := apiRateLimitKey(c.Request, keyID)
		wait, ok := lim.take(key)
		if ok {
			return nil
		}
		if api.limits.firstRefusal(key) {
			api.log.Warn("api rate limit reached", "key", key, "ip", sourceIP(c.Request), "method", c.Request.Method, "path", c.Request.URL.Path,
				"limit", lim.limit, "window", lim.window)
		}
		return tooManyRequests(c, wait, "The server's --api-rate-limit sets this limit (0 turns it off).",
			"Too many requests: at most %d per %s per %s", lim.limit, windowName(lim.window), who)
	})
}
