package coderd_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"airgapcoder/coderd"
	"airgapcoder/coderd/coderdtest"
	"airgapcoder/codersdk"
	"airgapcoder/internal/syncbuf"
)

// answer is a raw API answer.
type answer struct {
	status     int
	retryAfter string
	body       codersdk.Response
	raw        string
}

// call sends one request with an optional token and JSON body.
func call(t *testing.T, method, url, token string, body any) answer {
	t.Helper()
	return callWith(t, http.DefaultClient, method, url, token, body)
}

// callWith is call through client (e.g. one dialing from another address).
func callWith(t *testing.T, client *http.Client, method, url, token string, body any) answer {
	t.Helper()
	var r io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, url, r)
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set(codersdk.SessionTokenHeader, token)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	a := answer{status: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After"), raw: string(raw)}
	_ = json.Unmarshal(raw, &a.body)
	return a
}

// clientFrom is an HTTP client whose connections come from the loopback
// address ip (127.0.0.2, …: on Linux all of 127/8 is the loopback), so a
// test can be several clients that the server tells apart by source IP.
func clientFrom(t *testing.T, ip string) *http.Client {
	t.Helper()
	tr := &http.Transport{DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}).DialContext}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

func tryLogin(t *testing.T, d *coderdtest.Deployment, email, password string) answer {
	t.Helper()
	return tryLoginWith(t, http.DefaultClient, d, email, password)
}

func tryLoginWith(t *testing.T, client *http.Client, d *coderdtest.Deployment, email, password string) answer {
	t.Helper()
	return callWith(t, client, http.MethodPost, d.URL.String()+"/api/v2/users/login", "", codersdk.LoginWithPasswordRequest{Email: email, Password: password})
}

// wantStatus fails unless a has status want.
func wantStatus(t *testing.T, what string, a answer, want int) {
	t.Helper()
	if a.status != want {
		t.Fatalf("%s: got %d %s, want %d", what, a.status, a.raw, want)
	}
}

// wantTooMany checks a 429: a Retry-After of 1..max seconds and the error
// envelope saying message.
func wantTooMany(t *testing.T, what string, a answer, maxWait int, message string) int {
	t.Helper()
	wantStatus(t, what, a, http.StatusTooManyRequests)
	secs, err := strconv.Atoi(a.retryAfter)
	if err != nil || secs < 1 || secs > maxWait {
		t.Errorf("%s: Retry-After got %q, want whole seconds in 1..%d", what, a.retryAfter, maxWait)
	}
	if !strings.Contains(a.body.Message, message) || !strings.Contains(a.body.Message, "retry in") {
		t.Errorf("%s: message got %q, want it to say %q and when to retry", what, a.body.Message, message)
	}
	return secs
}

// testClock is a clock that moves only when the test says.
type testClock struct {
	base   time.Time
	offset atomic.Int64
}

func newTestClock() *testClock { return &testClock{base: time.Now()} }

func (c *testClock) now() time.Time { return c.base.Add(time.Duration(c.offset.Load())) }

func (c *testClock) advance(d time.Duration) { c.offset.Add(int64(d)) }

