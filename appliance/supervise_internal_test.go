package appliance

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/quartz"
	"github.com/thejerf/suture/v4"

	"airgapcoder/certs"
	"airgapcoder/coderd/coderdtest"
	"airgapcoder/internal/testwait"
	"airgapcoder/mirror"
)

// restarts records what a supervised component reported.
type restarts struct {
	mu     sync.Mutex
	counts []int
	causes []string
}

func (r *restarts) record(n int, cause error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.counts = append(r.counts, n)
	r.causes = append(r.causes, cause.Error())
}

func (r *restarts) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.counts)
}

// These tests run supervision on a mock clock (coderdtest.NewClock) and
// step it: traps on its timers (tagged "appliance", "probe" or "restart",
// and the component) say when a probe or a restart wait is armed, so the
// clock is never stepped before supervision waits for it.

// serveTree runs tree until the test ends; stop ends it and waits.
func serveTree(ctx context.Context, t *testing.T, tree *suture.Supervisor) (stop func()) {
	t.Helper()
	treeCtx, cancel := context.WithCancel(ctx)
	done := tree.ServeBackground(treeCtx)
	stopped := false
	stop = func() {
		t.Helper()
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("the tree did not stop")
		}
	}
	t.Cleanup(stop)
	return stop
}

// restartWait takes the next restart wait armed on waits, checks it is
// base ±50% (the backoff's jitter), lets it be armed and returns it.
func restartWait(ctx context.Context, t *testing.T, waits *quartz.Trap, base time.Duration) time.Duration {
	t.Helper()
	call := waits.MustWait(ctx)
	call.MustRelease(ctx)
	if call.Duration < base/2 || call.Duration > base*3/2 {
		t.Errorf("restart waits %s, want %s ±50%%", call.Duration, base)
	}
	return call.Duration
}

// TestSupervisedGivesUp: a component that fails on every start is
// restarted with backoff (each wait longer, on the clock), each restart
// reported before its wait, and after maxRestarts the tree ends with an
// error that names it and its last failure.
func TestSupervisedGivesUp(t *testing.T) {
	ctx := coderdtest.ClockContext(t)
	clock := coderdtest.NewClock(t)
	waits := clock.Trap().NewTimer("appliance", "restart", "widget")
	defer waits.Close()
	var served, restarted atomic.Int32
	heard := &restarts{}
	c := newSupervised("widget",
		func(ctx context.Context) error { served.Add(1); return errors.New("widget exploded") },
		func(ctx context.Context) error {
			if restarted.Add(1) >= 2 {
				return errors.New("widget will not start")
			}
			return nil
		},
		clock, slog.New(slog.DiscardHandler), heard.record)
	c.maxRestarts = 3
	tree := newSupervisionTree(slog.New(slog.DiscardHandler))
	tree.Add(c)
	done := tree.ServeBackground(ctx)
	for i, base := range []time.Duration{500 * time.Millisecond, 750 * time.Millisecond, 1125 * time.Millisecond} {
		wait := restartWait(ctx, t, waits, base)
		if got := heard.len(); got != i+1 {
			t.Fatalf("restart %d armed its wait with %d restarts reported, want %d", i+1, got, i+1)
		}
		if got := restarted.Load(); got != int32(i) {
			t.Fatalf("restarted %d times before the wait of restart %d, want %d", got, i+1, i)
		}
		coderdtest.AdvanceClock(ctx, t, clock, wait)
	}
	var err error
	select {
	case err = <-done:
	case <-ctx.Done():
		t.Fatal("the tree still runs after its component failed on every start maxRestarts times")
	}
	if err == nil || !errors.Is(err, suture.ErrTerminateSupervisorTree) {
		t.Fatalf("tree ended with %v, want the give-up", err)
	}
	if msg := err.Error(); !strings.HasPrefix(msg, "widget keeps failing: restarted 3 times") || !strings.Contains(msg, "widget will not start") {
		t.Errorf("the give-up says %q: want the component, its restarts and the last failure", msg)
	}
	if got := heard.counts; len(got) != 3 || got[0] != 1 || got[1] != 2 || got[2] != 3 {
		t.Errorf("restarts reported: %v, want 1 2 3", got)
	}
	if heard.causes[0] != "widget exploded" {
		t.Errorf("the first restart's cause: %q", heard.causes[0])
	}
	if served.Load() != 2 || restarted.Load() != 3 {
		t.Errorf("served %d times and restarted %d: want 2 and 3 (the first restart worked, the others failed)", served.Load(), restarted.Load())
	}
}

// flakyServer answers pings until told to stop, like a crashed server,
// and answers again once restarted.
type flakyServer struct {
	down                 atomic.Bool
	pings, kills, starts atomic.Int32
}

func (f *flakyServer) Ping(context.Context) error {
	f.pings.Add(1)
	if f.down.Load() {
		return errors.New("connection refused")
	}
	return nil
}
func (f *flakyServer) Kill(context.Context) error { f.kills.Add(1); return nil }
func (f *flakyServer) Start(context.Context) error {
	f.starts.Add(1)
	f.down.Store(false)
	return nil
}

