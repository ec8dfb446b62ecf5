package coderd

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"airgapcoder/coderd/database"
)

// limitLogin wraps the password login handler with the failed-login limits
// (see ratelimit.go): per account (the user, however it was named, or the
// name given when no such user exists, so unknown accounts are limited
// like known ones) and per source IP, over all accounts.
//
// Every attempt takes a place in both windows before the password is
// checked, so parallel guesses cannot slip past the count, and gives it
// back unless it failed with 401: a success (or any other answer) counts
// for nothing and resets no one's failures, neither the IP's nor other
// accounts'. Once either window is full the login answers 429 without
// checking the password, right or wrong, until the oldest failure leaves
// the window.
func (api *API) limitLogin(h handler) handler {
	l := api.limits
	if l.loginPerAccount == nil && l.loginPerIP == nil {
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
		at, wait, which := l.takeLogin(account, ip)
		if wait > 0 {
			if l.firstRefusal("login:" + which + ":" + account + ":" + ip) {
				api.log.Warn("login rate limit reached", "ip", ip, "account", login, "limit", which, "retry_after", wait.Round(time.Second))
			}
			return tooManyRequests(c, wait, "", "Too many failed logins for this %s", which)
		}
		err = h(c)
		var ae *apiError
		if !errors.As(err, &ae) || ae.status != http.StatusUnauthorized {
			l.loginPerAccount.remove(account, at)
			l.loginPerIP.remove(ip, at)
		}
		return err
	}
}

// takeLogin records an attempt for account and ip when both windows have
// room, returning its time; otherwise it returns how long to wait and which
// limit ("account" or "IP address") is used up.
func (l *rateLimiters) takeLogin(account, ip string) (time.Time, time.Duration, string) {
	acct, byIP := l.loginPerAccount, l.loginPerIP
	// Both windows are checked and filled under both locks, always taken
	// in this order.
	if acct != nil {
		acct.mu.Lock()
		defer acct.mu.Unlock()
	}
	if byIP != nil {
		byIP.mu.Lock()
		defer byIP.mu.Unlock()
	}
	var now time.Time
	switch {
	case acct != nil:
		now = acct.now()
	default:
		now = byIP.now()
	}
	// When both are used up, the longer wait is the one that matters.
	var wait time.Duration
	which := ""
	if acct != nil {
		if d := acct.wait(account, now); d > wait {
			wait, which = d, "account"
		}
	}
	if byIP != nil {
		if d := byIP.wait(ip, now); d > wait {
			wait, which = d, "IP address"
		}
	}
	if wait > 0 {
		return now, wait, which
	}
	if acct != nil {
		acct.add(account, now)
	}
	if byIP != nil {
		byIP.add(ip, now)
	}
	return now, 0, ""
}

// peekLoginName reads the "email" field of a login request (the email or
// username) and puts the body back for the handler, which decodes and
// validates it strictly.
func peekLoginName(c *gin.Context) (string, error) {
	body, err := io.ReadAll(io.LimitReader(c.Request.Body, maxJSONBody+1))
	if err != nil {
		return "", badRequest("Read request body: %v", err)
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
