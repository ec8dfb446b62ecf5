package coderd

import (
	"net/http/httptest"
	"strconv"
	"testing"
	"time"
)

// fakeClock is a settable clock.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time          { return c.t }
func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }

// TestTokenBuckets: a key gets its limit at once, then one more every
// window/limit; keys have their own buckets; a refund gives a token back;
// full buckets are dropped by the sweep.
func TestTokenBuckets(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{t: time.Date(2026, 11, 23, 16, 0, 0, 0, time.UTC)}
	b := newTokenBuckets(4, 8*time.Second, clock.now) // a token every 2s
	wantTake := func(what, key string, wantWait time.Duration) {
		t.Helper()
		wait, ok := b.take(key)
		if ok != (wantWait == 0) || wait != wantWait {
			t.Fatalf("%s: got wait %s ok=%v, want wait %s", what, wait, ok, wantWait)
		}
	}
	for i := range 4 {
		wantTake("take "+strconv.Itoa(i+1), "a", 0)
	}
	wantTake("5th take", "a", 2*time.Second)
	clock.advance(time.Second)
	wantTake("half a token later", "a", time.Second)
	wantTake("another key", "b", 0)
	clock.advance(time.Second)
	wantTake("a token later", "a", 0)
	wantTake("empty again", "a", 2*time.Second)

	// A refund at the moment of the take gives the whole token back.
	b.mu.Lock()
	r, wait := b.reserve("a", clock.now())
	b.mu.Unlock()
	if r != nil || wait != 2*time.Second {
		t.Fatalf("reserve from an empty bucket: got %v, wait %s, want nothing and 2s", r, wait)
	}
	clock.advance(2 * time.Second)
	at := clock.now()
	b.mu.Lock()
	r, _ = b.reserve("a", at)
	b.mu.Unlock()
	if r == nil {
		t.Fatal("reserve after a refill: got nothing, want a token")
	}
	wantTake("the token is taken", "a", 2*time.Second)
	b.refund(r, at)
	wantTake("after its refund", "a", 0)

	// A full bucket is dropped by the next sweep.
	clock.advance(time.Minute)
	wantTake("another key, later", "c", 0)
	if got := b.len(); got != 1 {
		t.Errorf("keys after an idle window: got %d, want 1 (only c)", got)
	}
}

func TestTokenBucketsOff(t *testing.T) {
	t.Parallel()
	b := newTokenBuckets(-1, time.Minute, time.Now)
	for range 1000 {
		if _, ok := b.take("k"); !ok {
			t.Fatal("a limit turned off refused a request")
		}
	}
	b.refund(nil, time.Now())
}

func TestRateLimitDefaults(t *testing.T) {
	t.Parallel()
	got := RateLimits{}.withDefaults()
	want := RateLimits{API: 512, APIWindow: time.Minute, LoginPerAccount: 5, LoginPerIP: 20, LoginWindow: time.Minute}
	if got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
	if off := (RateLimits{API: -1}).withDefaults(); off.API != -1 {
		t.Errorf("API -1: got %d, want -1 (off)", off.API)
	}
}

func TestRateLimitExempt(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		method, path string
		exempt       bool
	}{
		{"GET", "/healthz", true},
		{"GET", "/bin/coder-linux-amd64", true},
		{"GET", "/@alice/dev/apps/web/", true},
		{"GET", "/api/v2/workspaceagents/me/manifest", true},
		{"POST", "/api/v2/workspaceagents/me/logs", true},
		{"GET", "/api/v2/workspaceagents/me/connect", true},
		{"POST", "/api/v2/workspaceproxies/me/authorize-connect", true},
		{"GET", "/api/v2/workspaceproxies", false},
		{"GET", "/api/v2/workspaceagents/0b9c/connect", true},
		{"POST", "/api/v2/provisionerdaemons", true},
		{"POST", "/api/v2/provisionerdaemons/d1/acquire", true},
		{"GET", "/api/v2/provisionerdaemons", false},
		{"GET", "/api/v2/workspaceagents/0b9c", false},
		{"GET", "/api/v2/workspaceagents/0b9c/logs", false},
		{"GET", "/api/v2/buildinfo", false},
		{"POST", "/api/v2/users/login", false},
		{"GET", "/api/v2/users/me", false},
	} {
		r := httptest.NewRequest(tc.method, tc.path, nil)
		if got := rateLimitExempt(r); got != tc.exempt {
			t.Errorf("%s %s: exempt got %v, want %v", tc.method, tc.path, got, tc.exempt)
		}
	}
}

