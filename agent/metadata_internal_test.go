package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"airgapcoder/codersdk"
	"airgapcoder/internal/testrun"
	"airgapcoder/internal/testtier"
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

func TestMetadataIntervalWithoutOverlap(t *testing.T) {
	testtier.Heavy(t, "waits for runs of a 1 s metadata interval")
	p := newFakePoster(0)
	runCollector(t, p,
		codersdk.AgentMetadataDescription{Key: "count", Script: "echo x >> runs; wc -l < runs", IntervalSeconds: 1},
		// Slower than its interval: runs follow one another.
		codersdk.AgentMetadataDescription{Key: "slow", IntervalSeconds: 1, TimeoutSeconds: 5,
			Script: "if [ -e running ]; then echo OVERLAP; exit 1; fi; touch running; sleep 1.5; rm running; echo ok"},
	)
	began := time.Now()
	p.waitFor(t, 4*time.Second, "count", func(r []codersdk.AgentMetadataResult) bool {
		return len(r) > 0 && r[len(r)-1].Value == "3"
	})
	if took := time.Since(began); took < 1800*time.Millisecond {
		t.Errorf("three runs at a 1s interval took %s", took)
	}
	got := p.waitFor(t, 6*time.Second, "slow", func(r []codersdk.AgentMetadataResult) bool { return len(r) >= 2 })
	for _, r := range got {
		if r.Value != "ok" || r.Error != "" {
			t.Errorf("slow key: got %+v, want ok (no overlapping run)", r)
		}
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
