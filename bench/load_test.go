package bench

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"airgapcoder/agent"
	"airgapcoder/coderd/coderdtest"
	"airgapcoder/codersdk"
	"airgapcoder/internal/testbin"
	"airgapcoder/internal/testport"
	"airgapcoder/internal/testprovider"
	"airgapcoder/internal/testwait"
)

// BenchmarkLoad200Agents is issue 15's load harness with 200 agents (see
// benchLoad; goals: RSS ≤ 300 MB, p99 ≤ 100 ms, no failed build, every
// agent connected).
//
//	go test ./bench/ -run '^$' -bench Load200Agents -benchtime 1x
func BenchmarkLoad200Agents(b *testing.B) { benchLoad(b, 200) }

// BenchmarkLoad5000Agents is issue 37's scale harness: benchLoad with
// 5,000 agents (goals: every agent connected within 120 s, peak RSS ≤
// 1024 MB, p99 ≤ 100 ms, no API error, no failed build, every agent back
// within 60 s of a SIGKILL).
//
//	go test ./bench/ -run '^$' -bench Load5000Agents -benchtime 1x -timeout 60m
func BenchmarkLoad5000Agents(b *testing.B) { benchLoad(b, 5000) }

// loadBuilds is how many workspaces benchLoad builds at once.
const loadBuilds = 50

// loadProfiles, when set, is a folder where benchLoad saves the server's
// profiles (go tool pprof reads them): goroutines and heap once every
// agent is connected (connected-*.pprof), a CPU profile of the first 20 s
// of the builds (builds-cpu.pprof), and goroutines and heap after them.
//
//	go test ./bench/ -run '^$' -bench Load5000Agents -benchtime 1x -args -load-profiles /tmp/load
var loadProfiles = flag.String("load-profiles", "", "folder to save the load benchmarks' server profiles in")

// benchLoad is the load harness, on loopback: the built `coder server`
// (its own process, so that its memory is its own) on PostgreSQL with 3
// built-in provisioners, and n workspaces (seeded by COPY) whose agents,
// the real agent code in this process, all start at once. It measures:
//
//   - connect-all-s: from the agents' start until every agent is recorded
//     connected in the database (connected_replica_id set since the start);
//   - during loadBuilds workspace builds at once, applied by real terraform,
//     API reads by four readers: api-p50-ms, api-p99-ms, api-errors (any
//     answer but 200) and failed-builds;
//   - server-peak-RSS-MB, and agents-connected (through the API) at the end;
//   - then the server is killed with SIGKILL and started again on the same
//     database: reconnect-all-s, from the kill until every agent has
//     connected to the new process, restart-s (until its /healthz answers),
//     and storm-api-errors and storm-api-p99-ms of the readers running
//     from /healthz answering until every agent is back.
//
// A phase that does not complete within its limit reports the limit and
// the count it reached instead of failing the benchmark, so that the
// table shows how far it got.
func benchLoad(b *testing.B, n int) {
	ctx := context.Background()
	f := newLoadFleet(b, n)
	srv, admin, pool, dir, u := f.srv, f.admin, f.pool, f.dir, f.srv.url

	began := startAgents(b, u, f.tokens, dir)
	connectLimit := max(2*time.Minute, time.Duration(n)*60*time.Millisecond)
	connectAll, got := waitAgentsConnected(b, pool, n, began, connectLimit)
	b.Logf("%d of %d agents connected in %s", got, n, connectAll.Round(time.Millisecond))
	goroutines := srv.goroutines(b)
	srv.saveProfiles(b, "connected")

	// loadBuilds builds at once on the built-in provisioners, with API reads.
	quick := coderdtest.UploadVersion(b, admin, "", map[string]string{"main.tf": `resource "terraform_data" "quick" {}` + "\n"}, nil)
	waitVersion(b, admin, quick.ID)
	qt, err := admin.CreateTemplate(ctx, "default", codersdk.CreateTemplateRequest{Name: "quick", TemplateVersionID: quick.ID})
	if err != nil {
		b.Fatal(err)
	}
	reads := startReaders(b, admin)
	var profiling sync.WaitGroup
	profiling.Go(func() {
		if err := srv.saveCPUProfile("builds-cpu", 20*time.Second); err != nil {
			b.Error(err)
		}
	})
	buildTime, failed := runBuilds(b, admin, qt.ID)
	latencies, apiErrors := reads.stop()
	profiling.Wait()
	srv.saveProfiles(b, "built")
	stillConnected := connectedThroughAPI(b, admin)
	rss, peak := procMemory(b, srv.cmd.Process.Pid)

	// The storm: SIGKILL, then the same server again on the same database.
	killed := time.Now()
	srv.kill()
	srv.start(b)
	restart := time.Since(killed)
	storm := startReaders(b, admin)
	reconnectAll, back := waitAgentsConnected(b, pool, n, killed, 3*time.Minute)
	stormLatencies, stormErrors := storm.stop()
	b.Logf("%d of %d agents back %s after the SIGKILL (server healthy after %s)", back, n, reconnectAll.Round(time.Millisecond), restart.Round(time.Millisecond))
	_, stormPeak := procMemory(b, srv.cmd.Process.Pid)

	b.ReportMetric(float64(stillConnected), "agents-connected")
	b.ReportMetric(connectAll.Seconds(), "connect-all-s")
	b.ReportMetric(float64(peak)/(1<<20), "server-peak-RSS-MB")
	b.ReportMetric(float64(rss)/(1<<20), "server-RSS-MB")
	b.ReportMetric(percentileMs(latencies, 0.5), "api-p50-ms")
	b.ReportMetric(percentileMs(latencies, 0.99), "api-p99-ms")
	b.ReportMetric(float64(goroutines)/float64(n), "server-goroutines/agent")
	b.ReportMetric(float64(len(latencies)), "api-requests")
	b.ReportMetric(float64(apiErrors), "api-errors")
	b.ReportMetric(float64(failed), "failed-builds")
	b.ReportMetric(buildTime.Seconds(), "builds-s")
	b.ReportMetric(float64(back), "agents-back")
	b.ReportMetric(reconnectAll.Seconds(), "reconnect-all-s")
	b.ReportMetric(restart.Seconds(), "restart-s")
	b.ReportMetric(float64(stormErrors), "storm-api-errors")
	b.ReportMetric(percentileMs(stormLatencies, 0.99), "storm-api-p99-ms")
	b.ReportMetric(float64(stormPeak)/(1<<20), "storm-peak-RSS-MB")
}

