package bench

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"airgapcoder/coderd/coderdtest"
	"airgapcoder/codersdk"
	"airgapcoder/internal/testbin"
	"airgapcoder/internal/testwait"
)

// soakDuration is how long BenchmarkSoak runs its workload after the
// warm-up.
//
//	go test ./bench/ -run '^$' -bench Soak -benchtime 1x -timeout 20m -args -soak-duration 3m
var soakDuration = flag.Duration("soak-duration", 30*time.Minute, "how long BenchmarkSoak runs its workload after the warm-up")

// The soak's fleet and workload.
const (
	soakAgents = 1000
	// soakBurstLines is how many numbered lines each agent's startup
	// script writes at once; it then writes one more every
	// soakAgentLineEvery until the soak ends.
	soakBurstLines     = 20
	soakAgentLineEvery = 30 * time.Second
	// soakBuildLines is how many numbered lines every build writes (a
	// local-exec provisioner on create, another on destroy).
	soakBuildLines = 50
	soakBuildEvery = 15 * time.Second
	soakSSHWorkers = 2
	soakSSHEvery   = 2 * time.Second
	soakReadEvery  = time.Second
)

// What "no growth beyond noise" is, between the start (after the warm-up)
// and the end of the soak, both measured with the workload paused and
// after a garbage collection in the server.
const (
	soakMaxRSSGrowthPct       = 10
	soakMaxGoroutineGrowthPct = 2
)

// soakTemplate is the builds' template: one resource whose creation and
// destruction each echo soakBuildLines numbered lines, through terraform's
// local-exec, into the build's log.
var soakTemplate = fmt.Sprintf(`resource "terraform_data" "lines" {
  provisioner "local-exec" {
    command = "i=1; while [ $i -le %[1]d ]; do echo soak-build-line $i; i=$((i+1)); done"
  }
  provisioner "local-exec" {
    when    = destroy
    command = "i=1; while [ $i -le %[1]d ]; do echo soak-build-line $i; i=$((i+1)); done"
  }
}
`, soakBuildLines)

var (
	soakBuildLine = regexp.MustCompile(`soak-build-line (\d+)$`)
	soakAgentLine = regexp.MustCompile(`^soak-agent-line (\d+)$`)
)

// BenchmarkSoak is issue 37's soak: benchLoad's server and fleet (the
// built `coder server` with --pprof-address on PostgreSQL, soakAgents
// seeded workspaces whose real agents run in this process) under a steady
// workload for -soak-duration (default 30m) after a warm-up:
//
//   - every agent's startup script writes soakBurstLines numbered lines,
//     then one every soakAgentLineEvery until the soak ends;
//   - builds by real terraform, one at a time every soakBuildEvery: a new
//     workspace, then its deletion, each writing soakBuildLines numbered
//     lines, read back from GET /api/v2/workspacebuilds/{id}/logs;
//   - soakSSHWorkers sessions at a time, each every soakSSHEvery, through
//     the relay as users run them: OpenSSH with the built `coder ssh
//     --stdio` as ProxyCommand, running echo on a seeded agent in turn;
//   - a dashboard reading the workspace list and the user every second.
//
// It measures the server's RSS (after a GC) and goroutine count (the
// median of five samples) at the start, after the warm-up, and at the end,
// both with the workload paused, and fails when RSS grew more than
// soakMaxRSSGrowthPct, goroutines moved more than
// soakMaxGoroutineGrowthPct, or a line written by terraform or by an
// agent's script is missing from the API.
//
// With -load-profiles DIR it saves the server's goroutine and heap
// profiles at the start and the end (soak-start-*.pprof, soak-end-*.pprof)
// and its log (soak-server.log) there.
//
//	go test ./bench/ -run '^$' -bench Soak -benchtime 1x -timeout 60m
func BenchmarkSoak(b *testing.B) {
	soak := *soakDuration
	warmup := min(max(soak/10, 30*time.Second), 3*time.Minute)
	// The script's last line comes about when the soak ends.
	agentLines := soakBurstLines + 1 + int((warmup+soak)/soakAgentLineEvery)
	for b.Loop() {
		f := startSoakFleet(b, agentLines)
		w := startSoakWork(b, f)
		b.Logf("warming up for %s", warmup)
		w.waitFor(warmup)
		w.gate.Lock()
		start := f.srv.soakSample(b, "soak-start")
		w.gate.Unlock()
		b.Logf("start: RSS %d MB, %d goroutines; soaking for %s", start.rss>>20, start.goroutines, soak)
		w.waitFor(soak)
		w.stop()
		end := f.srv.soakSample(b, "soak-end")
		b.Logf("end: RSS %d MB, %d goroutines", end.rss>>20, end.goroutines)
		connected := connectedThroughAPI(b, f.admin)
		agentWritten, agentLost := f.agentLinesLost(b, agentLines)
		w.report(b, start, end, connected, agentWritten, agentLost)
		if *loadProfiles != "" {
			log, err := os.ReadFile(filepath.Join(f.dir, "server.log"))
			if err == nil {
				err = os.WriteFile(filepath.Join(*loadProfiles, "soak-server.log"), log, 0o644)
			}
			if err != nil {
				b.Errorf("keep the server's log: %v", err)
			}
		}
	}
}

