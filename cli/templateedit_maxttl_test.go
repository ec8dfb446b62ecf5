package cli_test

import (
	"strings"
	"testing"
	"time"

	"airgapcoder/coderd/coderdtest"
)

// TestCLITemplateMaxTTL runs the built binary: an owner sets a template's
// maximum TTL with `coder templates edit --max-ttl`; a member's longer
// `coder schedule stop` and `coder create --stop-after` are refused naming
// the limit, a workspace created without a TTL stops at its max_deadline,
// and `coder schedule extend` cannot pass it.
func TestCLITemplateMaxTTL(t *testing.T) {
	t.Parallel()
	a := newAdminCLI(t, coderdtest.Options{})
	a.withWorkspace(t)
	if out := mustRun(t, a.ownerEnv, "templates", "edit", "tpl", "--max-ttl", "2h"); !strings.HasSuffix(out, ", max TTL 2h.\n") {
		t.Fatalf("coder templates edit --max-ttl 2h: got %q", out)
	}
	checkRefusals(t, []refusal{
		{"schedule stop above the maximum", a.aliceEnv, []string{"schedule", "stop", "dev", "3h"}, 1, "must be at most the template's maximum TTL, 2h0m0s"},
		{"create above the maximum", a.aliceEnv, []string{"create", "long", "--template", "tpl", "--stop-after", "3h", "-y"}, 1, "coder templates edit --max-ttl"},
	})
	if out := mustRun(t, a.aliceEnv, "schedule", "stop", "dev", "90m"); !strings.Contains(out, "stops 1h30m after") {
		t.Errorf("coder schedule stop dev 90m: got %q", out)
	}

	p := start(t, a.aliceEnv, "create", "capped", "--template", "tpl", "-y")
	a.daemon.RunOne(t)
	if code := p.wait(t, time.Minute); code != 0 {
		t.Fatalf("coder create capped: exit %d\nstderr: %s", code, p.stderr)
	}
	w := showWorkspace(t, a.aliceEnv, "capped")
	b := w.LatestBuild
	if w.TTLMillis != nil || b.Deadline == nil || b.MaxDeadline == nil || !b.Deadline.Equal(*b.MaxDeadline) {
		t.Fatalf("capped: ttl_ms %v, deadline %v, max_deadline %v; want no TTL and the deadline at the max_deadline", w.TTLMillis, b.Deadline, b.MaxDeadline)
	}
	if d := b.MaxDeadline.Sub(*b.Job.CompletedAt); d < 2*time.Hour-time.Second || d > 2*time.Hour+time.Second {
		t.Errorf("max_deadline is %s after the build ended, want 2h", d)
	}
	var rows []map[string]any
	decodeJSON(t, "coder schedule show", mustRun(t, a.aliceEnv, "schedule", "show", "capped", "-o", "json"), &rows)
	if len(rows) != 1 || rows[0]["max_deadline"] == nil {
		t.Errorf("coder schedule show capped -o json: got %v, want a max_deadline", rows)
	}
	checkRefusals(t, []refusal{
		{"extend past the max_deadline", a.aliceEnv, []string{"schedule", "extend", "capped", "3h"}, 1, "max deadline"},
	})
}