// TestLoginAnotherAddressIsNotLockedOut is issue 28's case: six wrong
// passwords for the owner from one address (127.0.0.1) do not keep the
// owner out from another (127.0.0.2), while the guessing address is refused
// (429), and every refusal is in the audit log with the account, the
// source IP and the reason.
func TestLoginAnotherAddressIsNotLockedOut(t *testing.T) {
	t.Parallel()
	clock := newTestClock() // stands still: no delay runs out by itself
	d := coderdtest.New(t, coderdtest.Options{Now: clock.now})
	owner, _ := d.CreateFirstUser(t)
	attacker, admin := clientFrom(t, "127.0.0.1"), clientFrom(t, "127.0.0.2")

	for i := range 5 {
		wantStatus(t, "wrong password "+strconv.Itoa(i+1), tryLoginWith(t, attacker, d, "admin@example.com", "wrong-password"), http.StatusUnauthorized)
	}
	wantTooMany(t, "6th wrong password", tryLoginWith(t, attacker, d, "admin@example.com", "wrong-password"), 1, "Too many failed logins for this account from this IP address")
	wantTooMany(t, "right password from the guessing address", tryLoginWith(t, attacker, d, "admin", coderdtest.FirstUserPassword), 1, "account")
	wantStatus(t, "right password from another address", tryLoginWith(t, admin, d, "admin@example.com", coderdtest.FirstUserPassword), http.StatusCreated)

	var refusals []codersdk.AuditLog
	for _, l := range auditLogs(t, owner, "action:login") {
		switch l.StatusCode {
		case http.StatusTooManyRequests:
			refusals = append(refusals, l)
		case http.StatusCreated:
			if l.IP == "127.0.0.2" && l.ResourceTarget != "admin" {
				t.Errorf("the owner's login from 127.0.0.2: got target %q, want admin", l.ResourceTarget)
			}
		}
	}
	if len(refusals) != 2 {
		t.Fatalf("refusals in the audit log: got %d, want 2 (one per 429)", len(refusals))
	}
	for _, l := range refusals {
		var fields map[string]any
		_ = json.Unmarshal(l.AdditionalFields, &fields)
		if l.IP != "127.0.0.1" || l.ResourceTarget == "" || l.Outcome != codersdk.AuditOutcomeFailure ||
			fields["reason"] != "too many failed logins for this account from this address" || fields["retry_after_seconds"] != 1.0 {
			t.Errorf("refusal record: got ip %q target %q outcome %s fields %s, want ip 127.0.0.1, the account, failure and the reason",
				l.IP, l.ResourceTarget, l.Outcome, l.AdditionalFields)
		}
	}
}

// TestLoginBackoff: past the allowed failures, the guessing address waits
// a delay that doubles with every further failure (Retry-After 1, 2, 4, 8
// seconds), is told so in the log once, and the right password from it
// works once the delay has passed, which forgets its failures.
func TestLoginBackoff(t *testing.T) {
	t.Parallel()
	logs := &syncbuf.Buffer{}
	clock := newTestClock()
	d := coderdtest.New(t, coderdtest.Options{Logger: slog.New(slog.NewTextHandler(logs, nil)), Now: clock.now})
	d.CreateFirstUser(t)
	for i := range 5 {
		wantStatus(t, "wrong password "+strconv.Itoa(i+1), tryLogin(t, d, "admin@example.com", "wrong-password"), http.StatusUnauthorized)
	}
	var waits []int
	for i := range 4 {
		secs := wantTooMany(t, "attempt during delay "+strconv.Itoa(i+1), tryLogin(t, d, "admin@example.com", "wrong-password"), 300, "account")
		waits = append(waits, secs)
		clock.advance(time.Duration(secs-1) * time.Second)
		wantTooMany(t, "a second before Retry-After", tryLogin(t, d, "admin@example.com", coderdtest.FirstUserPassword), 1, "account")
		clock.advance(time.Second)
		if i < 3 {
			wantStatus(t, "wrong password after the delay", tryLogin(t, d, "admin@example.com", "wrong-password"), http.StatusUnauthorized)
		}
	}
	if want := []int{1, 2, 4, 8}; !slices.Equal(waits, want) {
		t.Errorf("Retry-After of the delays: got %v, want %v", waits, want)
	}
	wantStatus(t, "right password after the delay", tryLogin(t, d, "admin@example.com", coderdtest.FirstUserPassword), http.StatusCreated)
	for i := range 5 {
		wantStatus(t, "wrong password after the success "+strconv.Itoa(i+1), tryLogin(t, d, "admin", "wrong-password"), http.StatusUnauthorized)
	}
	if got := logs.String(); strings.Count(got, "login rate limit reached") != 1 || !strings.Contains(got, "ip=127.0.0.1") ||
		!strings.Contains(got, "account=admin@example.com") {
		t.Errorf("log: want one warning with ip and account, got:\n%s", got)
	}
}