// soakFleet is the server, its owner and the seeded agents, all connected.
type soakFleet struct {
	loadFleet
	env []string // the CLI's environment, logged in as the owner
}

// startSoakFleet starts benchLoad's server with soakAgents seeded
// workspaces, gives each agent a startup script writing lines numbered 1
// to lines, starts the agents and waits until all are connected.
func startSoakFleet(b *testing.B, lines int) *soakFleet {
	b.Helper()
	ctx := context.Background()
	f := newLoadFleet(b, soakAgents)
	// Each agent its own log source (so its own script folder and log file).
	script := fmt.Sprintf(`i=1; while [ $i -le %[1]d ]; do echo "soak-agent-line $i"; if [ $i -gt %[2]d ] && [ $i -lt %[1]d ]; then sleep %[3]d; fi; i=$((i+1)); done`,
		lines, soakBurstLines, int(soakAgentLineEvery.Seconds()))
	_, err := f.pool.Exec(ctx, `UPDATE workspace_agents SET scripts = jsonb_build_array(jsonb_build_object(
		'log_source_id', gen_random_uuid()::text, 'display_name', $1::text, 'script', $2::text,
		'run_on_start', true, 'run_on_stop', false, 'start_blocks_login', false, 'timeout_seconds', 0))
		WHERE lifecycle_state = 'created'`, codersdk.ScriptStartupDisplayName, script)
	if err != nil {
		b.Fatalf("give the agents a startup script: %v", err)
	}
	began := startAgents(b, f.srv.url, f.tokens, f.dir)
	took, got := waitAgentsConnected(b, f.pool, soakAgents, began, 3*time.Minute)
	if got < soakAgents {
		b.Fatalf("%d of %d agents connected within %s", got, soakAgents, took)
	}
	b.Logf("%d agents connected in %s", got, took.Round(time.Millisecond))
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + f.dir, "CODER_URL=" + f.srv.url.String(), "CODER_SESSION_TOKEN=" + f.admin.SessionToken}
	return &soakFleet{loadFleet: f, env: env}
}

// agentLinesLost waits (up to 3 minutes) until every agent's startup
// script has exited, then reads every agent's logs through the API and
// counts the numbered lines missing: it returns the lines written and
// lost.
func (f *soakFleet) agentLinesLost(b *testing.B, lines int) (written, lost int) {
	b.Helper()
	ctx := context.Background()
	testwait.For(b, 3*time.Minute, "every agent's startup script done", func() (bool, string) {
		var ready int
		if err := f.pool.QueryRow(ctx, `SELECT count(*) FROM workspace_agents WHERE lifecycle_state = 'ready'`).Scan(&ready); err != nil {
			return false, err.Error()
		}
		return ready >= soakAgents, fmt.Sprintf("%d of %d ready", ready, soakAgents)
	})
	rows, err := f.pool.Query(ctx, `SELECT id::text FROM workspace_agents ORDER BY id`)
	if err != nil {
		b.Fatal(err)
	}
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			b.Fatal(err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		b.Fatal(err)
	}
	for _, id := range ids {
		logs, err := f.admin.WorkspaceAgentLogs(ctx, id, 0)
		if err != nil {
			b.Fatalf("read agent %s's logs: %v", id, err)
		}
		seen := map[int]bool{}
		for _, l := range logs {
			if m := soakAgentLine.FindStringSubmatch(l.Output); m != nil {
				n, _ := strconv.Atoi(m[1])
				seen[n] = true
			}
		}
		written += lines
		lost += lines - countIn(seen, lines)
	}
	return written, lost
}

