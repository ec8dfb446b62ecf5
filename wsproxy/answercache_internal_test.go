package wsproxy

import (
	"testing"
	"time"
)

// TestAnswerCache: an answer is served until it expires, a non-positive
// validity is not kept, and a put drops what has expired.
func TestAnswerCache(t *testing.T) {
	var c answerCache[string, int]
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c.put("a", 1, t0, time.Minute)
	c.put("never", 2, t0, 0)
	for _, tc := range []struct {
		key    string
		at     time.Time
		want   int
		wantOK bool
	}{
		{"a", t0, 1, true},
		{"a", t0.Add(time.Minute - time.Nanosecond), 1, true},
		{"a", t0.Add(time.Minute), 0, false},
		{"never", t0, 0, false},
		{"unknown", t0, 0, false},
	} {
		if got, ok := c.get(tc.key, tc.at); got != tc.want || ok != tc.wantOK {
			t.Errorf("get(%q) at +%v = %d, %v; want %d, %v", tc.key, tc.at.Sub(t0), got, ok, tc.want, tc.wantOK)
		}
	}
	c.put("b", 3, t0.Add(2*time.Minute), time.Minute)
	if _, kept := c.m["a"]; kept || len(c.m) != 1 {
		t.Errorf("after a put at +2m the cache holds %v, want only b (a expired)", c.m)
	}
}