// TestLoginRateLimitPerIP: failures over several accounts add up per source
// IP, successes in between do not reset the count, unknown accounts count
// like known ones, and a used-up address keeps nobody else out.
func TestLoginRateLimitPerIP(t *testing.T) {
	t.Parallel()
	clock := newTestClock()
	d := coderdtest.New(t, coderdtest.Options{
		RateLimits: coderd.RateLimits{LoginPerAccount: 3, LoginPerIP: 7, LoginWindow: time.Hour},
		Now:        clock.now,
	})
	owner, _ := d.CreateFirstUser(t)
	d.CreateUser(t, owner, "alice")
	for i := range 3 {
		wantStatus(t, "admin wrong "+strconv.Itoa(i+1), tryLogin(t, d, "admin@example.com", "wrong-password"), http.StatusUnauthorized)
	}
	wantTooMany(t, "admin 4th", tryLogin(t, d, "admin@example.com", "wrong-password"), 1, "account")
	wantStatus(t, "alice right", tryLogin(t, d, "alice@example.com", coderdtest.FirstUserPassword), http.StatusCreated)
	for i := range 2 {
		wantStatus(t, "alice wrong "+strconv.Itoa(i+1), tryLogin(t, d, "alice", "wrong-password"), http.StatusUnauthorized)
	}
	for i := range 2 {
		wantStatus(t, "nobody wrong "+strconv.Itoa(i+1), tryLogin(t, d, "nobody@example.com", "wrong-password"), http.StatusUnauthorized)
	}
	// 7 failures from this IP (3 + 2 + 2): an 8th account is refused.
	wantTooMany(t, "8th failure from one IP", tryLogin(t, d, "someone@example.com", "wrong-password"), 3600, "Too many failed logins from this IP address")
	wantTooMany(t, "alice right, IP used up", tryLogin(t, d, "alice@example.com", coderdtest.FirstUserPassword), 3600, "IP address")
	wantStatus(t, "alice right from another address", tryLoginWith(t, clientFrom(t, "127.0.0.2"), d, "alice@example.com", coderdtest.FirstUserPassword), http.StatusCreated)
}

// TestLoginRateLimitParallel: guesses sent at once cannot slip past the
// count while their passwords are being checked.
func TestLoginRateLimitParallel(t *testing.T) {
	t.Parallel()
	clock := newTestClock() // stands still: the first delay never runs out
	d := coderdtest.New(t, coderdtest.Options{RateLimits: coderd.RateLimits{LoginPerAccount: 5}, Now: clock.now})
	d.CreateFirstUser(t)
	statuses := make(chan int, 20)
	var wg sync.WaitGroup
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			statuses <- tryLogin(t, d, "admin@example.com", "wrong-password").status
		}()
	}
	wg.Wait()
	close(statuses)
	count := map[int]int{}
	for s := range statuses {
		count[s]++
	}
	if count[http.StatusUnauthorized] != 5 || count[http.StatusTooManyRequests] != 15 {
		t.Errorf("20 parallel wrong passwords: got %v, want 5 × 401 and 15 × 429", count)
	}
}