// countIn counts the numbers 1 to n in seen.
func countIn(seen map[int]bool, n int) int {
	c := 0
	for i := 1; i <= n; i++ {
		if seen[i] {
			c++
		}
	}
	return c
}

// soakSample is the server's size at one moment.
type soakSample struct {
	rss        int64
	heap       int64 // the Go heap in use (runtime.MemStats.HeapInuse)
	goroutines int
}

// heapInuse is the "# HeapInuse = N" line of a debug=1 heap profile.
var heapInuse = regexp.MustCompile(`(?m)^# HeapInuse = (\d+)$`)

// soakSample collects the server's garbage (pprof's heap?gc=1), then
// reads its RSS, its heap in use, and the median of five goroutine counts
// a second apart. With -load-profiles it saves the server's goroutine and
// heap profiles there as name-goroutine.pprof and name-heap.pprof.
func (s *loadServer) soakSample(b *testing.B, name string) soakSample {
	b.Helper()
	p, err := s.profile("heap?gc=1&debug=1")
	if err != nil {
		b.Fatal(err)
	}
	var heap int64
	if m := heapInuse.FindSubmatch(p); m != nil {
		heap, _ = strconv.ParseInt(string(m[1]), 10, 64)
	}
	rss, _ := procMemory(b, s.cmd.Process.Pid)
	s.saveProfiles(b, name)
	counts := []int{s.goroutines(b)}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for len(counts) < 5 {
		<-tick.C
		counts = append(counts, s.goroutines(b))
	}
	slices.Sort(counts)
	return soakSample{rss: rss, heap: heap, goroutines: counts[len(counts)/2]}
}

// soakWork is the soak's workload. Each iteration of a worker holds gate
// for reading, so that holding it for writing pauses the workload with
// nothing in flight.
type soakWork struct {
	f        *soakFleet
	template string
	coder    string
	gate     sync.RWMutex
	cancel   context.CancelFunc
	wg       sync.WaitGroup

	mu                sync.Mutex
	apiErrors         int // refused or failed API calls of the workload
	builds, failed    int
	buildLines, lost  int // numbered lines of the succeeded builds: written, missing
	sessions, sshFail int
	firstErrors       []string
}

// startSoakWork imports the builds' template and starts the workers.
func startSoakWork(b *testing.B, f *soakFleet) *soakWork {
	b.Helper()
	v := coderdtest.UploadVersion(b, f.admin, "", map[string]string{"main.tf": soakTemplate}, nil)
	waitVersion(b, f.admin, v.ID)
	tpl, err := f.admin.CreateTemplate(context.Background(), "default", codersdk.CreateTemplateRequest{Name: "soak", TemplateVersionID: v.ID})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &soakWork{f: f, template: tpl.ID, coder: testbin.Coder(b), cancel: cancel}
	b.Cleanup(w.stop)
	k := 0
	w.every(ctx, soakBuildEvery, func() { k++; w.buildCycle(k) })
	for worker := range soakSSHWorkers {
		i := worker
		w.every(ctx, soakSSHEvery, func() { w.sshSession(i % soakAgents); i += soakSSHWorkers })
	}
	w.every(ctx, soakReadEvery, w.read)
	return w
}

// every runs fn every d (or back to back when it takes longer) until ctx
// ends, each run holding the gate for reading.
func (w *soakWork) every(ctx context.Context, d time.Duration, fn func()) {
	w.wg.Go(func() {
		tick := time.NewTicker(d)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			w.gate.RLock()
			if ctx.Err() == nil {
				fn()
			}
			w.gate.RUnlock()
		}
	})
}

// waitFor lets the workload run for d.
func (w *soakWork) waitFor(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	<-t.C
}

// stop ends the workload once the iterations in flight are done.
func (w *soakWork) stop() {
	w.cancel()
	w.wg.Wait()
}

