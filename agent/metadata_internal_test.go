package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/quartz"

	"airgapcoder/coderd/coderdtest"
	"airgapcoder/codersdk"
	"airgapcoder/internal/testrun"
	"airgapcoder/internal/testwait"
)

// fakePoster records metadata batches; the first failures calls fail.
type fakePoster struct {
	batches *recorder[[]codersdk.AgentMetadataUpdate]
}

func newFakePoster(failures int) *fakePoster {
	return &fakePoster{batches: newRecorder[[]codersdk.AgentMetadataUpdate](failures)}
}

func (p *fakePoster) PostAgentMetadata(_ context.Context, req codersdk.PostAgentMetadataRequest) error {
	return p.batches.post(req.Metadata)
}

// resultsOf returns every result in batches for key, in order.
func resultsOf(batches [][]codersdk.AgentMetadataUpdate, key string) []codersdk.AgentMetadataResult {
	var out []codersdk.AgentMetadataResult
	for _, b := range batches {
		for _, u := range b {
			if u.Key == key {
				out = append(out, u.Result)
			}
		}
	}
	return out
}

// results returns every result posted for key, in order.
func (p *fakePoster) results(key string) []codersdk.AgentMetadataResult {
	return resultsOf(p.batches.all(), key)
}

// waitFor waits until cond holds for key's results.
func (p *fakePoster) waitFor(t *testing.T, timeout time.Duration, key string, cond func([]codersdk.AgentMetadataResult) bool) []codersdk.AgentMetadataResult {
	t.Helper()
	var results []codersdk.AgentMetadataResult
	p.batches.waitFor(t, timeout, "results of "+key, func(batches [][]codersdk.AgentMetadataUpdate) bool {
		results = resultsOf(batches, key)
		return cond(results)
	})
	return results
}

func runCollector(t *testing.T, poster metadataPoster, descs ...codersdk.AgentMetadataDescription) (dir string, stop func()) {
	t.Helper()
	dir = t.TempDir()
	c := newMetadataCollector(discardLogger(), poster, execEnv{shell: "/bin/sh", dir: dir, env: append(os.Environ(), "FROM_MANIFEST=yes")},
		descs, 100*time.Millisecond)
	stop = testrun.Background(t, "metadata collector", func(ctx context.Context) error {
		c.run(ctx)
		return nil
	})
	return dir, stop
}

func TestMetadataResults(t *testing.T) {
	p := newFakePoster(0)
	dir, _ := runCollector(t, p,
		codersdk.AgentMetadataDescription{Key: "env", Script: `echo "  $FROM_MANIFEST $(pwd)  "`, IntervalSeconds: 1},
		codersdk.AgentMetadataDescription{Key: "stderr", Script: "echo partial; echo broken >&2; exit 2", IntervalSeconds: 1},
		codersdk.AgentMetadataDescription{Key: "status", Script: "exit 3", IntervalSeconds: 1},
		codersdk.AgentMetadataDescription{Key: "quiet-stderr", Script: "echo fine; echo warning >&2", IntervalSeconds: 1},
		codersdk.AgentMetadataDescription{Key: "slow", Script: "sleep 30", IntervalSeconds: 10, TimeoutSeconds: 1},
		codersdk.AgentMetadataDescription{Key: "big", Script: "head -c 20000 /dev/zero | tr '\\0' x", IntervalSeconds: 1},
	)
	for _, tc := range []struct {
		key, value, err string
	}{
		{"env", "yes " + dir, ""},
		{"stderr", "partial", "broken"},
		{"status", "", "exit status 3"},
		{"quiet-stderr", "fine", ""},
		{"slow", "", "timed out after 1s"},
		{"big", strings.Repeat("x", maxMetadataValue), ""},
	} {
		r := p.waitFor(t, 5*time.Second, tc.key, func(r []codersdk.AgentMetadataResult) bool { return len(r) > 0 })[0]
		if r.Value != tc.value || r.Error != tc.err {
			t.Errorf("%s: got value %.40q error %q, want %.40q and %q", tc.key, r.Value, r.Error, tc.value, tc.err)
		}
		if time.Since(r.CollectedAt) > time.Minute {
			t.Errorf("%s: collected at %s", tc.key, r.CollectedAt)
		}
	}
}