// startAgents starts an agent (the real code) for each token, all at
// once, until the benchmark ends, and returns when they started. Their
// warnings go to agents.log in dir.
func startAgents(b *testing.B, u *url.URL, tokens []string, dir string) time.Time {
	b.Helper()
	// The agents, each with the client a workspace's agent has, except
	// that they share one transport. Its idle connections are bounded:
	// this process and the server each hold 3 sockets per agent (the
	// relay connection and its 2 spares), 15,000 for 5,000 agents, under
	// a limit on open files that is 20,000 on the test machines; a
	// keep-alive connection per agent, as real agents in their own
	// processes would keep for the server's 2 minutes of IdleTimeout,
	// would not fit. The port scan is off: each agent would read this
	// process's whole /proc/net/tcp (every agent's sockets, n² in all),
	// where a real one sees its workspace's.
	agentLog, err := os.Create(filepath.Join(dir, "agents.log"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { agentLog.Close() })
	agentHTTP := &http.Client{Transport: &http.Transport{MaxIdleConns: 256, MaxIdleConnsPerHost: 256, IdleConnTimeout: 90 * time.Second}}
	agents := make([]*agent.Agent, len(tokens))
	for i, token := range tokens {
		c := codersdk.New(u)
		c.SessionToken = token
		c.HTTPClient = agentHTTP
		a, err := agent.New(agent.Options{Client: c, Version: "v0.0.0-load", PortsInterval: -1, KeepAliveInterval: 15 * time.Second,
			Logger: slog.New(slog.NewTextHandler(agentLog, &slog.HandlerOptions{Level: slog.LevelWarn})).With("agent", i), LogDir: filepath.Join(dir, "agents"), ScriptDataDir: filepath.Join(dir, "agents")})
		if err != nil {
			b.Fatal(err)
		}
		agents[i] = a
	}
	actx, stopAgents := context.WithCancel(context.Background())
	var running sync.WaitGroup
	b.Cleanup(func() { stopAgents(); running.Wait() })
	began := time.Now()
	for _, a := range agents {
		running.Go(func() { _ = a.Run(actx) })
	}
	return began
}

// loadServer is the built `coder server` benchLoad runs, started again on
// the same database and address after a kill; both processes log to
// server.log.
type loadServer struct {
	args  []string
	dir   string
	url   *url.URL
	pprof string // the server's --pprof-address
	log   *os.File
	cmd   *exec.Cmd
}

// loadFleet is benchLoad's server, started on a fresh database, with its
// owner and seeded agent workspaces whose agents are not started yet.
type loadFleet struct {
	srv    *loadServer
	admin  *codersdk.Client
	pool   *pgxpool.Pool // on the server's database
	dir    string        // the server's and the agents' folder
	tokens []string      // the seeded agents' tokens
}

// newLoadFleet starts benchLoad's server on a fresh database, creates its
// first user and seeds n agent workspaces.
func newLoadFleet(b *testing.B, n int) loadFleet {
	b.Helper()
	dir := b.TempDir()
	dbURL := coderdtest.NewDatabase(b)
	srv := newLoadServer(b, dir, dbURL)
	srv.start(b)
	admin := firstUser(b, srv.url)
	pool, err := pgxpool.New(context.Background(), dbURL)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	return loadFleet{srv: srv, admin: admin, pool: pool, dir: dir, tokens: seedAgentWorkspaces(b, admin, pool, n, dir)}
}

// firstUser creates the server's first user and returns a client logged
// in as them.
func firstUser(b *testing.B, u *url.URL) *codersdk.Client {
	b.Helper()
	ctx := context.Background()
	anon := codersdk.New(u)
	req := codersdk.CreateFirstUserRequest{Email: "admin@example.com", Username: "admin", Password: coderdtest.FirstUserPassword}
	if _, err := anon.CreateFirstUser(ctx, req); err != nil {
		b.Fatal(err)
	}
	login, err := anon.LoginWithPassword(ctx, codersdk.LoginWithPasswordRequest{Email: req.Email, Password: req.Password})
	if err != nil {
		b.Fatal(err)
	}
	admin := codersdk.New(anon.URL)
	admin.SessionToken = login.SessionToken
	admin.HTTPClient = loopbackClient
	return admin
}

// newLoadServer prepares the server's command line.
func newLoadServer(b *testing.B, dir, dbURL string) *loadServer {
	b.Helper()
	bin := testbin.Coder(b)
	addr, pprofAddr := testport.Addr(b), testport.Addr(b)
	args := []string{bin, "server", "--http-address", addr, "--postgres-url", dbURL, "--pprof-address", pprofAddr,
		"--provisioner-daemons", "3", "--provider-mirror", testprovider.Mirror(b), "--provisioner-daemon-psk", "psk",
		"--global-config", filepath.Join(dir, "config"), "--cache-dir", filepath.Join(dir, "cache"),
		// The reads are one token's, far over the default per-token
		// limit: this measures what the server can serve, not its limits.
		"--api-rate-limit", "0"}
	logf, err := os.OpenFile(filepath.Join(dir, "server.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { logf.Close() })
	u, _ := url.Parse("http://" + addr)
	return &loadServer{args: args, dir: dir, url: u, pprof: "http://" + pprofAddr + "/debug/pprof/", log: logf}
}

// start starts the server and waits for its /healthz.
func (s *loadServer) start(b *testing.B) {
	b.Helper()
	cmd := exec.Command(s.args[0], s.args[1:]...)
	cmd.Env = append(os.Environ(), "HOME="+s.dir)
	cmd.Stdout, cmd.Stderr = s.log, s.log
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	s.cmd = cmd
	b.Cleanup(s.kill)
	waitServer(b, s.url)
}

// kill ends the server with SIGKILL and reaps it; a second kill does
// nothing.
func (s *loadServer) kill() {
	if s.cmd == nil || s.cmd.ProcessState != nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	_ = s.cmd.Wait()
}

// profile fetches one of the server's profiles (path below /debug/pprof/).
func (s *loadServer) profile(path string) ([]byte, error) {
	resp, err := http.Get(s.pprof + path)
	if err != nil {
		return nil, fmt.Errorf("fetch profile %s: %w", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = errors.New(resp.Status)
	}
	if err != nil {
		return nil, fmt.Errorf("fetch profile %s: %w", path, err)
	}
	return body, nil
}

// goroutines is the server's goroutine count.
func (s *loadServer) goroutines(b *testing.B) int {
	b.Helper()
	p, err := s.profile("goroutine?debug=1")
	if err != nil {
		b.Fatal(err)
	}
	// The first line is "goroutine profile: total N".
	line, _, _ := strings.Cut(string(p), "\n")
	n, err := strconv.Atoi(strings.TrimPrefix(line, "goroutine profile: total "))
	if err != nil {
		b.Fatalf("read goroutine count from %q: %v", line, err)
	}
	return n
}

// saveProfiles saves the server's goroutine and heap profiles in
// -load-profiles as name-goroutine.pprof and name-heap.pprof.
func (s *loadServer) saveProfiles(b *testing.B, name string) {
	b.Helper()
	for _, p := range []string{"goroutine", "heap"} {
		if err := s.saveProfile(name+"-"+p, p); err != nil {
			b.Fatal(err)
		}
	}
}

// saveCPUProfile saves a CPU profile of the server's next d in
// -load-profiles as name.pprof.
func (s *loadServer) saveCPUProfile(name string, d time.Duration) error {
	return s.saveProfile(name, fmt.Sprintf("profile?seconds=%d", int(d.Seconds())))
}

// saveProfile saves the profile at path in -load-profiles as name.pprof;
// without -load-profiles it does nothing.
func (s *loadServer) saveProfile(name, path string) error {
	if *loadProfiles == "" {
		return nil
	}
	if err := os.MkdirAll(*loadProfiles, 0o755); err != nil {
		return err
	}
	p, err := s.profile(path)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(*loadProfiles, name+".pprof"), p, 0o644)
}

// seedAgentWorkspaces imports a template and copies n running workspaces
// of it into the database (seedWorkspaces' rows, 25 per user), each with
// one agent that has never connected, and returns the agents' tokens.
func seedAgentWorkspaces(b *testing.B, admin *codersdk.Client, pool *pgxpool.Pool, n int, dir string) []string {
	b.Helper()
	ctx := context.Background()
	psk := codersdk.New(admin.URL)
	psk.ProvisionerPSK = "psk"
	// The template's tag keeps the built-in daemons away from its import.
	tags := map[string]string{"load": "agents"}
	fake := coderdtest.NewDaemon(b, psk, "load", tags)
	tpl := coderdtest.CreateTemplate(b, admin, fake, "agents", coderdtest.MinimalTemplate, tags)
	f := fleet{template: tpl, versionID: tpl.ActiveVersionID}
	err := pool.QueryRow(ctx, `SELECT t.organization_id, t.created_by, j.file_id FROM templates t
		JOIN template_versions v ON v.id = t.active_version_id JOIN provisioner_jobs j ON j.id = v.job_id
		WHERE t.id = $1`, tpl.ID).Scan(&f.orgID, &f.ownerID, &f.fileID)
	if err != nil {
		b.Fatalf("load template %s: %v", tpl.ID, err)
	}
	rows := buildSeedRows(f, n, 25, time.Now())
	tokens := make([]string, n)
	for i, a := range rows.agents {
		tokens[i] = a[3].(string)
		a[6], a[7], a[9], a[10] = dir, "created", nil, nil // directory, lifecycle_state, never connected
	}
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		for _, t := range rows.tables() {
			if _, err := tx.CopyFrom(ctx, pgx.Identifier{t.name}, t.columns, pgx.CopyFromRows(t.rows)); err != nil {
				return fmt.Errorf("copy into %s: %w", t.name, err)
			}
		}
		_, err := tx.Exec(ctx, `ANALYZE users, organization_members, provisioner_jobs, workspaces,
			workspace_builds, workspace_resources, workspace_agents`)
		return err
	})
	if err != nil {
		b.Fatalf("seed %d agent workspaces: %v", n, err)
	}
	return tokens
}

// waitAgentsConnected waits until n agents are recorded connected in the
// database since since (a session that is up: last_connected_at at or
// after since, no disconnected_at), up to limit. It returns the time from
// since until then, or limit and the count reached.
func waitAgentsConnected(b *testing.B, pool *pgxpool.Pool, n int, since time.Time, limit time.Duration) (time.Duration, int) {
	b.Helper()
	for {
		var got int
		err := pool.QueryRow(context.Background(), `SELECT count(*) FROM workspace_agents
			WHERE last_connected_at >= $1 AND disconnected_at IS NULL`, since).Scan(&got)
		if err != nil {
			b.Fatalf("count connected agents: %v", err)
		}
		took := time.Since(since)
		if got >= n {
			return took, got
		}
		if took > limit {
			return limit, got
		}
		// Not testwait: the benchmark measures when the count reaches n
		// (at 250 ms resolution, one count query each, an even load on
		// PostgreSQL) and reports a shortfall at limit instead of failing.
		time.Sleep(250 * time.Millisecond)
	}
}

// connectedThroughAPI counts the agents the API lists as connected.
func connectedThroughAPI(b *testing.B, admin *codersdk.Client) int {
	b.Helper()
	ws, err := admin.Workspaces(context.Background(), codersdk.WorkspaceFilter{})
	if err != nil {
		b.Fatal(err)
	}
	n := 0
	for _, w := range ws.Workspaces {
		for _, r := range w.LatestBuild.Resources {
			for _, a := range r.Agents {
				if a.Status == codersdk.AgentStatusConnected {
					n++
				}
			}
		}
	}
	return n
}

// runBuilds creates loadBuilds workspaces of template at once and waits
// for their builds; it returns how long they took and how many failed.
func runBuilds(b *testing.B, admin *codersdk.Client, template string) (time.Duration, int) {
	b.Helper()
	ctx := context.Background()
	began := time.Now()
	ids := make([]string, loadBuilds)
	var creating sync.WaitGroup
	for i := range loadBuilds {
		creating.Go(func() {
			w, err := admin.CreateWorkspace(ctx, codersdk.Me, codersdk.CreateWorkspaceRequest{TemplateID: template, Name: fmt.Sprintf("build-%d", i)})
			if err != nil {
				b.Errorf("create workspace %d: %v", i, err)
				return
			}
			ids[i] = w.LatestBuild.ID
		})
	}
	creating.Wait()
	failed := 0
	for _, id := range ids {
		if id == "" {
			failed++
			continue
		}
		for {
			bd, err := admin.WorkspaceBuild(ctx, id)
			if err == nil && !bd.Job.Status.Active() {
				if bd.Job.Status != codersdk.ProvisionerJobSucceeded {
					failed++
				}
				break
			}
			if time.Since(began) > 10*time.Minute {
				b.Fatal("the builds did not finish within 10m")
			}
			// Not testwait: the builds' time is measured at 500 ms
			// resolution with one API call per poll; testwait's faster
			// first polls would add to the load being measured.
			time.Sleep(500 * time.Millisecond)
		}
	}
	return time.Since(began), failed
}

// percentileMs is the p-th percentile (0 to 1) of sorted, in milliseconds;
// 0 without samples.
func percentileMs(sorted []time.Duration, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	return float64(sorted[int(float64(len(sorted)-1)*p)].Microseconds()) / 1000
}

// waitServer waits for the server's /healthz.
func waitServer(b *testing.B, u *url.URL) {
	b.Helper()
	testwait.For(b, time.Minute, fmt.Sprintf("coder server at %s healthy", u), func() (bool, string) {
		resp, err := http.Get(u.String() + "/healthz")
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status
	})
}

// waitVersion waits until a template version's import succeeded.
func waitVersion(b *testing.B, c *codersdk.Client, id string) {
	b.Helper()
	testwait.For(b, 2*time.Minute, "template import", func() (bool, string) {
		v, err := c.TemplateVersion(context.Background(), id)
		if err != nil {
			return false, err.Error()
		}
		if v.Job.Status.Active() {
			return false, string(v.Job.Status)
		}
		if v.Job.Status != codersdk.ProvisionerJobSucceeded {
			b.Fatalf("template import: %s %s", v.Job.Status, v.Job.Error)
		}
		return true, ""
	})
}

// procMemory reads a process's resident memory now and at its peak.
func procMemory(b *testing.B, pid int) (rss, peak int64) {
	b.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		switch k {
		case "VmRSS":
			rss = kb << 10
		case "VmHWM":
			peak = kb << 10
		}
	}
	return rss, peak
}