// fail counts an error of the workload and notes it.
func (w *soakWork) fail(counter *int, format string, args ...any) {
	w.mu.Lock()
	*counter++
	w.mu.Unlock()
	w.note(format, args...)
}

// note keeps the first few problems to log at the end.
func (w *soakWork) note(format string, args ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.firstErrors) < 20 {
		w.firstErrors = append(w.firstErrors, fmt.Sprintf(format, args...))
	}
}

// buildCycle creates workspace soak-k, waits for its build, deletes it and
// waits for that build, checking both builds' logs.
func (w *soakWork) buildCycle(k int) {
	ctx := context.Background()
	ws, err := w.f.admin.CreateWorkspace(ctx, codersdk.Me, codersdk.CreateWorkspaceRequest{TemplateID: w.template, Name: fmt.Sprintf("soak-%d", k)})
	if err != nil {
		w.fail(&w.apiErrors, "create workspace soak-%d: %v", k, err)
		return
	}
	if !w.checkBuild(ws.LatestBuild.ID) {
		return
	}
	bd, err := w.f.admin.CreateWorkspaceBuild(ctx, ws.ID, codersdk.CreateWorkspaceBuildRequest{Transition: codersdk.WorkspaceTransitionDelete})
	if err != nil {
		w.fail(&w.apiErrors, "delete workspace soak-%d: %v", k, err)
		return
	}
	w.checkBuild(bd.ID)
}

// checkBuild waits up to 5 minutes for a build and, when it succeeded,
// counts the numbered lines missing from its logs. It reports whether the
// build succeeded.
func (w *soakWork) checkBuild(id string) bool {
	ctx := context.Background()
	var status codersdk.ProvisionerJobStatus
	var jobErr string
	done := testwait.Until(5*time.Minute, func() bool {
		bd, err := w.f.admin.WorkspaceBuild(ctx, id)
		if err != nil {
			return false
		}
		status, jobErr = bd.Job.Status, bd.Job.Error
		return !status.Active()
	})
	w.mu.Lock()
	w.builds++
	w.mu.Unlock()
	if !done || status != codersdk.ProvisionerJobSucceeded {
		w.fail(&w.failed, "build %s: %s %s (done: %v)", id, status, jobErr, done)
		return false
	}
	seen := map[int]bool{}
	var odd []string // lines with a number that do not read as one line of the script's
	lines := 0
	err := w.f.admin.WorkspaceBuildLogs(ctx, id, 0, false, func(l codersdk.ProvisionerJobLog) error {
		lines++
		if m := soakBuildLine.FindStringSubmatch(l.Output); m != nil {
			n, _ := strconv.Atoi(m[1])
			seen[n] = true
		} else if strings.Contains(l.Output, "soak-build-line") && !strings.Contains(l.Output, "$i") {
			odd = append(odd, l.Output)
		}
		return nil
	})
	if err != nil {
		w.fail(&w.apiErrors, "read build %s's logs: %v", id, err)
	}
	found := countIn(seen, soakBuildLines)
	if found < soakBuildLines {
		var missing []int
		for i := 1; i <= soakBuildLines; i++ {
			if !seen[i] {
				missing = append(missing, i)
			}
		}
		w.note("build %s: lines %v of %d missing from its %d log lines; lines that do not match: %q", id, missing, soakBuildLines, lines, odd)
	}
	w.mu.Lock()
	w.buildLines += soakBuildLines
	w.lost += soakBuildLines - found
	w.mu.Unlock()
	return true
}

// sshSession runs `echo` on seeded agent i through OpenSSH with the built
// `coder ssh --stdio` as its ProxyCommand, as coder config-ssh sets it up.
func (w *soakWork) sshSession(i int) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	target := fmt.Sprintf("user-%05d/ws-%05d", i/25, i)
	want := fmt.Sprintf("soak-ssh-%d-%d", i, time.Now().UnixNano())
	cmd := exec.CommandContext(ctx, "ssh", "-F", "/dev/null",
		"-o", "ProxyCommand="+w.coder+" ssh --stdio "+target,
		"-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR",
		"coder.soak", "echo", want)
	cmd.Env = w.f.env
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	w.mu.Lock()
	w.sessions++
	w.mu.Unlock()
	if got := strings.TrimSpace(string(out)); err != nil || got != want {
		w.fail(&w.sshFail, "ssh %s: %v: got %q, want %q; %s", target, err, got, want, strings.TrimSpace(stderr.String()))
	}
}

