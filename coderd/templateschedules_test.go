package coderd_test

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"airgapcoder/coderd"
	"airgapcoder/coderd/coderdtest"
	"airgapcoder/codersdk"
)

// createWithAgent creates a workspace of f.tpl with req's schedule and
// completes its start build with one resource holding agent, as the
// provisioner reports a template with a coder_agent.
func (f *scheduleFixture) createWithAgent(t *testing.T, name string, req codersdk.CreateWorkspaceRequest, agent codersdk.ProvisionedAgent) codersdk.Workspace {
	t.Helper()
	req.Name, req.TemplateID = name, f.tpl.ID
	w, err := f.member.CreateWorkspace(context.Background(), codersdk.Me, req)
	if err != nil {
		t.Fatalf("create workspace %s: %v", name, err)
	}
	j := f.daemon.Acquire(t, 10*time.Second)
	f.daemon.Complete(t, j.JobID, codersdk.CompleteJobRequest{
		Resources: []codersdk.ProvisionedResource{{Type: "terraform_data", Name: "ws", Agents: []codersdk.ProvisionedAgent{agent}}},
	})
	return f.get(t, w.ID)
}

func TestTemplateScheduleAPI(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newScheduleFixture(t, coderdtest.Options{Lifecycle: coderd.LifecycleOptions{Tick: time.Hour, MinTTL: time.Minute}})

	t.Run("refuses bad values", func(t *testing.T) {
		for _, tc := range []struct {
			name  string
			req   codersdk.UpdateTemplateMeta
			field string
		}{
			{"negative", codersdk.UpdateTemplateMeta{TimeTilDormantMillis: ptr(int64(-1))}, "time_til_dormant_ms"},
			{"below the minimum", codersdk.UpdateTemplateMeta{DefaultTTLMillis: msOf(time.Second)}, "default_ttl_ms"},
			{"above 30 days", codersdk.UpdateTemplateMeta{ActivityBumpMillis: msOf(31 * 24 * time.Hour)}, "activity_bump_ms"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				_, err := f.admin.UpdateTemplateMeta(ctx, f.tpl.ID, tc.req)
				if !codersdk.IsStatus(err, http.StatusBadRequest) || !strings.Contains(err.Error(), tc.field) {
					t.Errorf("got %v, want a 400 naming %s", err, tc.field)
				}
			})
		}
	})

	t.Run("members may not edit", func(t *testing.T) {
		_, err := f.member.UpdateTemplateMeta(ctx, f.tpl.ID, codersdk.UpdateTemplateMeta{DefaultTTLMillis: msOf(time.Hour)})
		if err == nil {
			t.Fatal("got nil, want a refusal")
		}
	})

	t.Run("fields kept and shown, default TTL applied", func(t *testing.T) {
		got, err := f.admin.UpdateTemplateMeta(ctx, f.tpl.ID, codersdk.UpdateTemplateMeta{
			DefaultTTLMillis: msOf(8 * time.Hour), ActivityBumpMillis: msOf(time.Hour),
		})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.admin.UpdateTemplateMeta(ctx, f.tpl.ID, codersdk.UpdateTemplateMeta{TimeTilDormantMillis: msOf(720 * time.Hour)}); err != nil {
			t.Fatal(err)
		}
		got, err = f.member.Template(ctx, f.tpl.ID)
		if err != nil {
			t.Fatal(err)
		}
		want := codersdk.TemplateScheduleFields{
			DefaultTTLMillis: (8 * time.Hour).Milliseconds(), ActivityBumpMillis: time.Hour.Milliseconds(),
			TimeTilDormantMillis: (720 * time.Hour).Milliseconds(),
		}
		if got.TemplateScheduleFields != want {
			t.Errorf("template fields: got %+v, want %+v", got.TemplateScheduleFields, want)
		}
		w := f.create(t, "defaulted", codersdk.CreateWorkspaceRequest{})
		if w.TTLMillis == nil || *w.TTLMillis != (8*time.Hour).Milliseconds() {
			t.Errorf("ttl_ms: got %v, want the template's 8h", w.TTLMillis)
		}
		w = f.create(t, "own-ttl", codersdk.CreateWorkspaceRequest{TTLMillis: msOf(2 * time.Hour)})
		if w.TTLMillis == nil || *w.TTLMillis != (2*time.Hour).Milliseconds() {
			t.Errorf("ttl_ms: got %v, want the request's 2h", w.TTLMillis)
		}
	})
}