func TestAPIRateLimitKey(t *testing.T) {
	t.Parallel()
	r := httptest.NewRequest("GET", "/api/v2/users/me", nil)
	r.RemoteAddr = "10.1.2.3:5555"
	r.Header.Set("X-Forwarded-For", "1.1.1.1")
	for _, tc := range []struct {
		name, keyID, want string
	}{
		{"anonymous, X-Forwarded-For not trusted", "", "ip:10.1.2.3"},
		{"authenticated token", "abcdefghij", "token:abcdefghij"},
	} {
		if got, _ := apiRateLimitKey(r, tc.keyID); got != tc.want {
			t.Errorf("%s: got %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestLoginBackoffDelay(t *testing.T) {
	t.Parallel()
	b := newLoginBackoff(5, time.Minute, time.Now)
	for _, tc := range []struct {
		failures int
		want     time.Duration
	}{
		{0, 0}, {4, 0}, {5, time.Second}, {6, 2 * time.Second}, {7, 4 * time.Second},
		{13, 256 * time.Second}, {14, 5 * time.Minute}, {15, 5 * time.Minute}, {1000, 5 * time.Minute},
	} {
		if got := b.delay(tc.failures); got != tc.want {
			t.Errorf("delay after %d failures: got %s, want %s", tc.failures, got, tc.want)
		}
	}
	if newLoginBackoff(-1, time.Minute, time.Now) != nil {
		t.Error("a negative limit: got a backoff, want none (off)")
	}
}

// TestLoginBackoff drives one (account, IP) pair through its failures with
// a settable clock: free failures, doubling waits counted from the latest
// failure, a refund, the reset after a success and after a quiet window.
func TestLoginBackoff(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{t: time.Date(2026, 11, 23, 16, 0, 0, 0, time.UTC)}
	b := newLoginBackoff(2, time.Minute, clock.now)
	fail := func(what, key string) loginTicket {
		t.Helper()
		if d := b.wait(key, clock.now()); d != 0 {
			t.Fatalf("%s: got wait %s, want none", what, d)
		}
		return loginTicket{key: key, at: clock.now(), prev: b.add(key, clock.now())}
	}
	wantWait := func(what, key string, want time.Duration) {
		t.Helper()
		if got := b.wait(key, clock.now()); got != want {
			t.Fatalf("%s: got wait %s, want %s", what, got, want)
		}
	}
	fail("failure 1", "a")
	fail("failure 2", "a")
	wantWait("after the allowed failures", "a", time.Second)
	wantWait("another pair", "b", 0)
	clock.advance(time.Second)
	fail("failure 3", "a")
	wantWait("after failure 3", "a", 2*time.Second)
	clock.advance(time.Second)
	wantWait("a second later", "a", time.Second)
	clock.advance(time.Second)
	tk := fail("attempt 4", "a")
	wantWait("after attempt 4", "a", 4*time.Second)
	b.refund(tk) // it was not a failure after all
	wantWait("after its refund", "a", 0)
	tk = fail("attempt 4 again", "a")
	b.succeeded(tk)
	wantWait("after a success", "a", 0)
	fail("failure 1 after the success", "a")
	fail("failure 2 after the success", "a")
	wantWait("the count started over", "a", time.Second)

	// A window of quiet after the wait forgets the pair, and the sweep
	// drops forgotten pairs.
	clock.advance(time.Second + time.Minute - time.Nanosecond)
	wantWait("just before the quiet window ends", "a", 0)
	if got := b.len(); got != 1 {
		t.Fatalf("pairs before the quiet window ends: got %d, want 1", got)
	}
	clock.advance(time.Nanosecond)
	fail("failure 1 after the quiet window", "a")
	fail("failure 2 after the quiet window", "a")
	wantWait("after a quiet window", "a", time.Second)
	fail("failure 1 of c", "c")
	clock.advance(2 * time.Minute)
	wantWait("c, long after", "c", 0)
	if got := b.len(); got != 0 {
		t.Errorf("pairs after a quiet sweep: got %d, want 0", got)
	}
}
