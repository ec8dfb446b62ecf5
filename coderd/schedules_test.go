package coderd_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"airgapcoder/coderd"
	"airgapcoder/coderd/coderdtest"
	"airgapcoder/codersdk"
	"airgapcoder/internal/testwait"
)

// offsetClock is coderd's clock for schedule tests: real time plus an
// offset the test moves forward.
type offsetClock struct{ offset atomic.Int64 }

func (c *offsetClock) Now() time.Time          { return time.Now().Add(time.Duration(c.offset.Load())) }
func (c *offsetClock) Advance(d time.Duration) { c.offset.Add(int64(d)) }
func ptr[T any](v T) *T                        { return &v }
func msOf(d time.Duration) *int64              { return ptr(d.Milliseconds()) }
func scheduleLifecycle(tick time.Duration) coderd.LifecycleOptions {
	return coderd.LifecycleOptions{Tick: tick, MinTTL: time.Second}
}

// scheduleFixture is a deployment with a fake daemon, a template and a
// member who owns the workspaces.
type scheduleFixture struct {
	d      *coderdtest.Deployment
	admin  *codersdk.Client
	member *codersdk.Client
	daemon *coderdtest.Daemon
	tpl    codersdk.Template
}

func newScheduleFixture(t *testing.T, opts coderdtest.Options) *scheduleFixture {
	t.Helper()
	opts.ProvisionerPSK = "psk"
	if opts.JobHeartbeatTimeout == 0 {
		opts.JobHeartbeatTimeout = time.Hour // clocks moved forward must not fail jobs
	}
	d := coderdtest.New(t, opts)
	admin, _ := d.CreateFirstUser(t)
	member, _ := d.CreateUser(t, admin, "alice")
	daemon := d.NewDaemon(t, "fake", nil)
	tpl := coderdtest.CreateTemplate(t, admin, daemon, "tpl", coderdtest.MinimalTemplate, nil)
	return &scheduleFixture{d: d, admin: admin, member: member, daemon: daemon, tpl: tpl}
}

// create creates a workspace with req's schedule and runs its start build.
func (f *scheduleFixture) create(t *testing.T, name string, req codersdk.CreateWorkspaceRequest) codersdk.Workspace {
	t.Helper()
	req.Name, req.TemplateID = name, f.tpl.ID
	w, err := f.member.CreateWorkspace(context.Background(), codersdk.Me, req)
	if err != nil {
		t.Fatalf("create workspace %s: %v", name, err)
	}
	f.daemon.RunOne(t)
	return f.get(t, w.ID)
}