// TestAPIRateLimit: a session token (or an anonymous IP) gets 429 at
// request N+1; another token has its own budget; agents, provisioner
// daemons, relay WebSockets and /healthz are not counted.
func TestAPIRateLimit(t *testing.T) {
	t.Parallel()
	const limit = 5
	const psk = "ratelimit-psk"
	d := coderdtest.New(t, coderdtest.Options{ProvisionerPSK: psk, RateLimits: coderd.RateLimits{API: limit}})
	base := d.URL.String()
	owner, _ := d.CreateFirstUser(t) // 2 anonymous requests: first user, login
	tokenA := owner.SessionToken
	for i := range limit {
		wantStatus(t, "token request "+strconv.Itoa(i+1), call(t, "GET", base+"/api/v2/users/me", tokenA, nil), http.StatusOK)
	}
	wantTooMany(t, "token request N+1", call(t, "GET", base+"/api/v2/users/me", tokenA, nil), 60, "at most 5 per minute per session token")

	b := tryLogin(t, d, "admin@example.com", coderdtest.FirstUserPassword) // anonymous request 3
	wantStatus(t, "second login", b, http.StatusCreated)
	var tokenB codersdk.LoginWithPasswordResponse
	_ = json.Unmarshal([]byte(b.raw), &tokenB)
	wantStatus(t, "another token", call(t, "GET", base+"/api/v2/users/me", tokenB.SessionToken, nil), http.StatusOK)

	for i := range 2 { // anonymous requests 4 and 5
		wantStatus(t, "anonymous "+strconv.Itoa(i+1), call(t, "GET", base+"/api/v2/buildinfo", "", nil), http.StatusOK)
	}
	wantTooMany(t, "anonymous N+1", call(t, "GET", base+"/api/v2/buildinfo", "", nil), 60, "per IP address")

	// Exempt: these answers (not 429) show the requests were not counted
	// against the used-up IP address or token.
	for i := range 2 * limit {
		n := strconv.Itoa(i + 1)
		wantStatus(t, "healthz "+n, call(t, "GET", base+"/healthz", "", nil), http.StatusOK)
		wantStatus(t, "agent manifest "+n, call(t, "GET", base+"/api/v2/workspaceagents/me/manifest", "", nil), http.StatusUnauthorized)
		wantStatus(t, "agent logs "+n, call(t, "POST", base+"/api/v2/workspaceagents/me/logs", tokenA, map[string]any{}), http.StatusUnauthorized)
		a := call(t, "GET", base+"/api/v2/workspaceagents/00000000-0000-0000-0000-000000000000/connect", tokenA, nil)
		if a.status == http.StatusTooManyRequests {
			t.Fatalf("relay connect %s: got 429, want it exempt", n)
		}
	}
	daemonClient := d.Client()
	daemonClient.ProvisionerPSK = psk
	for i := range 2 * limit {
		daemon, err := daemonClient.RegisterProvisionerDaemon(context.Background(), codersdk.RegisterProvisionerDaemonRequest{Name: "d", Version: "test"})
		if err != nil {
			t.Fatalf("register provisioner daemon %d: %v", i+1, err)
		}
		if _, err := daemonClient.AcquireJob(context.Background(), daemon.ID, 0); err != nil {
			t.Fatalf("acquire %d: %v", i+1, err)
		}
	}
}

// TestAPIRateLimitForgedTokens: requests with a forged token (a victim's
// token id and a wrong secret) count against the forger's address, not
// the victim's token: the victim keeps its whole budget, and the forger
// runs into its address's limit whatever ids it makes up.
func TestAPIRateLimitForgedTokens(t *testing.T) {
	t.Parallel()
	const limit = 5
	d := coderdtest.New(t, coderdtest.Options{RateLimits: coderd.RateLimits{API: limit, APIWindow: time.Hour}})
	base := d.URL.String()
	victim, _ := d.CreateFirstUser(t)
	victimID, _, _ := strings.Cut(victim.SessionToken, "-")
	forger := clientFrom(t, "127.0.0.3")
	forged := func(id string) string { return id + "-" + strings.Repeat("x", 22) }

	for i := range limit {
		wantStatus(t, "forged token "+strconv.Itoa(i+1), callWith(t, forger, "GET", base+"/api/v2/users/me", forged(victimID), nil), http.StatusUnauthorized)
	}
	wantTooMany(t, "forged token N+1", callWith(t, forger, "GET", base+"/api/v2/users/me", forged(victimID), nil), 3600, "per IP address")
	wantTooMany(t, "forged token with a made-up id", callWith(t, forger, "GET", base+"/api/v2/users/me", forged("Zz01234567"), nil), 3600, "per IP address")
	wantTooMany(t, "no token", callWith(t, forger, "GET", base+"/api/v2/buildinfo", "", nil), 3600, "per IP address")

	for i := range limit {
		wantStatus(t, "victim's token "+strconv.Itoa(i+1), call(t, "GET", base+"/api/v2/users/me", victim.SessionToken, nil), http.StatusOK)
	}
	wantTooMany(t, "victim's token N+1", call(t, "GET", base+"/api/v2/users/me", victim.SessionToken, nil), 3600, "per session token")
}
