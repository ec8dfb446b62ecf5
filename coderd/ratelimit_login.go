package coderd

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/gin-gonic/gin"
	"golang.org/x/time/rate"

	"airgapcoder/coderd/database"
	"airgapcoder/codersdk"
)

// Login backoff delays (see ratelimit.go): the first wait after the allowed
// failures, doubled with every further failure up to the cap.
const (
	loginBackoffBase = time.Second
	loginBackoffMax  = 5 * time.Minute
)

// Reasons a login is refused, as the audit record gives them.
const (
	loginRefusedBackoff = "too many failed logins for this account from this address"
	loginRefusedIP      = "too many failed logins from this address"
)

// limitLogin wraps the password login handler with the failed-login limits
// (see ratelimit.go): a doubling delay per (account, source IP) pair (the
// account is the user, however it was named, or the name given when no
// such user exists, so unknown accounts are limited like known ones) and a
// token bucket per source IP, over all accounts.
//
// Every attempt takes its place in both before the password is checked, so
// parallel guesses cannot slip past the count, and gives it back unless it
// failed with 401; a success also forgets its pair's failures (but not its
// address's, nor other pairs'). An attempt that must wait answers 429
// without checking the password, right or wrong, and its audit record says
// which account, and why.
func (api *API) limitLogin(h handler) handler {
	l := api.limits
	if l.loginBackoff == nil && l.loginPerIP == nil {
		return h
	}
	return func(c *gin.Context) error {
		login, err := peekLoginName(c)
		if err != nil {
			return err
		}
		account := "name:" + strings.ToLower(login)
		if login != "" {
			u, err := api.db.UserByEmailOrUsername(c.Request.Context(), login, login)
			switch {
			case err == nil:
				account = "user:" + u.ID
			case !errors.Is(err, database.ErrNotFound):
				return err
			}
		}
		ip := sourceIP(c.Request)
		t, wait, reason := l.takeLogin(account, ip)
		if wait > 0 {
			api.audit(c, codersdk.AuditActionLogin, codersdk.AuditResourceUser).resource("", login).
				field("email", login).field("reason", reason).field("retry_after_seconds", retryAfterSeconds(wait))
			if l.firstRefusal("login:" + reason + ":" + account + ":" + ip) {
				api.log.Warn("login rate limit reached", "ip", ip, "account", login, "reason", reason, "retry_after", wait.Round(time.Second))
			}
			if reason == loginRefusedIP {
				return tooManyRequests(c, wait, "", "Too many failed logins from this IP address")
			}
			return tooManyRequests(c, wait, "", "Too many failed logins for this account from this IP address")
		}
		err = h(c)
		var ae *apiError
		switch {
		case err == nil:
			l.loginBackoff.succeeded(t)
			l.loginPerIP.refund(t.ipToken, t.at)
		case !errors.As(err, &ae) || ae.status != http.StatusUnauthorized:
			l.loginBackoff.refund(t)
			l.loginPerIP.refund(t.ipToken, t.at)
		}
		return err
	}
}

// takeLogin records an attempt for account from ip when neither its pair
// must wait nor the address's bucket is empty; otherwise it returns how
// long to wait and why (loginRefusedBackoff or loginRefusedIP).
func (l *rateLimiters) takeLogin(account, ip string) (loginTicket, time.Duration, string) {
	pairs, byIP := l.loginBackoff, l.loginPerIP
	// Both are checked and filled under both locks, always taken in this
	// order.
	if pairs != nil {
		pairs.mu.Lock()
		defer pairs.mu.Unlock()
	}
	if byIP != nil {
		byIP.mu.Lock()
		defer byIP.mu.Unlock()
	}
	var now time.Time
	switch {
	case pairs != nil:
		now = pairs.now()
	default:
		now = byIP.now()
	}
	t := loginTicket{key: account + " " + ip, at: now}
	// When both must wait, the longer wait is the one that matters.
	var wait time.Duration
	reason := ""
	if pairs != nil {
		if d := pairs.wait(t.key, now); d > wait {
			wait, reason = d, loginRefusedBackoff
		}
	}
	if byIP != nil {
		var d time.Duration
		if t.ipToken, d = byIP.reserve(ip, now); d > wait {
			wait, reason = d, loginRefusedIP
		}
	}
	if wait > 0 {
		if t.ipToken != nil { // the pair must wait: give the token back
			t.ipToken.CancelAt(now)
			t.ipToken = nil
		}
		return t, wait, reason
	}
	if pairs != nil {
		t.prev = pairs.add(t.key, now)
	}
	return t, 0, ""
}

