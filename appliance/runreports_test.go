package appliance

import (
	"os"
	"strings"
	"testing"
	"time"
)

// TestEgressComponent: status says nothing was refused until up records a
// refusal, then how many and the last.
func TestEgressComponent(t *testing.T) {
	l := Layout{Dir: t.TempDir()}
	if err := os.MkdirAll(l.Run(), 0o700); err != nil {
		t.Fatal(err)
	}
	if c := egressComponent(l); c.State != "ok" || c.Detail != "nothing refused" {
		t.Errorf("before any refusal: %+v", c)
	}
	at := time.Date(2026, 11, 27, 9, 0, 0, 0, time.UTC)
	for i, addr := range []string{"registry.coder.com:443", "releases.example:443"} {
		if err := recordRefusal(l, addr, int64(i+1), at); err != nil {
			t.Fatal(err)
		}
	}
	c := egressComponent(l)
	if c.State != "ok" || !strings.Contains(c.Detail, "2 connections refused; the last to releases.example:443 at 2026-11-27T09:00:00Z") {
		t.Errorf("after two refusals: %+v", c)
	}
}