// runClockCollector runs a collector whose interval timers and flush are
// on clock; it flushes once an hour, so a test reads what was collected
// with collected.
func runClockCollector(t *testing.T, clock quartz.Clock, descs ...codersdk.AgentMetadataDescription) (c *metadataCollector, dir string) {
	t.Helper()
	dir = t.TempDir()
	c = newMetadataCollector(discardLogger(), newFakePoster(0), execEnv{shell: "/bin/sh", dir: dir, env: os.Environ()}, descs, time.Hour)
	c.clock = clock
	testrun.Background(t, "metadata collector", func(ctx context.Context) error {
		c.run(ctx)
		return nil
	})
	return c, dir
}

// collected is key's latest result not yet posted.
func (c *metadataCollector) collected(key string) codersdk.AgentMetadataResult {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pending[key]
}

// TestMetadataIntervalOnClock: a key is collected at once, then again
// exactly when its interval has passed on the clock, not a millisecond
// before; each result is stamped with the clock's time.
func TestMetadataIntervalOnClock(t *testing.T) {
	ctx := coderdtest.ClockContext(t)
	clock := coderdtest.NewClock(t)
	armed := clock.Trap().TimerReset("agent", "metadataInterval", "count")
	defer armed.Close()
	const interval = 10 * time.Second
	began := clock.Now()
	c, dir := runClockCollector(t, clock,
		codersdk.AgentMetadataDescription{Key: "count", Script: "echo x >> runs; wc -l < runs", IntervalSeconds: int64(interval / time.Second)})
	runs := func() int {
		b, _ := os.ReadFile(filepath.Join(dir, "runs"))
		return strings.Count(string(b), "x")
	}

	// Each run ends by arming the timer for the next one.
	collected := func(want string, at time.Time) {
		t.Helper()
		call := armed.MustWait(ctx)
		call.MustRelease(ctx)
		if call.Duration != interval {
			t.Errorf("the next run is due in %s, want %s", call.Duration, interval)
		}
		if r := c.collected("count"); r.Value != want || !r.CollectedAt.Equal(at.UTC()) {
			t.Errorf("got value %q collected at %s, want %q at %s", r.Value, r.CollectedAt, want, at.UTC())
		}
	}
	collected("1", began)
	clock.Advance(interval - time.Millisecond).MustWait(ctx)
	if d, ok := clock.Peek(); !ok || d != time.Millisecond {
		t.Errorf("a millisecond before the interval passed: next event in %s (%t), want the run in 1ms", d, ok)
	}
	if n := runs(); n != 1 {
		t.Errorf("%d runs before the interval passed, want 1", n)
	}
	clock.Advance(time.Millisecond).MustWait(ctx)
	collected("2", began.Add(interval))
	if n := runs(); n != 2 {
		t.Errorf("%d runs once the interval passed, want 2", n)
	}
}

