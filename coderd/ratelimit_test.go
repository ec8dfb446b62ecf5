package coderd_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"airgapcoder/coderd"
	"airgapcoder/coderd/coderdtest"
	"airgapcoder/coderd/codersdk"
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
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	a := answer{status: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After"), raw: string(raw)}
	_ = json.Unmarshal(raw, &a.body)
	return a
}

func tryLogin(t *testing.T, d *coderdtest.Deployment, email, password string) answer {
	t.Helper()
	return call(t, http.MethodPost, d.URL.String()+"/api/v2/users/login", "", codersdk.LoginWithPasswordRequest{Email: email, Password: password})
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

// TestLoginRateLimitPerAccount: with the default limits (5 failures per
// minute per account), the 6th wrong password for one account is refused
// with 429 and Retry-After (and so is the right one), is logged with IP and
// account, leaves other accounts alone, and once the window has passed the
// right password works.
func TestLoginRateLimitPerAccount(t *testing.T) {
	t.Parallel()
	logs := &syncbuf.Buffer{}
	clock := newTestClock()
	d := coderdtest.New(t, coderdtest.Options{
		Logger: slog.New(slog.NewTextHandler(logs, nil)),
		Now:    clock.now,
	})
	owner, _ := d.CreateFirstUser(t)
	d.CreateUser(t, owner, "alice")

	for i := range 5 {
		wantStatus(t, "wrong password "+strconv.Itoa(i+1), tryLogin(t, d, "admin@example.com", "wrong-password"), http.StatusUnauthorized)
	}
	wantTooMany(t, "6th wrong password", tryLogin(t, d, "admin@example.com", "wrong-password"), 60, "Too many failed logins for this account")
	// Named by username instead of email, it is the same account.
	wantTooMany(t, "right password, by username", tryLogin(t, d, "admin", coderdtest.FirstUserPassword), 60, "account")

	// Others' counters are their own: alice logs in, and her wrong
	// password is a plain 401.
	wantStatus(t, "alice", tryLogin(t, d, "alice@example.com", coderdtest.FirstUserPassword), http.StatusCreated)
	wantStatus(t, "alice wrong", tryLogin(t, d, "alice@example.com", "wrong-password"), http.StatusUnauthorized)
	// ... and her success did not reset admin's failures.
	a := tryLogin(t, d, "admin@example.com", coderdtest.FirstUserPassword)
	secs := wantTooMany(t, "admin after alice's success", a, 60, "account")

	if got := logs.String(); !strings.Contains(got, "login rate limit reached") || !strings.Contains(got, "ip=127.0.0.1") ||
		!strings.Contains(got, "account=admin@example.com") {
		t.Errorf("log: want a warning with ip and account, got:\n%s", got)
	}

	clock.advance(time.Duration(secs-1) * time.Second)
	wantTooMany(t, "a second before Retry-After", tryLogin(t, d, "admin@example.com", coderdtest.FirstUserPassword), 1, "account")
	clock.advance(time.Second)
	wantStatus(t, "right password after the window", tryLogin(t, d, "admin@example.com", coderdtest.FirstUserPassword), http.StatusCreated)
}

// TestLoginRateLimitPerIP: failures over several accounts add up per source
// IP, successes in between do not reset the count, and unknown accounts
// count like known ones.
func TestLoginRateLimitPerIP(t *testing.T) {
	t.Parallel()
	d := coderdtest.New(t, coderdtest.Options{
		// An hour, so that a slow machine cannot age the failures out.
		RateLimits: coderd.RateLimits{LoginPerAccount: 3, LoginPerIP: 7, LoginWindow: time.Hour},
	})
	owner, _ := d.CreateFirstUser(t)
	d.CreateUser(t, owner, "alice")
	for i := range 3 {
		wantStatus(t, "admin wrong "+strconv.Itoa(i+1), tryLogin(t, d, "admin@example.com", "wrong-password"), http.StatusUnauthorized)
	}
	wantTooMany(t, "admin 4th", tryLogin(t, d, "admin@example.com", "wrong-password"), 3600, "account")
	wantStatus(t, "alice right", tryLogin(t, d, "alice@example.com", coderdtest.FirstUserPassword), http.StatusCreated)
	for i := range 2 {
		wantStatus(t, "alice wrong "+strconv.Itoa(i+1), tryLogin(t, d, "alice", "wrong-password"), http.StatusUnauthorized)
	}
	for i := range 2 {
		wantStatus(t, "nobody wrong "+strconv.Itoa(i+1), tryLogin(t, d, "nobody@example.com", "wrong-password"), http.StatusUnauthorized)
	}
	// 7 failures from this IP (3 + 2 + 2): an 8th account is refused.
	wantTooMany(t, "8th failure from one IP", tryLogin(t, d, "someone@example.com", "wrong-password"), 3600, "Too many failed logins for this IP address")
	wantTooMany(t, "alice right, IP used up", tryLogin(t, d, "alice@example.com", coderdtest.FirstUserPassword), 3600, "IP address")
}

// TestLoginRateLimitParallel: guesses sent at once cannot slip past the
// count while their passwords are being checked.
func TestLoginRateLimitParallel(t *testing.T) {
	t.Parallel()
	d := coderdtest.New(t, coderdtest.Options{RateLimits: coderd.RateLimits{LoginPerAccount: 5}})
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

	// Exempt: the limiter runs before authentication, so these answers
	// (not 429) show the requests were not counted against the used-up
	// anonymous IP or token.
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