// read is the dashboard: the first page of workspaces and the user.
func (w *soakWork) read() {
	for _, path := range []string{"/api/v2/workspaces?limit=25", "/api/v2/users/me"} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		resp, err := w.f.admin.Request(ctx, http.MethodGet, path, nil)
		if err != nil {
			cancel()
			w.fail(&w.apiErrors, "GET %s: %v", path, err)
			continue
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		cancel()
		if resp.StatusCode != http.StatusOK {
			w.fail(&w.apiErrors, "GET %s: %s", path, resp.Status)
		}
	}
}

// report reports the soak's metrics and fails the benchmark when the
// server grew beyond noise or a line was lost.
func (w *soakWork) report(b *testing.B, start, end soakSample, connected, agentLines, agentLost int) {
	b.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, e := range w.firstErrors {
		b.Log(e)
	}
	rssGrowth := 100 * float64(end.rss-start.rss) / float64(start.rss)
	goroutineGrowth := end.goroutines - start.goroutines
	goroutinePct := 100 * float64(goroutineGrowth) / float64(start.goroutines)
	b.Logf("RSS %d to %d MB (%+.1f%%), heap in use %d to %d MB, goroutines %d to %d (%+d); %d builds (%d failed), %d of %d build log lines lost; %d of %d agent log lines lost; %d ssh sessions (%d failed); %d errors; %d agents connected at the end",
		start.rss>>20, end.rss>>20, rssGrowth, start.heap>>20, end.heap>>20, start.goroutines, end.goroutines, goroutineGrowth,
		w.builds, w.failed, w.lost, w.buildLines, agentLost, agentLines, w.sessions, w.sshFail, w.apiErrors+w.failed+w.sshFail, connected)
	b.ReportMetric(float64(start.rss)/(1<<20), "start-RSS-MB")
	b.ReportMetric(float64(end.rss)/(1<<20), "end-RSS-MB")
	b.ReportMetric(rssGrowth, "rss-growth-pct")
	b.ReportMetric(float64(start.heap)/(1<<20), "start-heap-MB")
	b.ReportMetric(float64(end.heap)/(1<<20), "end-heap-MB")
	b.ReportMetric(float64(start.goroutines), "start-goroutines")
	b.ReportMetric(float64(end.goroutines), "end-goroutines")
	b.ReportMetric(float64(goroutineGrowth), "goroutine-growth")
	b.ReportMetric(goroutinePct, "goroutine-growth-pct")
	b.ReportMetric(float64(w.apiErrors+w.failed+w.sshFail), "errors")
	b.ReportMetric(float64(w.builds), "builds")
	b.ReportMetric(float64(w.failed), "failed-builds")
	b.ReportMetric(float64(w.buildLines), "build-log-lines")
	b.ReportMetric(float64(w.lost), "build-log-lines-lost")
	b.ReportMetric(float64(agentLines), "agent-log-lines")
	b.ReportMetric(float64(agentLost), "agent-log-lines-lost")
	b.ReportMetric(float64(w.sessions), "ssh-sessions")
	b.ReportMetric(float64(w.sshFail), "ssh-failed")
	b.ReportMetric(float64(connected), "agents-connected")
	if rssGrowth > soakMaxRSSGrowthPct {
		b.Errorf("server RSS grew %.1f%% (%d to %d MB), want at most %d%%", rssGrowth, start.rss>>20, end.rss>>20, soakMaxRSSGrowthPct)
	}
	if goroutinePct > soakMaxGoroutineGrowthPct || goroutinePct < -soakMaxGoroutineGrowthPct {
		b.Errorf("server goroutines went from %d to %d (%+.1f%%), want within ±%d%%", start.goroutines, end.goroutines, goroutinePct, soakMaxGoroutineGrowthPct)
	}
	if w.lost > 0 {
		b.Errorf("%d of %d build log lines lost", w.lost, w.buildLines)
	}
	if agentLost > 0 {
		b.Errorf("%d of %d agent log lines lost", agentLost, agentLines)
	}
}