func (f *scheduleFixture) get(t *testing.T, id string) codersdk.Workspace {
	t.Helper()
	w, err := f.member.Workspace(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func (f *scheduleFixture) builds(t *testing.T, id string) []codersdk.WorkspaceBuild {
	t.Helper()
	bs, err := f.member.WorkspaceBuilds(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return bs
}

func TestScheduleAPI(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newScheduleFixture(t, coderdtest.Options{Lifecycle: coderd.LifecycleOptions{Tick: time.Hour, MinTTL: time.Minute}})

	t.Run("create with a schedule", func(t *testing.T) {
		before := time.Now()
		w := f.create(t, "scheduled", codersdk.CreateWorkspaceRequest{
			TTLMillis: msOf(8 * time.Hour), AutostartSchedule: ptr("CRON_TZ=Europe/Berlin 30 9 * * 1-5"),
		})
		if w.TTLMillis == nil || *w.TTLMillis != (8*time.Hour).Milliseconds() {
			t.Errorf("ttl_ms: got %v, want 8h", w.TTLMillis)
		}
		if w.AutostartSchedule == nil || *w.AutostartSchedule != "CRON_TZ=Europe/Berlin 30 9 * * 1-5" {
			t.Errorf("autostart_schedule: got %v", w.AutostartSchedule)
		}
		d := w.LatestBuild.Deadline
		if d == nil || d.Before(before.Add(8*time.Hour)) || d.After(time.Now().Add(8*time.Hour)) {
			t.Errorf("latest_build.deadline: got %v, want 8h after the build ended", d)
		}
	})

	t.Run("create refuses bad values", func(t *testing.T) {
		for _, tc := range []struct {
			name  string
			req   codersdk.CreateWorkspaceRequest
			field string
			want  string
		}{
			{"short ttl", codersdk.CreateWorkspaceRequest{TTLMillis: msOf(30 * time.Second)}, "ttl_ms", "at least 1m0s"},
			{"long ttl", codersdk.CreateWorkspaceRequest{TTLMillis: msOf(31 * 24 * time.Hour)}, "ttl_ms", "at most"},
			{"bad zone", codersdk.CreateWorkspaceRequest{AutostartSchedule: ptr("CRON_TZ=Mars/Olympus 0 9 * * *")}, "autostart_schedule", "unknown time zone"},
			{"monthly", codersdk.CreateWorkspaceRequest{AutostartSchedule: ptr("0 9 1 * *")}, "autostart_schedule", "day-of-month must be *"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				tc.req.Name, tc.req.TemplateID = "bad", f.tpl.ID
				_, err := f.member.CreateWorkspace(ctx, codersdk.Me, tc.req)
				var apiErr *codersdk.Error
				if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusBadRequest {
					t.Fatalf("got %v, want 400", err)
				}
				if len(apiErr.Validations) != 1 || apiErr.Validations[0].Field != tc.field || !strings.Contains(apiErr.Validations[0].Detail, tc.want) {
					t.Errorf("validations: got %+v, want %s: …%s…", apiErr.Validations, tc.field, tc.want)
				}
			})
		}
	})

	t.Run("ttl, autostart and extend", func(t *testing.T) {
		w := f.create(t, "plain", codersdk.CreateWorkspaceRequest{})
		if w.TTLMillis != nil || w.AutostartSchedule != nil || w.LatestBuild.Deadline != nil {
			t.Fatalf("a workspace created without a schedule: ttl %v, autostart %v, deadline %v", w.TTLMillis, w.AutostartSchedule, w.LatestBuild.Deadline)
		}
		if err := f.member.PutExtendWorkspace(ctx, w.ID, codersdk.PutExtendWorkspaceRequest{Deadline: time.Now().Add(time.Hour)}); !codersdk.IsStatus(err, http.StatusBadRequest) ||
			!strings.Contains(err.Error(), "no deadline") {
			t.Errorf("extend without a deadline: got %v, want 400 no deadline", err)
		}
		if err := f.member.UpdateWorkspaceTTL(ctx, w.ID, codersdk.UpdateWorkspaceTTLRequest{TTLMillis: msOf(2 * time.Hour)}); err != nil {
			t.Fatal(err)
		}
		w = f.get(t, w.ID)
		if w.LatestBuild.Deadline == nil || time.Until(*w.LatestBuild.Deadline) < 119*time.Minute {
			t.Errorf("a running workspace given a TTL: deadline %v, want 2h from now", w.LatestBuild.Deadline)
		}
		want := time.Now().Add(5 * time.Hour).Truncate(time.Second)
		if err := f.member.PutExtendWorkspace(ctx, w.ID, codersdk.PutExtendWorkspaceRequest{Deadline: want}); err != nil {
			t.Fatal(err)
		}
		if w = f.get(t, w.ID); w.LatestBuild.Deadline == nil || !w.LatestBuild.Deadline.Equal(want) {
			t.Errorf("after extend: deadline %v, want %v", w.LatestBuild.Deadline, want)
		}
		if err := f.member.PutExtendWorkspace(ctx, w.ID, codersdk.PutExtendWorkspaceRequest{Deadline: time.Now().Add(10 * time.Second)}); !codersdk.IsStatus(err, http.StatusBadRequest) {
			t.Errorf("extend to 10s from now: got %v, want 400", err)
		}
		if err := f.member.UpdateWorkspaceAutostart(ctx, w.ID, codersdk.UpdateWorkspaceAutostartRequest{Schedule: ptr("0 9 * * Mon-Fri")}); err != nil {
			t.Fatal(err)
		}
		if w = f.get(t, w.ID); w.AutostartSchedule == nil || *w.AutostartSchedule != "CRON_TZ=UTC 0 9 * * Mon-Fri" {
			t.Errorf("autostart: got %v, want the canonical CRON_TZ=UTC 0 9 * * Mon-Fri", w.AutostartSchedule)
		}
		if err := f.member.UpdateWorkspaceAutostart(ctx, w.ID, codersdk.UpdateWorkspaceAutostartRequest{Schedule: ptr("0 9 * *")}); !codersdk.IsStatus(err, http.StatusBadRequest) ||
			!strings.Contains(err.Error(), "want 5 fields") {
			t.Errorf("a 4-field schedule: got %v, want 400 naming the fields", err)
		}
		// manual: no TTL, and the running build's deadline goes too.
		if err := f.member.UpdateWorkspaceTTL(ctx, w.ID, codersdk.UpdateWorkspaceTTLRequest{}); err != nil {
			t.Fatal(err)
		}
		if err := f.member.UpdateWorkspaceAutostart(ctx, w.ID, codersdk.UpdateWorkspaceAutostartRequest{}); err != nil {
			t.Fatal(err)
		}
		if w = f.get(t, w.ID); w.TTLMillis != nil || w.LatestBuild.Deadline != nil || w.AutostartSchedule != nil {
			t.Errorf("after manual: ttl %v, deadline %v, autostart %v; want none", w.TTLMillis, w.LatestBuild.Deadline, w.AutostartSchedule)
		}
		other, _ := f.d.CreateUser(t, f.admin, "bob")
		if err := other.UpdateWorkspaceTTL(ctx, w.ID, codersdk.UpdateWorkspaceTTLRequest{TTLMillis: msOf(time.Hour)}); !codersdk.IsStatus(err, http.StatusNotFound) {
			t.Errorf("another member sets the TTL: got %v, want 404", err)
		}
	})
}

// mockedLifecycle ticks every minute on the test's mock clock, with
// Coder's minute as the shortest TTL (so an open session bumps every 30 s).
var mockedLifecycle = coderd.LifecycleOptions{Tick: time.Minute, MinTTL: time.Minute}

// TestAutostop: a workspace past its deadline gets a stop build at the
// next tick, with reason autostop, initiated by its owner and audited;
// no tick before the deadline stops it.
func TestAutostop(t *testing.T) {
	t.Parallel()
	ctx := coderdtest.ClockContext(t)
	clock := coderdtest.NewClock(t)
	f := newScheduleFixture(t, coderdtest.Options{Clock: clock, Lifecycle: mockedLifecycle})
	w := f.create(t, "dev", codersdk.CreateWorkspaceRequest{TTLMillis: msOf(time.Minute)})
	if w.LatestBuild.Deadline == nil {
		t.Fatal("no deadline after the start build")
	}
	deadline := *w.LatestBuild.Deadline
	// The deadline is the build's end on the database's (wall) clock plus
	// the TTL; the mock clock stands at the test's start, before it.
	for clock.Now().Add(mockedLifecycle.Tick).Before(deadline) {
		coderdtest.AdvanceClock(ctx, t, clock, mockedLifecycle.Tick)
		if n := len(f.builds(t, w.ID)); n != 1 {
			t.Fatalf("at %s, before the deadline %s: %d builds, want 1", clock.Now(), deadline, n)
		}
	}
	coderdtest.AdvanceClock(ctx, t, clock, mockedLifecycle.Tick) // the first tick at or past the deadline
	bs := f.builds(t, w.ID)
	if len(bs) != 2 {
		t.Fatalf("at %s, the first tick past the deadline %s: %d builds, want 2 (a stop)", clock.Now(), deadline, len(bs))
	}
	stop := bs[0]
	if stop.Transition != codersdk.WorkspaceTransitionStop || stop.Reason != codersdk.BuildReasonAutostop || stop.InitiatorID != w.OwnerID {
		t.Errorf("stop build: transition %s, reason %s, initiator %s; want stop, autostop, the owner %s", stop.Transition, stop.Reason, stop.InitiatorID, w.OwnerID)
	}
	if stop.Deadline != nil {
		t.Errorf("a stop build has deadline %v, want none", stop.Deadline)
	}
	f.daemon.RunOne(t)
	if got := f.get(t, w.ID); got.LatestBuild.Status != codersdk.WorkspaceStatusStopped {
		t.Errorf("status %s, want stopped", got.LatestBuild.Status)
	}
	logs, err := f.admin.AuditLogs(context.Background(), codersdk.AuditLogsRequest{SearchQuery: "action:stop resource_type:workspace_build"})
	if err != nil {
		t.Fatal(err)
	}
	if len(logs.AuditLogs) != 1 || logs.AuditLogs[0].Actor() != "alice" || !strings.Contains(string(logs.AuditLogs[0].AdditionalFields), `"build_reason":"autostop"`) {
		t.Fatalf("audit: got %+v, want one stop by alice with build_reason autostop", logs.AuditLogs)
	}
	// Nothing more happens to a stopped workspace without a schedule.
	coderdtest.AdvanceClock(ctx, t, clock, 5*mockedLifecycle.Tick)
	if n := len(f.builds(t, w.ID)); n != 2 {
		t.Errorf("%d builds five ticks after the stop, want 2", n)
	}
}

// TestActivityBump: an open relay session keeps moving the deadline, so
// the workspace keeps running past its first deadline; once the session
// ends, it stops.
func TestActivityBump(t *testing.T) {
	t.Parallel()
	ctx := coderdtest.ClockContext(t)
	clock := coderdtest.NewClock(t)
	f := newScheduleFixture(t, coderdtest.Options{Clock: clock, Lifecycle: mockedLifecycle})
	agent := codersdk.ProvisionedAgent{Name: "main", Token: "9f0bd4a5-64a1-4b4d-9f08-2c2a0a6a7f10"}
	tpl := coderdtest.CreateTemplate(t, f.admin, f.daemon, "withagent", coderdtest.MinimalTemplate, nil)
	w, err := f.member.CreateWorkspace(context.Background(), codersdk.Me, codersdk.CreateWorkspaceRequest{TemplateID: tpl.ID, Name: "dev", TTLMillis: msOf(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	j := f.daemon.Acquire(t, 10*time.Second)
	f.daemon.Complete(t, j.JobID, codersdk.CompleteJobRequest{
		Resources: []codersdk.ProvisionedResource{{Type: "terraform_data", Name: "ws", Agents: []codersdk.ProvisionedAgent{agent}}},
	})
	w = f.get(t, w.ID)
	first := *w.LatestBuild.Deadline
	done := f.d.API.TrackSession(coderdtest.WorkspaceAgent(t, w).ID)
	// Ten ticks (and twenty bumps) with the session open, well past the
	// first deadline.
	coderdtest.AdvanceClock(ctx, t, clock, first.Sub(clock.Now())+10*mockedLifecycle.Tick)
	w = f.get(t, w.ID)
	if w.LatestBuild.Transition != codersdk.WorkspaceTransitionStart || w.LatestBuild.Deadline == nil || !w.LatestBuild.Deadline.After(clock.Now()) {
		t.Fatalf("at %s, with a session open past the first deadline %s: latest build %s, deadline %v; want still started, deadline ahead",
			clock.Now(), first, w.LatestBuild.Transition, w.LatestBuild.Deadline)
	}
	if w.LastUsedAt.IsZero() {
		t.Error("last_used_at not set by the activity")
	}
	done()
	// The last bump left at most a TTL; the tick after it stops the
	// workspace.
	coderdtest.AdvanceClock(ctx, t, clock, 2*mockedLifecycle.Tick)
	if bs := f.builds(t, w.ID); bs[0].Transition != codersdk.WorkspaceTransitionStop || bs[0].Reason != codersdk.BuildReasonAutostop {
		t.Fatalf("two ticks after the session ended: latest build %s/%s, want stop/autostop", bs[0].Transition, bs[0].Reason)
	}
}

// autostartSoon stops w and gives it an autostart schedule whose next
// occurrence is a minute or two of clock (now) ahead, and returns how far
// to move the clock past it.
func autostartSoon(t *testing.T, f *scheduleFixture, now func() time.Time, w codersdk.Workspace) time.Duration {
	t.Helper()
	ctx := context.Background()
	if _, err := f.member.CreateWorkspaceBuild(ctx, w.ID, codersdk.CreateWorkspaceBuildRequest{Transition: codersdk.WorkspaceTransitionStop}); err != nil {
		t.Fatal(err)
	}
	f.daemon.RunOne(t)
	at := now().Add(2 * time.Minute).In(time.UTC)
	sched := fmt.Sprintf("CRON_TZ=UTC %d %d * * *", at.Minute(), at.Hour())
	if err := f.member.UpdateWorkspaceAutostart(ctx, w.ID, codersdk.UpdateWorkspaceAutostartRequest{Schedule: &sched}); err != nil {
		t.Fatal(err)
	}
	return 3 * time.Minute
}

// TestAutostart: a stopped workspace starts once at the first tick after
// its schedule's occurrence, and not again.
func TestAutostart(t *testing.T) {
	t.Parallel()
	ctx := coderdtest.ClockContext(t)
	clock := coderdtest.NewClock(t)
	f := newScheduleFixture(t, coderdtest.Options{Clock: clock, Lifecycle: mockedLifecycle})
	w := f.create(t, "dev", codersdk.CreateWorkspaceRequest{})
	jump := autostartSoon(t, f, func() time.Time { return clock.Now() }, w)
	if r := f.d.API.LifecycleTick(context.Background()); len(r.Started) > 0 {
		t.Errorf("a tick before the occurrence started %v", r.Started)
	}
	if bs := f.builds(t, w.ID); len(bs) != 2 {
		t.Fatalf("%d builds before the occurrence, want 2", len(bs))
	}
	coderdtest.AdvanceClock(ctx, t, clock, jump) // three ticks, one or two of them past the occurrence
	if bs := f.builds(t, w.ID); len(bs) != 3 {
		t.Fatalf("three ticks on, past the occurrence: %d builds, want 3 (the autostart)", len(bs))
	}
	f.daemon.RunOne(t)
	coderdtest.AdvanceClock(ctx, t, clock, 3*mockedLifecycle.Tick)
	bs := f.builds(t, w.ID)
	if len(bs) != 3 || bs[0].Transition != codersdk.WorkspaceTransitionStart || bs[0].Reason != codersdk.BuildReasonAutostart || bs[0].InitiatorID != w.OwnerID {
		t.Fatalf("builds three ticks after the autostart: got %d, latest %s/%s by %s; want 3, start/autostart by the owner", len(bs), bs[0].Transition, bs[0].Reason, bs[0].InitiatorID)
	}
	// A schedule set after its occurrence does not fire for it.
	if _, err := f.member.CreateWorkspaceBuild(context.Background(), w.ID, codersdk.CreateWorkspaceBuildRequest{Transition: codersdk.WorkspaceTransitionStop}); err != nil {
		t.Fatal(err)
	}
	f.daemon.RunOne(t)
	past := clock.Now().Add(-time.Minute).UTC()
	sched := fmt.Sprintf("CRON_TZ=UTC %d %d * * *", past.Minute(), past.Hour())
	if err := f.member.UpdateWorkspaceAutostart(context.Background(), w.ID, codersdk.UpdateWorkspaceAutostartRequest{Schedule: &sched}); err != nil {
		t.Fatal(err)
	}
	coderdtest.AdvanceClock(ctx, t, clock, 3*mockedLifecycle.Tick)
	if bs := f.builds(t, w.ID); len(bs) != 4 {
		t.Errorf("a schedule whose occurrence was a minute before it was set: %d builds three ticks on, want 4 (no autostart)", len(bs))
	}
}

// TestAutostartTwoReplicas: two coderd replicas on one PostgreSQL, both
// ticking (and both asked to tick at once, many times), start the
// workspace once.
func TestAutostartTwoReplicas(t *testing.T) {
	t.Parallel()
	ctx := coderdtest.ClockContext(t)
	clock := coderdtest.NewClock(t)
	// The background ticks come every 10 minutes: moving the clock past
	// the occurrence (3 minutes) fires none, so the concurrent ticks
	// below are the first to see it.
	lifecycle := coderd.LifecycleOptions{Tick: 10 * time.Minute, MinTTL: time.Minute}
	f := newScheduleFixture(t, coderdtest.Options{Clock: clock, Lifecycle: lifecycle})
	second := coderdtest.New(t, coderdtest.Options{DatabaseURL: f.d.DatabaseURL, ProvisionerPSK: "psk", Clock: clock,
		JobHeartbeatTimeout: time.Hour, Lifecycle: lifecycle})
	w := f.create(t, "dev", codersdk.CreateWorkspaceRequest{})
	jump := autostartSoon(t, f, func() time.Time { return clock.Now() }, w)
	coderdtest.AdvanceClock(ctx, t, clock, jump)
	if n := len(f.builds(t, w.ID)); n != 2 {
		t.Fatalf("%d builds before any lifecycle tick, want 2", n)
	}
	var wg sync.WaitGroup
	var held atomic.Int32
	for _, api := range []*coderd.API{f.d.API, second.API, f.d.API, second.API} {
		wg.Go(func() {
			for range 20 {
				if r := api.LifecycleTick(context.Background()); len(r.Started) > 0 {
					held.Add(1)
				}
			}
		})
	}
	wg.Wait()
	// The background ticks of both replicas start nothing more either.
	coderdtest.AdvanceClock(ctx, t, clock, 3*lifecycle.Tick)
	bs := f.builds(t, w.ID)
	starts := 0
	for _, b := range bs {
		if b.Reason == codersdk.BuildReasonAutostart {
			starts++
		}
	}
	if n := held.Load(); n > 1 {
		t.Errorf("%d concurrent ticks reported starting the workspace, want at most 1", n)
	}
	if starts != 1 || len(bs) != 3 {
		raw, _ := json.Marshal(bs)
		t.Fatalf("two replicas: %d autostart builds, %d builds; want 1 and 3\n%s", starts, len(bs), raw)
	}
}

// TestActivityBumpDevURL: requests to a workspace's dev URL are activity
// (through the real relay and a real agent): the workspace keeps running
// past its first deadline while they come.
func TestActivityBumpDevURL(t *testing.T) {
	t.Parallel()
	ctx := coderdtest.ClockContext(t)
	clock := coderdtest.NewClock(t)
	f := newScheduleFixture(t, coderdtest.Options{Clock: clock, Lifecycle: mockedLifecycle})
	token := "5b7c8f3e-2f0a-4a53-9d1e-6f1f3c2b9a01"
	tpl := coderdtest.CreateTemplate(t, f.admin, f.daemon, "withagent", coderdtest.MinimalTemplate, nil)
	w, err := f.member.CreateWorkspace(context.Background(), codersdk.Me, codersdk.CreateWorkspaceRequest{TemplateID: tpl.ID, Name: "dev", TTLMillis: msOf(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	j := f.daemon.Acquire(t, 10*time.Second)
	f.daemon.Complete(t, j.JobID, codersdk.CompleteJobRequest{Resources: []codersdk.ProvisionedResource{{Type: "terraform_data", Name: "ws",
		Agents: []codersdk.ProvisionedAgent{{Name: "main", Token: token, OperatingSystem: "linux", Architecture: "amd64"}}}}})
	startAgent(t, f.d, token)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("hello")) }))
	t.Cleanup(hs.Close)
	port := hs.Listener.Addr().(*net.TCPAddr).Port
	url := fmt.Sprintf("%s/@alice/dev/ports/%d/", f.d.URL, port)
	get := func() (int, string) {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		req.Header.Set("Coder-Session-Token", f.member.SessionToken)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer res.Body.Close()
		body, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(body)
	}
	testwait.For(t, 20*time.Second, "the dev URL answers", func() (bool, string) {
		code, body := get()
		return code == http.StatusOK, fmt.Sprintf("%d %s", code, body)
	})
	first := *f.get(t, w.ID).LatestBuild.Deadline
	// A person clicking every 20 s (of the mock clock, which drives the
	// ticks) until well past the first deadline.
	for clock.Now().Before(first.Add(2 * mockedLifecycle.Tick)) {
		if code, body := get(); code != http.StatusOK {
			t.Fatalf("dev URL at %s: %d %s", clock.Now(), code, body)
		}
		coderdtest.AdvanceClock(ctx, t, clock, 20*time.Second)
	}
	w = f.get(t, w.ID)
	if w.LatestBuild.Transition != codersdk.WorkspaceTransitionStart || w.LatestBuild.Deadline == nil || !w.LatestBuild.Deadline.After(clock.Now()) {
		t.Fatalf("at %s, dev URL requests past the first deadline %s: latest build %s, deadline %v; want still started, deadline ahead",
			clock.Now(), first, w.LatestBuild.Transition, w.LatestBuild.Deadline)
	}
}
