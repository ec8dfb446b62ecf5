package coderd

import (
	"net/http/httptest"
	"testing"
	"time"
)

// fakeClock is a settable clock.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time          { return c.t }
func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }

func TestSlidingWindow(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{t: time.Date(2026, 11, 23, 16, 0, 0, 0, time.UTC)}
	w := newSlidingWindow(3, 10*time.Second, clock.now)
	for i := range 3 {
		if _, ok := w.take("a"); !ok {
			t.Fatalf("take %d: refused, want allowed", i+1)
		}
		clock.advance(time.Second)
	}
	// Events at 0s, 1s, 2s; now 3s: the first leaves the window at 10s.
	if wait, ok := w.take("a"); ok || wait != 7*time.Second {
		t.Fatalf("4th take: got wait %s ok=%v, want 7s refused", wait, ok)
	}
	if _, ok := w.take("b"); !ok {
		t.Fatal("another key: refused, want allowed")
	}
	clock.advance(7 * time.Second)
	if _, ok := w.take("a"); !ok {
		t.Fatal("after the oldest event expired: refused, want allowed")
	}
	if wait, ok := w.take("a"); ok || wait != time.Second {
		t.Fatalf("window full again: got wait %s ok=%v, want 1s refused", wait, ok)
	}

	// A refund makes room at once.
	at := clock.now()
	w.remove("a", at)
	if _, ok := w.take("a"); !ok {
		t.Fatal("after a refund: refused, want allowed")
	}

	// Idle keys are dropped by the sweep once their events expired.
	clock.advance(time.Minute)
	w.take("c")
	if got := w.len(); got != 1 {
		t.Errorf("keys after a idle window: got %d, want 1 (only c)", got)
	}
}

func TestSlidingWindowOff(t *testing.T) {
	t.Parallel()
	var w *slidingWindow = newSlidingWindow(-1, time.Minute, time.Now)
	for range 1000 {
		if _, ok := w.take("k"); !ok {
			t.Fatal("a limit turned off refused a request")
		}
	}
	w.remove("k", time.Now())
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
	if key, _ := apiRateLimitKey(r); key != "ip:10.1.2.3" {
		t.Errorf("anonymous: got %q, want ip:10.1.2.3", key)
	}
	r.Header.Set("X-Forwarded-For", "1.1.1.1")
	if key, _ := apiRateLimitKey(r); key != "ip:10.1.2.3" {
		t.Errorf("X-Forwarded-For must not be trusted: got %q", key)
	}
	r.Header.Set("Coder-Session-Token", "abcdefghij-0123456789012345678901")
	if key, _ := apiRateLimitKey(r); key != "token:abcdefghij" {
		t.Errorf("with a token: got %q, want token:abcdefghij", key)
	}
	r.Header.Set("Coder-Session-Token", "not-a-token")
	if key, _ := apiRateLimitKey(r); key != "ip:10.1.2.3" {
		t.Errorf("a malformed token counts as anonymous: got %q", key)
	}
}