// loginBackoff delays the login attempts of (account, source IP) pairs that
// failed: after allowed failures, a pair's next attempt waits
// loginBackoffBase from its latest failure, doubled for every further
// failure, at most loginBackoffMax. A pair is forgotten after a success, or
// after window of quiet once its wait is over (every pair is checked on a
// sweep once a window, so memory holds only recent pairs). A nil
// *loginBackoff (the limit turned off) delays nothing.
type loginBackoff struct {
	allowed int
	window  time.Duration
	now     func() time.Time

	mu        sync.Mutex
	pairs     map[string]backoffState
	nextSweep time.Time
}

// backoffState is a pair's failures: how many, and the latest's time.
type backoffState struct {
	failures int
	last     time.Time
}

// loginTicket is an attempt that took its place: the pair, when, the
// pair's state before it and the address's token (to give the place back).
type loginTicket struct {
	key     string
	at      time.Time
	prev    backoffState
	ipToken *rate.Reservation
}

func newLoginBackoff(allowed int, window time.Duration, now func() time.Time) *loginBackoff {
	if allowed <= 0 {
		return nil
	}
	return &loginBackoff{allowed: allowed, window: window, now: now, pairs: map[string]backoffState{}}
}

// delay is how long after its latest failure a pair with n failures waits.
func (b *loginBackoff) delay(n int) time.Duration {
	if n < b.allowed {
		return 0
	}
	if shift := n - b.allowed; shift < 20 { // 2^20 s is far past the cap
		return min(loginBackoffBase<<shift, loginBackoffMax)
	}
	return loginBackoffMax
}

// expired reports whether s is forgotten at now: a window of quiet has
// passed since its wait ended.
func (b *loginBackoff) expired(s backoffState, now time.Time) bool {
	return !now.Before(s.last.Add(b.delay(s.failures) + b.window))
}

// state is key's state at now (zero when it has none or it expired). The
// caller holds mu.
func (b *loginBackoff) state(key string, now time.Time) backoffState {
	if !now.Before(b.nextSweep) {
		for k, s := range b.pairs {
			if b.expired(s, now) {
				delete(b.pairs, k)
			}
		}
		b.nextSweep = now.Add(b.window)
	}
	s, ok := b.pairs[key]
	if ok && b.expired(s, now) {
		delete(b.pairs, key)
		return backoffState{}
	}
	return s
}

// wait is how long key must wait at now (0: it may try). The caller holds
// mu.
func (b *loginBackoff) wait(key string, now time.Time) time.Duration {
	s := b.state(key, now)
	if s.failures == 0 {
		return 0
	}
	return max(s.last.Add(b.delay(s.failures)).Sub(now), 0)
}

// add counts an attempt of key at now as a failure until it is given back
// (refund) or turns out a success, and returns key's state before it. The
// caller holds mu.
func (b *loginBackoff) add(key string, now time.Time) backoffState {
	prev := b.state(key, now)
	b.pairs[key] = backoffState{failures: prev.failures + 1, last: now}
	return prev
}

// refund gives back t's place: the attempt was neither a failure nor a
// success (a malformed request, a suspended account). When later attempts
// of the pair came since, only the count is given back.
func (b *loginBackoff) refund(t loginTicket) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	s, ok := b.pairs[t.key]
	switch {
	case !ok:
	case s.last.Equal(t.at) && s.failures == t.prev.failures+1:
		if t.prev.failures == 0 {
			delete(b.pairs, t.key)
		} else {
			b.pairs[t.key] = t.prev
		}
	case s.failures > 0:
		s.failures--
		b.pairs[t.key] = s
	}
}

// succeeded forgets t's pair: the right password from this address.
func (b *loginBackoff) succeeded(t loginTicket) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.pairs, t.key)
}

// len is the number of pairs held (for tests).
func (b *loginBackoff) len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.pairs)
}

// peekLoginName reads the "email" field of a login request (the email or
// username) and puts the body back for the handler, which decodes and
// validates it strictly.
func peekLoginName(c *gin.Context) (string, error) {
	body, err := io.ReadAll(io.LimitReader(c.Request.Body, maxJSONBody+1))
	if err != nil {
		return "", bodyReadError("Request body", err)
	}
	c.Request.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(body), c.Request.Body), c.Request.Body}
	var req struct {
		Email string `json:"email"`
	}
	_ = json.Unmarshal(body, &req) // a malformed body is the handler's to refuse
	return strings.TrimSpace(req.Email), nil
}
