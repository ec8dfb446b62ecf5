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
//     address also gets at most LoginPerIP failures in a sliding LoginWindow
//     over all accounts. Other addresses are never delayed by these counts,
//     so nobody can lock an account's owner out by failing on purpose. An
//     attempt that must wait answers 429 without its password being checked,
//     right or wrong, and is audited (account, source IP, reason);
//   - the API as a whole (this file): requests in a sliding APIWindow per
//     session token, counted as the token only once it has authenticated; a
//     request without a token, or whose token fails (a forged secret),
//     counts against its source IP. Agents (/api/v2/workspaceagents/me/),
//     provisioner daemons (/api/v2/provisionerdaemons/...), relay
//     WebSockets (.../connect) and everything outside /api/v2 (/healthz,
//     /bin/, dev URLs, the dashboard's pages, whose in-process API calls are
//     counted) are not counted.
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
	// APIWindow is the API limit's window (default one minute).
	APIWindow time.Duration
	// LoginPerAccount is the number of failed password logins allowed for
	// one account from one source IP before each further attempt from that
	// address waits a doubling delay (default 5).
	LoginPerAccount int
	// LoginPerIP is the number of failed password logins per LoginWindow
	// allowed from one source IP, over all accounts (default 20).
	LoginPerIP int
	// LoginWindow is the per-IP login limit's window, and the quiet after
	// which an (account, IP) pair's failures are forgotten (default one
	// minute).
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
	api          *slidingWindow
	loginBackoff *loginBackoff
	loginPerIP   *slidingWindow
	// logged lets each key's refusals be logged once a minute, not once
	// per refused request.
	logged *slidingWindow
}

func newRateLimiters(l RateLimits, now func() time.Time) *rateLimiters {
	l = l.withDefaults()
	return &rateLimiters{
		api:          newSlidingWindow(l.API, l.APIWindow, now),
		loginBackoff: newLoginBackoff(l.LoginPerAccount, l.LoginWindow, now),
		loginPerIP:   newSlidingWindow(l.LoginPerIP, l.LoginWindow, now),
		logged:       newSlidingWindow(1, time.Minute, now),
	}
}

// firstRefusal reports whether a refusal for key should be logged.
func (r *rateLimiters) firstRefusal(key string) bool {
	_, ok := r.logged.take(key)
	return ok
}

// slidingWindow counts events per key over the last window: an exact log
// of each key's event times, oldest first, holding only those still inside
// the window (so memory is bounded by the events of one window). Keys whose
// events have all expired are dropped, every key on a sweep once a window.
// A nil *slidingWindow (a limit turned off) allows everything.
type slidingWindow struct {
	limit  int
	window time.Duration
	now    func() time.Time

	mu        sync.Mutex
	events    map[string][]time.Time
	nextSweep time.Time
}

func newSlidingWindow(limit int, window time.Duration, now func() time.Time) *slidingWindow {
	if limit <= 0 {
		return nil
	}
	return &slidingWindow{limit: limit, window: window, now: now, events: map[string][]time.Time{}}
}

// live returns key's events inside the window at now, dropping older ones.
// The caller holds mu.
func (s *slidingWindow) live(key string, now time.Time) []time.Time {
	if !now.Before(s.nextSweep) {
		for k, ev := range s.events {
			if len(ev) == 0 || !now.Before(ev[len(ev)-1].Add(s.window)) {
				delete(s.events, k)
			}
		}
		s.nextSweep = now.Add(s.window)
	}
	ev := s.events[key]
	i := 0
	for i < len(ev) && !now.Before(ev[i].Add(s.window)) {
		i++
	}
	ev = ev[i:]
	if len(ev) == 0 {
		delete(s.events, key)
		return nil
	}
	s.events[key] = ev
	return ev
}

// wait is how long key must wait for room for one more event (0: room now).
// The caller holds mu.
func (s *slidingWindow) wait(key string, now time.Time) time.Duration {
	ev := s.live(key, now)
	if len(ev) < s.limit {
		return 0
	}
	return ev[len(ev)-s.limit].Add(s.window).Sub(now)
}

// add records an event at now. The caller holds mu.
func (s *slidingWindow) add(key string, now time.Time) {
	s.events[key] = append(s.live(key, now), now)
}

// take records an event for key when there is room, and otherwise returns
// how long to wait.
func (s *slidingWindow) take(key string) (time.Duration, bool) {
	if s == nil {
		return 0, true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if d := s.wait(key, now); d > 0 {
		return d, false
	}
	s.add(key, now)
	return 0, true
}

// remove forgets one event of key recorded at t (a refund).
func (s *slidingWindow) remove(key string, t time.Time) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ev := s.events[key]
	for i := len(ev) - 1; i >= 0; i-- {
		if ev[i].Equal(t) {
			s.events[key] = append(ev[:i:i], ev[i+1:]...)
			return
		}
	}
}

// len is the number of keys held (for tests).
func (s *slidingWindow) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.events)
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
// anything not under /api/v2, and the agent, provisioner daemon and relay
// WebSocket endpoints, whose callers are machines that coderd itself
// schedules.
func rateLimitExempt(r *http.Request) bool {
	p := r.URL.Path
	switch {
	case !strings.HasPrefix(p, "/api/v2/"):
		return true
	case strings.HasPrefix(p, "/api/v2/workspaceagents/me/"):
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
