package replicasync_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/quartz"

	"airgapcoder/coderd/coderdtest"
	"airgapcoder/coderd/database"
	"airgapcoder/coderd/replicasync"
	"airgapcoder/internal/syncbuf"
	"airgapcoder/internal/testwait"
)

const interval = 200 * time.Millisecond

// deployment is one test database with its pubsub, as replicas share it.
type deployment struct {
	t  *testing.T
	db *database.DB
	ps *database.Pubsub
}

func newDeployment(t *testing.T) *deployment {
	t.Helper()
	url := coderdtest.NewDatabase(t)
	db := coderdtest.OpenDatabase(t, url)
	return &deployment{t: t, db: db, ps: coderdtest.RunPubsub(t, url)}
}

// replica is one running Manager; stop ends its Run (a clean shutdown).
type replica struct {
	*replicasync.Manager
	log  *syncbuf.Buffer
	stop func()
}

// start registers a replica and runs its heartbeat until stop or the end
// of the test.
func (d *deployment) start(host, version string) *replica {
	d.t.Helper()
	r, err := d.register(host, version)
	if err != nil {
		d.t.Fatal(err)
	}
	return r
}

func (d *deployment) register(host, version string) (*replica, error) {
	return d.registerOn(nil, host, version)
}

// registerOn registers a replica whose heartbeat and version wait run on
// clock (nil: the real clock) and runs it until stop or the end of the
// test.
func (d *deployment) registerOn(clock quartz.Clock, host, version string) (*replica, error) {
	log := &syncbuf.Buffer{}
	m, err := replicasync.New(context.Background(), d.db, d.ps, replicasync.Options{
		Hostname: host, RelayAddress: "https://" + host + ":3443", Version: version, Interval: interval,
		Logger: slog.New(slog.NewTextHandler(log, nil)), Clock: clock,
	})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = m.Run(ctx) }()
	var once sync.Once
	stop := func() { once.Do(func() { cancel(); <-done }) }
	d.t.Cleanup(stop)
	return &replica{Manager: m, log: log, stop: stop}, nil
}

func hosts(rs []database.Replica) string {
	var out []string
	for _, r := range rs {
		out = append(out, r.Hostname)
	}
	return strings.Join(out, ",")
}

func TestReplicasSeeEachOther(t *testing.T) {
	t.Parallel()
	d := newDeployment(t)
	a := d.start("host-a", "v1")
	b := d.start("host-b", "v1")
	c := d.start("host-c", "v1")
	for _, r := range []*replica{a, b, c} {
		testwait.For(t, 2*time.Second, r.Self().Hostname+" sees three replicas", func() (bool, string) {
			got := hosts(r.All())
			return got == "host-a,host-b,host-c", got
		})
	}
	if a.Self().StartedAt.IsZero() || a.Self().RelayAddress != "https://host-a:3443" {
		t.Errorf("self: %+v", a.Self())
	}
	if !strings.Contains(a.log.String(), "replica joined") || !strings.Contains(a.log.String(), "host-c") {
		t.Errorf("a did not log host-c joining:\n%s", a.log)
	}

	// A clean shutdown announces itself: the others drop it well before
	// its heartbeat would have aged out.
	b.stop()
	took := testwait.For(t, 2*time.Second, "a drops b after b left", func() (bool, string) {
		got := hosts(a.All())
		return got == "host-a,host-c", got
	})
	if took >= a.MaxAge() {
		t.Errorf("b's leaving took %s to reach a, as long as a heartbeat ageing out (%s): the announcement did not arrive", took, a.MaxAge())
	}
	if !strings.Contains(a.log.String(), "replica left") {
		t.Errorf("a did not log b leaving:\n%s", a.log)
	}
	live, err := d.db.LiveReplicas(context.Background(), a.MaxAge())
	if err != nil {
		t.Fatal(err)
	}
	if got := hosts(live); got != "host-a,host-c" {
		t.Errorf("database after b left: %s", got)
	}
}

// A replica that dies (no clean shutdown, like kill -9) drops out once its
// heartbeat is MaxAge old.
func TestDeadReplicaAgesOut(t *testing.T) {
	t.Parallel()
	d := newDeployment(t)
	a := d.start("host-a", "v1")
	// host-dead heartbeats once, at registration, and never again.
	if _, err := replicasync.New(context.Background(), d.db, d.ps, replicasync.Options{
		Hostname: "host-dead", RelayAddress: "https://host-dead:3443", Version: "v1", Interval: interval,
	}); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 2*time.Second, "a sees host-dead", func() (bool, string) {
		got := hosts(a.All())
		return got == "host-a,host-dead", got
	})
	took := testwait.For(t, 3*a.MaxAge(), "host-dead ages out", func() (bool, string) {
		got := hosts(a.All())
		return got == "host-a", got
	})
	t.Logf("dead replica dropped %s after the test saw it", took)
}

// heartbeatOf is the last heartbeat the database holds for the replica
// on host (its row's updated_at, on the database's clock).
func (d *deployment) heartbeatOf(host string) time.Time {
	d.t.Helper()
	all, err := d.db.LiveReplicas(context.Background(), time.Hour)
	if err != nil {
		d.t.Fatal(err)
	}
	for _, r := range all {
		if r.Hostname == host {
			return r.UpdatedAt
		}
	}
	d.t.Fatalf("no row for %s", host)
	return time.Time{}
}