// TestMetadataSlowRunDelaysTheNext: a run that outlasts its interval on the
// clock is followed by the next one as soon as it ends, never overlapped
// by it.
func TestMetadataSlowRunDelaysTheNext(t *testing.T) {
	ctx := coderdtest.ClockContext(t)
	clock := coderdtest.NewClock(t)
	armed := clock.Trap().TimerReset("agent", "metadataInterval", "slow")
	defer armed.Close()
	c, dir := runClockCollector(t, clock, codersdk.AgentMetadataDescription{Key: "slow", IntervalSeconds: 1, TimeoutSeconds: 60,
		// Runs until the test creates "release".
		Script: "if [ -e running ]; then echo OVERLAP; exit 1; fi; touch running; while [ ! -e release ]; do sleep 0.02; done; rm running release; echo ok"})
	running := func() (bool, string) {
		_, err := os.Stat(filepath.Join(dir, "running"))
		return err == nil, "not running"
	}
	release := func() {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, "release"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	testwait.For(t, 10*time.Second, "the first run", running)
	// Three intervals pass while it runs: nothing else is scheduled.
	clock.Advance(3 * time.Second).MustWait(ctx)
	release()
	call := armed.MustWait(ctx)
	call.MustRelease(ctx)
	if call.Duration != 0 {
		t.Errorf("after a run that outlasted its interval the next is due in %s, want at once", call.Duration)
	}
	if r := c.collected("slow"); r.Value != "ok" || r.Error != "" {
		t.Errorf("the first run: got %+v, want ok", r)
	}
	testwait.For(t, 10*time.Second, "the second run, without the clock moving", running)
	release()
	// That run took no time on the clock: the next one is a whole
	// interval away.
	call = armed.MustWait(ctx)
	call.MustRelease(ctx)
	if call.Duration != time.Second {
		t.Errorf("after a run that took no time the next is due in %s, want 1s", call.Duration)
	}
	if r := c.collected("slow"); r.Value != "ok" || r.Error != "" {
		t.Errorf("the second run: got %+v, want ok (it did not overlap the first)", r)
	}
}

func TestMetadataWaitsForCoderd(t *testing.T) {
	// The first posts fail; the results arrive once coderd is back.
	p := newFakePoster(3)
	runCollector(t, p, codersdk.AgentMetadataDescription{Key: "k", Script: "echo v", IntervalSeconds: 1})
	r := p.waitFor(t, 5*time.Second, "k", func(r []codersdk.AgentMetadataResult) bool { return len(r) > 0 })
	if r[0].Value != "v" {
		t.Errorf("got %+v", r[0])
	}
}

func TestMetadataStopsOnShutdown(t *testing.T) {
	p := newFakePoster(0)
	dir, stop := runCollector(t, p, codersdk.AgentMetadataDescription{Key: "k", IntervalSeconds: 1, TimeoutSeconds: 60,
		Script: "echo $$ > pid; sleep 60"})
	waitFile(t, dir+"/pid", "\n")
	b, _ := os.ReadFile(dir + "/pid")
	began := time.Now()
	stop()
	if took := time.Since(began); took > 2*time.Second {
		t.Errorf("the collector took %s to stop", took)
	}
	var pid int
	if _, err := fmt.Sscan(string(b), &pid); err != nil {
		t.Fatal(err)
	}
	waitGone(t, pid)
	if r := p.results("k"); len(r) != 0 {
		t.Errorf("a run cut short by shutdown was posted: %+v", r)
	}
}

func TestMetadataRefusedBatchIsDropped(t *testing.T) {
	c := newMetadataCollector(discardLogger(), posterFunc(func(context.Context, codersdk.PostAgentMetadataRequest) error {
		return &codersdk.Error{StatusCode: 400, Response: codersdk.Response{Message: "unknown key"}}
	}), execEnv{}, nil, time.Second)
	c.pending["k"] = codersdk.AgentMetadataResult{Value: "v"}
	c.flush(context.Background())
	if len(c.pending) != 0 {
		t.Errorf("a refused batch was kept: %v", c.pending)
	}
	c.poster = posterFunc(func(context.Context, codersdk.PostAgentMetadataRequest) error {
		return errors.New("connection refused")
	})
	c.pending["k"] = codersdk.AgentMetadataResult{Value: "v"}
	c.flush(context.Background())
	if c.pending["k"].Value != "v" {
		t.Errorf("a batch coderd could not take was dropped")
	}
}

type posterFunc func(context.Context, codersdk.PostAgentMetadataRequest) error

func (f posterFunc) PostAgentMetadata(ctx context.Context, req codersdk.PostAgentMetadataRequest) error {
	return f(ctx, req)
}

func TestMetadataBatchesFitCoderdsLimit(t *testing.T) {
	var sizes []int
	c := newMetadataCollector(discardLogger(), posterFunc(func(_ context.Context, req codersdk.PostAgentMetadataRequest) error {
		sizes = append(sizes, len(req.Metadata))
		return nil
	}), execEnv{}, nil, time.Second)
	for i := range 300 {
		c.pending[fmt.Sprint("k", i)] = codersdk.AgentMetadataResult{Value: "v"}
	}
	c.flush(context.Background())
	if len(sizes) != 3 || sizes[0] != maxMetadataPerPost || sizes[0]+sizes[1]+sizes[2] != 300 {
		t.Errorf("posted batches of %v, want 300 results in batches of at most %d", sizes, maxMetadataPerPost)
	}
}
