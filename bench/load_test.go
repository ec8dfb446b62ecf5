package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"airgapcoder/agent"
	"airgapcoder/coderd/coderdtest"
	"airgapcoder/codersdk"
	"airgapcoder/internal/testbin"
	"airgapcoder/internal/testport"
	"airgapcoder/internal/testprovider"
)

// BenchmarkLoad200Agents is issue 15's load harness, on loopback: the built
// `coder server` (its own process, so that its memory is its own) on
// PostgreSQL with 3 built-in provisioners; 200 agents (the real agent code,
// in this process) connected to it; then 50 workspace builds at once,
// applied by real terraform, while API reads run. It reports the server's
// peak RSS, API latency p50/p99 during the builds, failed builds and how
// many agents stayed connected (goals: RSS ≤ 300 MB, p99 ≤ 100 ms, no failed
// build, every agent connected).
//
//	go test ./bench/ -run '^$' -bench Load200Agents -benchtime 1x
func BenchmarkLoad200Agents(b *testing.B) {
	const agents, builds = 200, 50
	ctx := context.Background()
	bin := testbin.Coder(b)
	dir := b.TempDir()
	addr := testport.Addr(b)
	srv := exec.Command(bin, "server", "--http-address", addr, "--postgres-url", coderdtest.NewDatabase(b),
		"--provisioner-daemons", "3", "--provider-mirror", testprovider.Mirror(b), "--provisioner-daemon-psk", "psk",
		"--global-config", filepath.Join(dir, "config"), "--cache-dir", filepath.Join(dir, "cache"),
		// The reads below are one token's, far over the default per-token
		// limit: this measures what the server can serve, not its limits.
		"--api-rate-limit", "0")
	srv.Env = append(os.Environ(), "HOME="+dir)
	logf, err := os.Create(filepath.Join(dir, "server.log"))
	if err != nil {
		b.Fatal(err)
	}
	srv.Stdout, srv.Stderr = logf, logf
	if err := srv.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = srv.Process.Kill(); _ = srv.Wait() })
	u, _ := url.Parse("http://" + addr)
	waitServer(b, u)

	anon := codersdk.New(u)
	if _, err := anon.CreateFirstUser(ctx, codersdk.CreateFirstUserRequest{Email: "admin@example.com", Username: "admin", Password: coderdtest.FirstUserPassword}); err != nil {
		b.Fatal(err)
	}
	login, err := anon.LoginWithPassword(ctx, codersdk.LoginWithPasswordRequest{Email: "admin@example.com", Password: coderdtest.FirstUserPassword})
	if err != nil {
		b.Fatal(err)
	}
	admin := codersdk.New(u)
	admin.SessionToken = login.SessionToken

	// 200 workspaces with an agent each, built by a daemon this benchmark
	// drives (their template's tag keeps the built-in daemons away).
	psk := codersdk.New(u)
	psk.ProvisionerPSK = "psk"
	tags := map[string]string{"load": "agents"}
	fake := coderdtest.NewDaemon(b, psk, "load", tags)
	tpl := coderdtest.CreateTemplate(b, admin, fake, "agents", coderdtest.MinimalTemplate, tags)
	tokens := make([]string, agents)
	for i := range tokens {
		tokens[i] = uuid.NewString()
		if _, err := admin.CreateWorkspace(ctx, codersdk.Me, codersdk.CreateWorkspaceRequest{TemplateID: tpl.ID, Name: fmt.Sprintf("agent-%d", i)}); err != nil {
			b.Fatal(err)
		}
		j := fake.Acquire(b, 20*time.Second)
		if j == nil {
			b.Fatal("an agent workspace's build reached no daemon")
		}
		fake.Complete(b, j.JobID, codersdk.CompleteJobRequest{State: []byte(`{}`), Resources: []codersdk.ProvisionedResource{{
			Type: "terraform_data", Name: "ws", Agents: []codersdk.ProvisionedAgent{{Name: "main", Token: tokens[i], OperatingSystem: "linux", Architecture: "amd64", Directory: dir}},
		}}})
	}
	actx, stopAgents := context.WithCancel(ctx)
	var running sync.WaitGroup
	b.Cleanup(func() { stopAgents(); running.Wait() })
	for _, token := range tokens {
		c := codersdk.New(u)
		c.SessionToken = token
		a, err := agent.New(agent.Options{Client: c, Version: "v0.0.0-load", PortsInterval: time.Hour, KeepAliveInterval: 15 * time.Second,
			Logger: slog.New(slog.DiscardHandler), LogDir: filepath.Join(dir, "agents"), ScriptDataDir: filepath.Join(dir, "agents")})
		if err != nil {
			b.Fatal(err)
		}
		running.Go(func() { _ = a.Run(actx) })
	}
	connected := func() int {
		ws, err := admin.Workspaces(ctx, codersdk.WorkspaceFilter{})
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
	deadline := time.Now().Add(2 * time.Minute)
	for connected() < agents {
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d agents connected after 2m", connected(), agents)
		}
		time.Sleep(time.Second)
	}

	// 50 builds at once on the built-in provisioners, with API reads.
	quick := coderdtest.UploadVersion(b, admin, "", map[string]string{"main.tf": `resource "terraform_data" "quick" {}` + "\n"}, nil)
	waitVersion(b, admin, quick.ID)
	qt, err := admin.CreateTemplate(ctx, "default", codersdk.CreateTemplateRequest{Name: "quick", TemplateVersionID: quick.ID})
	if err != nil {
		b.Fatal(err)
	}
	var mu sync.Mutex
	var latencies []time.Duration
	apiErrors := 0
	readCtx, stopReads := context.WithCancel(ctx)
	var readers sync.WaitGroup
	for r := range 4 {
		readers.Go(func() {
			paths := []string{"/api/v2/workspaces?limit=25", "/api/v2/users/me", "/api/v2/organizations/default/templates", "/api/v2/buildinfo"}
			for i := 0; readCtx.Err() == nil; i++ {
				start := time.Now()
				resp, err := admin.Request(readCtx, http.MethodGet, paths[(i+r)%len(paths)], nil)
				if err != nil {
					if readCtx.Err() == nil {
						mu.Lock()
						apiErrors++
						mu.Unlock()
					}
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				mu.Lock()
				if resp.StatusCode != http.StatusOK {
					apiErrors++ // a refusal is not a latency
				} else {
					latencies = append(latencies, time.Since(start))
				}
				mu.Unlock()
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
	began := time.Now()
	ids := make([]string, builds)
	var creating sync.WaitGroup
	for i := range builds {
		creating.Go(func() {
			w, err := admin.CreateWorkspace(ctx, codersdk.Me, codersdk.CreateWorkspaceRequest{TemplateID: qt.ID, Name: fmt.Sprintf("build-%d", i)})
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
			time.Sleep(500 * time.Millisecond)
		}
	}
	buildTime := time.Since(began)
	stopReads()
	readers.Wait()
	stillConnected := connected()

	slices.Sort(latencies)
	pct := func(p float64) float64 {
		if len(latencies) == 0 {
			return 0
		}
		return float64(latencies[int(float64(len(latencies)-1)*p)].Microseconds()) / 1000
	}
	rss, peak := procMemory(b, srv.Process.Pid)
	b.ReportMetric(float64(peak)/(1<<20), "server-peak-RSS-MB")
	b.ReportMetric(float64(rss)/(1<<20), "server-RSS-MB")
	b.ReportMetric(pct(0.5), "api-p50-ms")
	b.ReportMetric(pct(0.99), "api-p99-ms")
	b.ReportMetric(float64(len(latencies)), "api-requests")
	b.ReportMetric(float64(apiErrors), "api-errors")
	b.ReportMetric(float64(failed), "failed-builds")
	b.ReportMetric(float64(stillConnected), "agents-connected")
	b.ReportMetric(buildTime.Seconds(), "builds-s")
}

// waitServer waits for the server's /healthz.
func waitServer(b *testing.B, u *url.URL) {
	b.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		resp, err := http.Get(u.String() + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			b.Fatalf("coder server at %s not healthy within a minute: %v", u, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitVersion waits until a template version's import succeeded.
func waitVersion(b *testing.B, c *codersdk.Client, id string) {
	b.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		v, err := c.TemplateVersion(context.Background(), id)
		if err == nil && !v.Job.Status.Active() {
			if v.Job.Status != codersdk.ProvisionerJobSucceeded {
				b.Fatalf("template import: %s %s", v.Job.Status, v.Job.Error)
			}
			return
		}
		if time.Now().After(deadline) {
			b.Fatal("template import did not finish within 2m")
		}
		time.Sleep(200 * time.Millisecond)
	}
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