// TestSuperviseServerRestartsAfterDeadline: a server is probed every
// second on the clock; one that answers is left alone; one that stops
// answering is killed and started again once it has failed its probes for
// 5 s, not one probe earlier, and after its backoff wait; and stopping the
// tree stops the supervision without a restart, even one already due.
func TestSuperviseServerRestartsAfterDeadline(t *testing.T) {
	ctx := coderdtest.ClockContext(t)
	clock := coderdtest.NewClock(t)
	probes := clock.Trap().TickerFunc("appliance", "probe", "postgres")
	defer probes.Close()
	waits := clock.Trap().NewTimer("appliance", "restart", "postgres")
	defer waits.Close()
	f := &flakyServer{}
	heard := &restarts{}
	tree := newSupervisionTree(slog.New(slog.DiscardHandler))
	tree.Add(superviseServer("postgres", f, clock, slog.New(slog.DiscardHandler), heard.record))
	stop := serveTree(ctx, t, tree)

	// probing waits until the probes (re)start, every second.
	probing := func() {
		t.Helper()
		call := probes.MustWait(ctx)
		call.MustRelease(ctx)
		if call.Duration != time.Second {
			t.Fatalf("probes every %s, want 1s", call.Duration)
		}
	}
	// probe steps the clock to the next probe and waits for it to finish.
	probe := func() {
		t.Helper()
		coderdtest.AdvanceClock(ctx, t, clock, time.Second)
	}
	probing()

	for range 60 {
		probe()
	}
	if f.pings.Load() != 60 || f.kills.Load() != 0 || heard.len() != 0 {
		t.Fatalf("a minute of probes of a server that answers: %d pings, %d kills, restarts %v; want 60 pings and no restart", f.pings.Load(), f.kills.Load(), heard.counts)
	}

	// It stops answering. The first failed probe starts the count: the
	// fifth after it is 5 s on, the fourth only 4 s.
	f.down.Store(true)
	for range 5 {
		probe()
	}
	if next, ok := clock.Peek(); !ok || next != time.Second || f.kills.Load() != 0 || heard.len() != 0 {
		t.Fatalf("after failing its probes for 4 s: next probe in %s (%v), %d kills, restarts %v; want it still probed and not restarted", next, ok, f.kills.Load(), heard.counts)
	}
	probe()
	wait := restartWait(ctx, t, waits, 500*time.Millisecond)
	if heard.len() != 1 || !strings.Contains(heard.causes[0], "no answer for 5s") || !strings.Contains(heard.causes[0], "connection refused") {
		t.Fatalf("restarts reported %v %v: want one, caused by 5 s of failed probes", heard.counts, heard.causes)
	}
	if f.kills.Load() != 0 || f.starts.Load() != 0 {
		t.Fatalf("killed %d and started %d times before the restart's backoff wait: want neither", f.kills.Load(), f.starts.Load())
	}
	coderdtest.AdvanceClock(ctx, t, clock, wait)
	probing()
	if f.kills.Load() != 1 || f.starts.Load() != 1 {
		t.Fatalf("after the restart: killed %d and started %d times, want once each", f.kills.Load(), f.starts.Load())
	}

	// Started again, it answers and is left alone.
	pings := f.pings.Load()
	for range 10 {
		probe()
	}
	if f.pings.Load() != pings+10 || f.kills.Load() != 1 || heard.len() != 1 {
		t.Fatalf("after the restart: %d more pings, %d kills, restarts %v; want 10 pings and still one restart", f.pings.Load()-pings, f.kills.Load(), heard.counts)
	}

	// It fails again, for 5 s: the next restart is due after a longer
	// wait, and the tree stops during it.
	f.down.Store(true)
	for range 6 {
		probe()
	}
	restartWait(ctx, t, waits, 750*time.Millisecond)
	stop()
	if f.kills.Load() != 1 || f.starts.Load() != 1 {
		t.Errorf("stopping the tree during a restart's wait: killed %d and started %d times, want still once each", f.kills.Load(), f.starts.Load())
	}
	if got := heard.counts; len(got) != 2 || got[1] != 2 {
		t.Errorf("restarts reported: %v, want 1 2", got)
	}
}

// TestMirrorServiceRestarts: a mirror whose socket fails is started again
// on the same address and serves again.
func TestMirrorServiceRestarts(t *testing.T) {
	dir := t.TempDir()
	if _, err := certs.EnsureServer(dir, []string{"localhost", "127.0.0.1"}, certs.Options{}); err != nil {
		t.Fatal(err)
	}
	cert, err := certs.LoadServerCertificate(dir)
	if err != nil {
		t.Fatal(err)
	}
	ms, err := newMirrorService(mirror.ServerOptions{Dir: dir, Certificate: cert, Address: "127.0.0.1:0", ShutdownTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx := coderdtest.ClockContext(t)
	clock := coderdtest.NewClock(t)
	waits := clock.Trap().NewTimer("appliance", "restart", "mirror")
	defer waits.Close()
	heard := &restarts{}
	tree := newSupervisionTree(slog.New(slog.DiscardHandler))
	tree.Add(newSupervised("mirror", ms.serve, ms.restart, clock, slog.New(slog.DiscardHandler), heard.record))
	serveTree(ctx, t, tree)
	<-ms.server().Ready()
	addr := ms.server().Addr().String()

	caPEM, err := os.ReadFile(filepath.Join(certs.CertsDir(dir), "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, DisableKeepAlives: true}}
	healthy := func() error {
		resp, err := client.Get("https://" + addr + "/healthz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return errors.New(resp.Status)
		}
		return nil
	}
	if err := healthy(); err != nil {
		t.Fatalf("before: %v", err)
	}
	ms.stopServing()
	coderdtest.AdvanceClock(ctx, t, clock, restartWait(ctx, t, waits, 500*time.Millisecond))
	testwait.ForCtx(ctx, t, "the mirror serving again at "+addr+" after its socket failed", func() (bool, string) {
		err := healthy()
		return err == nil, fmt.Sprint(err)
	})
	if heard.len() != 1 {
		t.Errorf("restarts reported: %v, want one", heard.counts)
	}
	if got := ms.server().Addr().String(); got != addr {
		t.Errorf("restarted on %s, want %s", got, addr)
	}
}
