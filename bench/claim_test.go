package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"airgapcoder/coderd/coderdtest"
	"airgapcoder/coderd/database"
	"airgapcoder/codersdk"
)

// pollInterval is the fixed interval of the polling claimer that the
// LISTEN/NOTIFY long-poll is compared with.
const pollInterval = 100 * time.Millisecond

// settle lets the daemon that just finished a job get back into its
// long-poll before the next job is posted, so that N daemons really wait.
const settle = 10 * time.Millisecond

// BenchmarkJobClaimLatency measures the time from posting a workspace build
// through the API to a waiting daemon's long-poll acquire returning its job,
// with N daemons waiting. Side by side, in the same iterations, N polling
// claimers call database AcquireJob every pollInterval (phases evenly
// staggered, the best case for polling) for builds of a second workspace
// whose tags only they match. ns/op and p50_ms/p99_ms are the long-poll's;
// poll_* are the pollers'; notify_vs_poll_ratio is mean over mean (below 1,
// the long-poll is faster). post_p50_ms is the POST round trip, for scale:
// both latencies start when the POST is sent and include its commit.
func BenchmarkJobClaimLatency(b *testing.B) {
	for _, n := range []int{1, 4, 16} {
		b.Run(fmt.Sprintf("N=%d", n), func(b *testing.B) { benchmarkJobClaim(b, n) })
	}
}

func benchmarkJobClaim(b *testing.B, n int) {
	d, owner, _, psk := newPSKDeployment(b)
	notify := newClaimSide(b, owner, psk, "notify")
	poll := newClaimSide(b, owner, psk, "poll")

	// Registered after coderdtest.New, so run before the server stops.
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	b.Cleanup(func() { cancel(); wg.Wait() })

	for i := range n {
		dm := coderdtest.NewDaemon(b, psk, fmt.Sprintf("notify-%d", i), notify.tags)
		wg.Go(func() { notify.longPoll(ctx, dm) })
	}
	pollDB, err := database.Open(ctx, d.DatabaseURL)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pollDB.Close)
	for i := range n {
		dm := coderdtest.NewDaemon(b, psk, fmt.Sprintf("poll-%d", i), poll.tags)
		rec, err := d.DB.ProvisionerDaemonByID(ctx, dm.ID)
		if err != nil {
			b.Fatal(err)
		}
		phase := time.Duration(i) * pollInterval / time.Duration(n)
		wg.Go(func() { poll.poll(ctx, pollDB, dm, rec, phase) })
	}
	// Every claimer is waiting after this: a long-poll's open acquire and
	// a poller's first tick cannot be observed from here.
	time.Sleep(pollInterval + settle)

	transitions := []codersdk.WorkspaceTransition{codersdk.WorkspaceTransitionStop, codersdk.WorkspaceTransitionStart}
	i := 0
	for b.Loop() {
		tr := transitions[i%2]
		i++
		if err := notify.once(ctx, owner, tr); err != nil {
			b.Fatal(err)
		}
		// A random phase against the pollers' ticks: otherwise every post
		// lands at the same point after the tick that claimed the last job.
		time.Sleep(rand.N(pollInterval))
		if err := poll.once(ctx, owner, tr); err != nil {
			b.Fatal(err)
		}
		// The daemon that completed the job gets back into its long-poll
		// (settle): nothing tells when its acquire is open again.
		time.Sleep(settle)
	}

	nm, pm := mean(notify.latencies), mean(poll.latencies)
	b.ReportMetric(float64(nm.Nanoseconds()), "ns/op")
	b.ReportMetric(ms(percentile(notify.latencies, 50)), "p50_ms")
	b.ReportMetric(ms(percentile(notify.latencies, 99)), "p99_ms")
	b.ReportMetric(float64(pm.Nanoseconds()), "poll_ns/op")
	b.ReportMetric(ms(percentile(poll.latencies, 50)), "poll_p50_ms")
	b.ReportMetric(ms(percentile(poll.latencies, 99)), "poll_p99_ms")
	b.ReportMetric(float64(nm)/float64(pm), "notify_vs_poll_ratio")
	b.ReportMetric(ms(percentile(append(notify.posts, poll.posts...), 50)), "post_p50_ms")
	b.Logf("N=%d over %d jobs each: long-poll mean %s p50 %s p99 %s; poll every %s mean %s p50 %s p99 %s; notify_vs_poll_ratio %.3f",
		n, len(notify.latencies), nm, percentile(notify.latencies, 50), percentile(notify.latencies, 99),
		pollInterval, pm, percentile(poll.latencies, 50), percentile(poll.latencies, 99), float64(nm)/float64(pm))
}

// claim is a job a claimer got, or the error that stopped it.
type claim struct {
	jobID string
	at    time.Time
	err   error
}

