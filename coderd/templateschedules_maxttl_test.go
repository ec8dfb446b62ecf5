package coderd_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"airgapcoder/coderd/coderdtest"
	"airgapcoder/codersdk"
)

// TestTemplateMaxTTL steps the clock through a template's max_ttl_ms
// (Coder's max_ttl): longer TTLs are refused, a start build's deadline
// never passes its max_deadline (not by its TTL, activity, an extension or
// removing the TTL), a workspace without a TTL stops at it, and the
// scheduler stops the workspace there.
func TestTemplateMaxTTL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := &offsetClock{}
	f := newScheduleFixture(t, coderdtest.Options{Now: clock.Now, Lifecycle: scheduleLifecycle(time.Hour)})

	if _, err := f.admin.UpdateTemplateMeta(ctx, f.tpl.ID, codersdk.UpdateTemplateMeta{MaxTTLMillis: msOf(2 * time.Hour), DefaultTTLMillis: msOf(3 * time.Hour)}); !codersdk.IsStatus(err, http.StatusBadRequest) || !strings.Contains(err.Error(), "default_ttl_ms") {
		t.Fatalf("a default TTL above the maximum: got %v, want a 400 naming default_ttl_ms", err)
	}
	tpl, err := f.admin.UpdateTemplateMeta(ctx, f.tpl.ID, codersdk.UpdateTemplateMeta{MaxTTLMillis: msOf(2 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if tpl.MaxTTLMillis != (2 * time.Hour).Milliseconds() {
		t.Fatalf("max_ttl_ms: got %d, want 2h", tpl.MaxTTLMillis)
	}
	_, err = f.member.CreateWorkspace(ctx, codersdk.Me, codersdk.CreateWorkspaceRequest{TemplateID: f.tpl.ID, Name: "long", TTLMillis: msOf(3 * time.Hour)})
	if !codersdk.IsStatus(err, http.StatusBadRequest) || !strings.Contains(err.Error(), "ttl_ms") || !strings.Contains(err.Error(), "maximum TTL, 2h0m0s") {
		t.Fatalf("create with a TTL above the maximum: got %v, want a 400 naming ttl_ms and the maximum", err)
	}

	w := f.createWithAgent(t, "capped", codersdk.CreateWorkspaceRequest{TTLMillis: msOf(time.Hour)},
		codersdk.ProvisionedAgent{Name: "main", Token: "6a1d2e0b-8c3f-4f4e-9a57-2b7c1d9e0f31"})
	b := w.LatestBuild
	if b.Deadline == nil || b.MaxDeadline == nil {
		t.Fatalf("after the start: deadline %v, max_deadline %v; want both", b.Deadline, b.MaxDeadline)
	}
	maxDeadline := *b.MaxDeadline
	if got := b.MaxDeadline.Sub(*b.Deadline); got < 59*time.Minute || got > 61*time.Minute {
		t.Errorf("max_deadline - deadline = %s, want 1h (TTL 1h, maximum 2h)", got)
	}

	// Activity 90 minutes in moves the deadline to the max_deadline, not
	// to now + 1h.
	clock.Advance(90 * time.Minute)
	done := f.d.API.TrackSession(coderdtest.WorkspaceAgent(t, w).ID)
	done()
	if d := f.get(t, w.ID).LatestBuild.Deadline; d == nil || !d.Equal(maxDeadline) {
		t.Errorf("deadline after activity: got %v, want the max_deadline %s", d, maxDeadline)
	}

	for _, tc := range []struct {
		name  string
		call  func() error
		field string
	}{
		{"extend past the max_deadline", func() error {
			return f.member.PutExtendWorkspace(ctx, w.ID, codersdk.PutExtendWorkspaceRequest{Deadline: maxDeadline.Add(time.Minute)})
		}, "max deadline"},
		{"a TTL above the maximum", func() error {
			return f.member.UpdateWorkspaceTTL(ctx, w.ID, codersdk.UpdateWorkspaceTTLRequest{TTLMillis: msOf(3 * time.Hour)})
		}, "maximum TTL"},
	} {
		if err := tc.call(); !codersdk.IsStatus(err, http.StatusBadRequest) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%s: got %v, want a 400 that says %q", tc.name, err, tc.field)
		}
	}
	if err := f.member.PutExtendWorkspace(ctx, w.ID, codersdk.PutExtendWorkspaceRequest{Deadline: maxDeadline.Add(-time.Minute)}); err != nil {
		t.Errorf("extend to before the max_deadline: %v", err)
	}
	// No TTL: the build still stops at its max_deadline.
	if err := f.member.UpdateWorkspaceTTL(ctx, w.ID, codersdk.UpdateWorkspaceTTLRequest{}); err != nil {
		t.Fatal(err)
	}
	if d := f.get(t, w.ID).LatestBuild.Deadline; d == nil || !d.Equal(maxDeadline) {
		t.Errorf("deadline after removing the TTL: got %v, want the max_deadline %s", d, maxDeadline)
	}
	if r := f.d.API.LifecycleTick(ctx); len(r.Stopped) != 0 {
		t.Errorf("a tick before the max_deadline stopped %v", r.Stopped)
	}
	clock.Advance(maxDeadline.Sub(clock.Now()) + time.Second)
	if r := f.d.API.LifecycleTick(ctx); len(r.Stopped) != 1 || r.Stopped[0] != w.ID {
		t.Fatalf("a tick past the max_deadline: %+v, want workspace %s stopped", r, w.ID)
	}
	f.daemon.RunOne(t)

	// A workspace created without a TTL stops at its max_deadline too.
	nottl := f.create(t, "nottl", codersdk.CreateWorkspaceRequest{})
	nb := nottl.LatestBuild
	if nottl.TTLMillis != nil || nb.Deadline == nil || nb.MaxDeadline == nil || !nb.Deadline.Equal(*nb.MaxDeadline) {
		t.Errorf("no TTL: ttl_ms %v, deadline %v, max_deadline %v; want no TTL and the deadline at the max_deadline", nottl.TTLMillis, nb.Deadline, nb.MaxDeadline)
	}
	if nb.Job.CompletedAt == nil {
		t.Fatal("the start build's job has no completed_at")
	}
	if d := nb.MaxDeadline.Sub(*nb.Job.CompletedAt); d < 119*time.Minute || d > 121*time.Minute {
		t.Errorf("max_deadline %s is %s after the start build ended, want 2h", nb.MaxDeadline, d)
	}

	// Turning the maximum off leaves running builds as they are and lets
	// the next start run by its TTL alone.
	if tpl, err = f.admin.UpdateTemplateMeta(ctx, f.tpl.ID, codersdk.UpdateTemplateMeta{MaxTTLMillis: msOf(0)}); err != nil || tpl.MaxTTLMillis != 0 {
		t.Fatalf("turn the maximum off: %v, max_ttl_ms %d", err, tpl.MaxTTLMillis)
	}
	free := f.create(t, "free", codersdk.CreateWorkspaceRequest{TTLMillis: msOf(3 * time.Hour)})
	if free.LatestBuild.MaxDeadline != nil || free.LatestBuild.Deadline == nil {
		t.Errorf("without a maximum: deadline %v, max_deadline %v; want a deadline and no max_deadline", free.LatestBuild.Deadline, free.LatestBuild.MaxDeadline)
	}
}