// TestTemplateActivityBump: with activity_bump_ms set, activity moves the
// deadline to now plus the bump, not the TTL.
func TestTemplateActivityBump(t *testing.T) {
	t.Parallel()
	clock := &offsetClock{}
	f := newScheduleFixture(t, coderdtest.Options{Now: clock.Now, Lifecycle: scheduleLifecycle(time.Hour)})
	if _, err := f.admin.UpdateTemplateMeta(context.Background(), f.tpl.ID, codersdk.UpdateTemplateMeta{ActivityBumpMillis: msOf(3 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	w := f.createWithAgent(t, "bumped", codersdk.CreateWorkspaceRequest{TTLMillis: msOf(time.Hour)},
		codersdk.ProvisionedAgent{Name: "main", Token: "0d2b3f63-2f5e-4a57-9c1e-1f7f2b0c8a11"})
	clock.Advance(30 * time.Minute)
	done := f.d.API.TrackSession(coderdtest.WorkspaceAgent(t, w).ID)
	done()
	d := f.get(t, w.ID).LatestBuild.Deadline
	if want := clock.Now().Add(3 * time.Hour); d == nil || d.Before(want.Add(-time.Minute)) || d.After(want) {
		t.Errorf("deadline: got %v, want about %v (now + the template's 3h bump)", d, want)
	}
}

// TestDormancy steps the clock: an unused stopped workspace is marked
// dormant, cannot start until made active, and a dormant one is deleted
// once its template's autodelete time has passed. Each step is audited.
func TestDormancy(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := &offsetClock{}
	f := newScheduleFixture(t, coderdtest.Options{Now: clock.Now, Lifecycle: scheduleLifecycle(time.Hour)})
	if _, err := f.admin.UpdateTemplateMeta(ctx, f.tpl.ID, codersdk.UpdateTemplateMeta{
		TimeTilDormantMillis: msOf(time.Hour), TimeTilDormantAutoDeleteMillis: msOf(3 * time.Hour),
	}); err != nil {
		t.Fatal(err)
	}
	w := f.create(t, "sleepy", codersdk.CreateWorkspaceRequest{})
	build := func(tr codersdk.WorkspaceTransition) error {
		t.Helper()
		_, err := f.member.CreateWorkspaceBuild(ctx, w.ID, codersdk.CreateWorkspaceBuildRequest{Transition: tr})
		if err == nil {
			f.daemon.RunOne(t)
		}
		return err
	}
	tick := func() coderd.LifecycleResult {
		t.Helper()
		r := f.d.API.LifecycleTick(ctx)
		if !r.Held {
			t.Fatal("tick: lock not held")
		}
		return r
	}
	if err := build(codersdk.WorkspaceTransitionStop); err != nil {
		t.Fatal(err)
	}

	// The clock moves less than a day in all: sessions last a day.
	clock.Advance(50 * time.Minute)
	if r := tick(); len(r.Dormant) > 0 {
		t.Fatalf("after 50m: got dormant %v, want none", r.Dormant)
	}
	clock.Advance(20 * time.Minute)
	if r := tick(); !slices.Equal(r.Dormant, []string{w.ID}) {
		t.Fatalf("after 70m: got dormant %v, want [%s]", r.Dormant, w.ID)
	}
	got := f.get(t, w.ID)
	if got.DormantAt == nil || got.DeletingAt == nil || got.DeletingAt.Sub(*got.DormantAt) != 3*time.Hour {
		t.Fatalf("dormant_at %v, deleting_at %v: want both, 3h apart", got.DormantAt, got.DeletingAt)
	}
	if r := tick(); len(r.Dormant)+len(r.Deleted) > 0 {
		t.Fatalf("second tick: got %+v, want nothing done", r)
	}

	err := build(codersdk.WorkspaceTransitionStart)
	if !codersdk.IsStatus(err, http.StatusBadRequest) || !strings.Contains(err.Error(), "dormant") {
		t.Fatalf("start while dormant: got %v, want a 400 saying it is dormant", err)
	}
	if err := f.member.UpdateWorkspaceDormancy(ctx, w.ID, codersdk.UpdateWorkspaceDormancy{Dormant: false}); err != nil {
		t.Fatal(err)
	}
	if got := f.get(t, w.ID); got.DormantAt != nil || got.DeletingAt != nil {
		t.Fatalf("made active: got dormant_at %v, deleting_at %v, want none", got.DormantAt, got.DeletingAt)
	}
	if r := tick(); len(r.Dormant) > 0 {
		t.Fatalf("right after activation: got dormant %v, want none", r.Dormant)
	}
	if err := build(codersdk.WorkspaceTransitionStart); err != nil {
		t.Fatalf("start after activation: %v", err)
	}
	if err := build(codersdk.WorkspaceTransitionStop); err != nil {
		t.Fatal(err)
	}

	clock.Advance(70 * time.Minute)
	if r := tick(); !slices.Equal(r.Dormant, []string{w.ID}) {
		t.Fatalf("unused again: got dormant %v, want [%s]", r.Dormant, w.ID)
	}
	clock.Advance(2 * time.Hour)
	if r := tick(); len(r.Deleted) > 0 {
		t.Fatalf("after 2 dormant hours: got deleted %v, want none", r.Deleted)
	}
	clock.Advance(70 * time.Minute)
	if r := tick(); !slices.Equal(r.Deleted, []string{w.ID}) {
		t.Fatalf("after 3 dormant hours: got deleted %v, want [%s]", r.Deleted, w.ID)
	}
	if r := tick(); len(r.Deleted) > 0 {
		t.Fatalf("delete queued: got deleted %v again", r.Deleted)
	}
	bs := f.builds(t, w.ID)
	if last := bs[0]; last.Transition != codersdk.WorkspaceTransitionDelete {
		t.Errorf("latest build: got %s, want delete", last.Transition)
	}
	f.daemon.RunOne(t)

	logs, err := f.admin.AuditLogs(ctx, codersdk.AuditLogsRequest{SearchQuery: "workspace:alice/sleepy"})
	if err != nil {
		t.Fatal(err)
	}
	var marked, deleted int
	for _, l := range logs.AuditLogs {
		switch {
		case l.Action == codersdk.AuditActionWrite && strings.Contains(string(l.AdditionalFields), `"dormant":true`):
			marked++
		case l.Action == codersdk.AuditActionDelete && strings.Contains(string(l.AdditionalFields), `"autodelete"`):
			deleted++
		}
	}
	if marked != 2 || deleted != 1 {
		t.Errorf("audit: got %d dormant marks and %d autodeletes, want 2 and 1", marked, deleted)
	}
}