// claimSide is one way of claiming jobs: its own template (tagged pool=name
// so that only its claimers match its jobs), one workspace, and the
// latencies measured so far.
type claimSide struct {
	name      string
	tags      map[string]string
	workspace string
	psk       *codersdk.Client
	claimed   chan claim
	completed chan error
	latencies []time.Duration
	// posts are the POST round trips, which the latencies include as far
	// as the commit (the API answers after it, so they overlap the claim).
	posts []time.Duration
}

func newClaimSide(tb testing.TB, owner, psk *codersdk.Client, name string) *claimSide {
	tb.Helper()
	tags := map[string]string{"pool": name}
	setup := coderdtest.NewDaemon(tb, psk, "setup-"+name, tags)
	tpl := coderdtest.CreateTemplate(tb, owner, setup, name, coderdtest.MinimalTemplate, tags)
	w, err := owner.CreateWorkspace(context.Background(), codersdk.Me, codersdk.CreateWorkspaceRequest{TemplateID: tpl.ID, Name: name})
	if err != nil {
		tb.Fatalf("create workspace %s: %v", name, err)
	}
	setup.RunOne(tb)
	return &claimSide{name: name, tags: tags, workspace: w.ID, psk: psk, claimed: make(chan claim, 1), completed: make(chan error, 1)}
}

// once posts a build and records how long until a claimer held its job, then
// waits for the claimer to complete it.
func (s *claimSide) once(ctx context.Context, owner *codersdk.Client, tr codersdk.WorkspaceTransition) error {
	start := time.Now()
	build, err := owner.CreateWorkspaceBuild(ctx, s.workspace, codersdk.CreateWorkspaceBuildRequest{Transition: tr})
	if err != nil {
		return fmt.Errorf("%s: post build: %w", s.name, err)
	}
	posted := time.Now()
	var c claim
	select {
	case c = <-s.claimed:
	case <-time.After(30 * time.Second):
		return fmt.Errorf("%s: job %s not claimed within 30s", s.name, build.Job.ID)
	}
	if c.err != nil {
		return fmt.Errorf("%s: %w", s.name, c.err)
	}
	if c.jobID != build.Job.ID {
		return fmt.Errorf("%s: claimed job %s, want %s", s.name, c.jobID, build.Job.ID)
	}
	s.latencies = append(s.latencies, c.at.Sub(start))
	s.posts = append(s.posts, posted.Sub(start))
	if err := <-s.completed; err != nil {
		return fmt.Errorf("%s: complete job %s: %w", s.name, c.jobID, err)
	}
	return nil
}

// handOver reports a claim and then completes the job through the API, as a
// daemon that finished its Terraform run would.
func (s *claimSide) handOver(ctx context.Context, daemonID string, c claim) {
	select {
	case s.claimed <- c:
	case <-ctx.Done():
		return
	}
	err := s.psk.CompleteJob(ctx, daemonID, c.jobID, codersdk.CompleteJobRequest{State: []byte(`{}`)})
	select {
	case s.completed <- err:
	case <-ctx.Done():
	}
}

// longPoll is a daemon of the product: it holds an acquire call open (woken
// by LISTEN/NOTIFY on the server) until ctx ends.
func (s *claimSide) longPoll(ctx context.Context, dm *coderdtest.Daemon) {
	for ctx.Err() == nil {
		j, err := s.psk.AcquireJob(ctx, dm.ID, time.Minute)
		at := time.Now()
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			s.handOver(ctx, dm.ID, claim{err: fmt.Errorf("acquire: %w", err)})
			return
		case j != nil:
			s.handOver(ctx, dm.ID, claim{jobID: j.JobID, at: at})
		}
	}
}

// poll is the alternative: a claimer that tries database AcquireJob every
// pollInterval, starting after phase.
func (s *claimSide) poll(ctx context.Context, db *database.DB, dm *coderdtest.Daemon, rec database.ProvisionerDaemon, phase time.Duration) {
	select {
	case <-time.After(phase):
	case <-ctx.Done():
		return
	}
	t := time.NewTicker(pollInterval)
	defer t.Stop()
	for {
		j, err := db.AcquireJob(ctx, rec.OrganizationID, dm.ID, rec.Tags)
		at := time.Now()
		switch {
		case ctx.Err() != nil:
			return
		case errors.Is(err, database.ErrNotFound):
		case err != nil:
			s.handOver(ctx, dm.ID, claim{err: fmt.Errorf("poll acquire: %w", err)})
			return
		default:
			s.handOver(ctx, dm.ID, claim{jobID: j.ID, at: at})
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		}
	}
}

func mean(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return sum / time.Duration(len(ds))
}

// percentile returns the nearest-rank p-th percentile.
func percentile(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (p*len(s)+99)/100 - 1
	return s[max(i, 0)]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