// TestHeartbeatOnClock: the heartbeat is written when an interval has
// passed on the replica's clock, not 1 ms before, and again at the next.
func TestHeartbeatOnClock(t *testing.T) {
	t.Parallel()
	d := newDeployment(t)
	ctx := coderdtest.ClockContext(t)
	clock := coderdtest.NewClock(t)
	trap := clock.Trap().NewTicker("replicasync", "heartbeat")
	defer trap.Close()
	r, err := d.registerOn(clock, "host-a", "v1")
	if err != nil {
		t.Fatal(err)
	}
	call, err := trap.Wait(ctx)
	if err != nil {
		t.Fatalf("Run started no heartbeat ticker: %v", err)
	}
	call.MustRelease(ctx)
	if call.Duration != interval {
		t.Errorf("heartbeat every %s, want %s", call.Duration, interval)
	}
	last := d.heartbeatOf("host-a")
	for i := 1; i <= 2; i++ {
		coderdtest.AdvanceClock(ctx, t, clock, interval-time.Millisecond)
		if got := d.heartbeatOf("host-a"); !got.Equal(last) {
			t.Fatalf("heartbeat %d written 1 ms before the interval ended (row at %s, was %s)", i, got, last)
		}
		coderdtest.AdvanceClock(ctx, t, clock, time.Millisecond)
		testwait.ForCtx(ctx, t, fmt.Sprintf("heartbeat %d once the interval ended", i), func() (bool, string) {
			got := d.heartbeatOf("host-a")
			return got.After(last), "row at " + got.String()
		})
		last = d.heartbeatOf("host-a")
		testwait.ForCtx(ctx, t, fmt.Sprintf("Self after heartbeat %d", i), func() (bool, string) {
			got := r.Self().UpdatedAt
			return got.Equal(last), "Self at " + got.String()
		})
	}
}

// TestMixedVersionsRefused: a replica of another version waits, on its
// clock, for MaxAge and an interval (live replicas of the old version
// may have just died), then refuses to start and names them.
func TestMixedVersionsRefused(t *testing.T) {
	t.Parallel()
	d := newDeployment(t)
	old := d.start("host-old", "v1") // heartbeats in real time, as the database ages its row
	ctx := coderdtest.ClockContext(t)
	clock := coderdtest.NewClock(t)
	trap := clock.Trap().NewTimer("replicasync", "versionWait")
	defer trap.Close()
	waits := make(chan *quartz.Call)
	go func() {
		for {
			call, err := trap.Wait(ctx)
			if err != nil {
				return
			}
			select {
			case waits <- call:
			case <-ctx.Done():
				return
			}
		}
	}()
	start := clock.Now()
	refused := make(chan error, 1)
	go func() { _, err := d.registerOn(clock, "host-new", "v2"); refused <- err }()
	deadline := old.MaxAge() + interval
	var err error
wait:
	for {
		select {
		case err = <-refused:
			break wait
		case call := <-waits:
			call.MustRelease(ctx)
			if call.Duration != interval {
				t.Errorf("polls every %s, want %s", call.Duration, interval)
			}
			if waited := clock.Since(start); waited > deadline {
				t.Fatalf("still waiting after %s, past MaxAge and an interval (%s)", waited, deadline)
			}
			coderdtest.AdvanceClock(ctx, t, clock, interval)
		case <-ctx.Done():
			t.Fatal("the v2 replica neither started nor was refused")
		}
	}
	if err == nil {
		t.Fatal("a v2 replica started beside a live v1 replica")
	}
	for _, want := range []string{"host-old", "version v1", "this replica is version v2", "stop or upgrade them first"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if waited := clock.Since(start); waited <= deadline {
		t.Errorf("refused after %s: it should wait out a heartbeat's MaxAge and an interval (%s) for replicas that just died", waited, deadline)
	}
	if got := hosts(old.All()); got != "host-old" {
		t.Errorf("the refused replica is listed: %s", got)
	}

	// Once the old replica is gone, the new version starts.
	old.stop()
	n, err := d.register("host-new", "v2")
	if err != nil {
		t.Fatalf("after the v1 replica stopped: %v", err)
	}
	if got := hosts(n.All()); got != "host-new" {
		t.Errorf("replicas: %s", got)
	}
}

// A replica killed just before an upgrade leaves a fresh row behind: the new
// version waits for it to age out instead of refusing. The row ages on the
// database's clock, so this wait runs on the real clock.
func TestUpgradeAfterCrashWaits(t *testing.T) {
	t.Parallel()
	d := newDeployment(t)
	if _, err := replicasync.New(context.Background(), d.db, d.ps, replicasync.Options{
		Hostname: "host-crashed", RelayAddress: "https://host-crashed:3443", Version: "v1", Interval: interval,
	}); err != nil {
		t.Fatal(err)
	}
	n, err := d.register("host-new", "v2")
	if err != nil {
		t.Fatalf("v2 beside a v1 replica that stopped heartbeating: %v", err)
	}
	if !strings.Contains(n.log.String(), "waiting for replicas of another version to stop") {
		t.Errorf("the new replica did not say what it waited for:\n%s", n.log)
	}
	if got := hosts(n.All()); got != "host-new" {
		t.Errorf("replicas: %s", got)
	}
}

func TestOptionsRequired(t *testing.T) {
	t.Parallel()
	d := newDeployment(t)
	for i, opts := range []replicasync.Options{
		{RelayAddress: "x", Version: "v1"},
		{Hostname: "x", Version: "v1"},
		{Hostname: "x", RelayAddress: "x"},
	} {
		if _, err := replicasync.New(context.Background(), d.db, d.ps, opts); err == nil {
			t.Errorf("case %d: %+v accepted", i, opts)
		} else if !strings.Contains(err.Error(), "required") {
			t.Errorf("case %d: %v", i, err)
		}
	}
}
