package controlplane_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"airgapcoder/coderd/coderdtest"
	"airgapcoder/codersdk"
	"airgapcoder/controlplane"
	"airgapcoder/internal/testtier"
	"airgapcoder/internal/testwait"
)

// runServer starts a real `coder server` (controlplane.Server) and returns a client
// for it and a stop function that shuts it down gracefully and reports Run's
// result.
func runServer(t *testing.T, cfg controlplane.Config) (*codersdk.Client, func() error) {
	t.Helper()
	testtier.Heavy(t, "starts a control plane on PostgreSQL")
	if cfg.HTTPAddress == "" {
		cfg.HTTPAddress = "127.0.0.1:0"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	cfg.Version = "v1.2.3-test"
	srv, err := controlplane.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	select {
	case <-srv.Ready():
	case err := <-done:
		cancel()
		t.Fatalf("server exited before ready: %v", err)
	case <-time.After(2 * time.Minute):
		cancel()
		t.Fatal("server not ready after 2m")
	}
	var once sync.Once
	var runErr error
	stop := func() error {
		once.Do(func() {
			cancel()
			select {
			case runErr = <-done:
			case <-time.After(time.Minute):
				runErr = errors.New("server did not stop within a minute")
			}
		})
		return runErr
	}
	t.Cleanup(func() { _ = stop() })
	u, _ := url.Parse(srv.URLs()[0])
	return codersdk.New(u), stop
}

func builtinConfig(t *testing.T) controlplane.Config {
	dir := t.TempDir()
	// The built-in PostgreSQL runs as an unprivileged user when tests run as
	// root: let it reach the folder.
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return controlplane.Config{
		ConfigDir: filepath.Join(dir, "config"), CacheDir: filepath.Join(dir, "cache"),
		ProvisionerPSK: "test-psk", JobHeartbeatTimeout: 2 * time.Second,
	}
}

func login(t *testing.T, c *codersdk.Client, email string) *codersdk.Client {
	t.Helper()
	resp, err := c.LoginWithPassword(context.Background(), codersdk.LoginWithPasswordRequest{Email: email, Password: coderdtest.FirstUserPassword})
	if err != nil {
		t.Fatalf("log in %s: %v", email, err)
	}
	out := codersdk.New(c.URL)
	out.SessionToken = resp.SessionToken
	return out
}

func pskClient(c *codersdk.Client) *codersdk.Client {
	out := codersdk.New(c.URL)
	out.ProvisionerPSK = "test-psk"
	return out
}

func waitStatus(t *testing.T, c *codersdk.Client, workspaceID string, want codersdk.WorkspaceStatus) codersdk.Workspace {
	t.Helper()
	var w codersdk.Workspace
	testwait.For(t, 15*time.Second, fmt.Sprintf("workspace status %s", want), func() (bool, string) {
		var err error
		w, err = c.Workspace(context.Background(), workspaceID)
		if err != nil {
			t.Fatal(err)
		}
		return w.LatestBuild.Status == want, fmt.Sprintf("workspace %s: status %s (job error %q)", w.Name, w.LatestBuild.Status, w.LatestBuild.Job.Error)
	})
	return w
}

// TestServerBuiltinPostgres is the control plane end to end on the built-in
// PostgreSQL: users, a template, workspaces through their transitions, the
// job queue under concurrent claimers, wake-up latency, the heartbeat
// deadline, and a restart that keeps everything.
// waitAcquiresWaiting waits until the gauge of daemons waiting in a
// long-poll acquire reads n on the metrics listener at addr.
func waitAcquiresWaiting(t *testing.T, addr string, n int) {
	t.Helper()
	want := fmt.Sprintf("coderd_provisionerd_acquires_waiting %d\n", n)
	testwait.For(t, 10*time.Second, "a daemon waiting in a long-poll acquire ("+strings.TrimSpace(want)+")", func() (bool, string) {
		_, body := coderdtest.Do(t, http.MethodGet, "http://"+addr+"/metrics", "", nil, "")
		return strings.Contains(string(body), want), "the gauge reads otherwise"
	})
}

func TestServerBuiltinPostgres(t *testing.T) {
	cfg := builtinConfig(t)
	cfg.Prometheus = controlplane.PrometheusConfig{Enable: true, Address: freeAddr(t)}
	anon, stop := runServer(t, cfg)
	ctx := context.Background()

	status, body := coderdtest.Do(t, http.MethodGet, anon.URL.String()+"/healthz", "", nil, "")
	if status != http.StatusOK || string(body) != "OK" {
		t.Fatalf("healthz: got %s, want 200 OK", coderdtest.String(status, body))
	}
	bi, err := anon.BuildInfo(ctx)
	if err != nil || bi.Version != "v1.2.3-test" || bi.Telemetry || bi.UpdateCheck {
		t.Fatalf("buildinfo: got %+v, %v", bi, err)
	}

	owner, _ := coderdtest.CreateFirstUser(t, anon)
	if _, err := owner.CreateUser(ctx, codersdk.CreateUserRequest{Email: "member@example.com", Username: "member", Password: coderdtest.FirstUserPassword}); err != nil {
		t.Fatal(err)
	}
	member := login(t, anon, "member@example.com")

	daemonA := coderdtest.NewDaemon(t, pskClient(anon), "daemon-a", nil)
	daemonB := coderdtest.NewDaemon(t, pskClient(anon), "daemon-b", nil)
	tpl := coderdtest.CreateTemplate(t, owner, daemonA, "minimal", coderdtest.MinimalTemplate, nil)

	t.Run("Lifecycle", func(t *testing.T) {
		w, err := member.CreateWorkspace(ctx, codersdk.Me, codersdk.CreateWorkspaceRequest{TemplateID: tpl.ID, Name: "dev"})
		if err != nil {
			t.Fatal(err)
		}
		if w.LatestBuild.Status != codersdk.WorkspaceStatusPending || w.LatestBuild.BuildNumber != 1 {
			t.Fatalf("new workspace: got %s #%d, want pending #1", w.LatestBuild.Status, w.LatestBuild.BuildNumber)
		}
		job := daemonA.Acquire(t, 5*time.Second)
		if job == nil || job.WorkspaceID != w.ID || job.Transition != codersdk.WorkspaceTransitionStart || job.WorkspaceOwner != "member" {
			t.Fatalf("acquired %+v, want the start build of %s", job, w.ID)
		}
		waitStatus(t, member, w.ID, codersdk.WorkspaceStatusStarting)

		// Follow the logs while the daemon streams them.
		var got []string
		followed := make(chan error, 1)
		go func() {
			followed <- member.WorkspaceBuildLogs(ctx, w.LatestBuild.ID, 0, true, func(l codersdk.ProvisionerJobLog) error {
				got = append(got, l.Output)
				return nil
			})
		}()
		for _, line := range []string{"terraform init", "terraform apply"} {
			if _, err := daemonA.Client.UpdateJob(ctx, daemonA.ID, job.JobID, codersdk.UpdateJobRequest{Logs: []codersdk.ProvisionerJobLogInput{
				{CreatedAt: time.Now(), Source: codersdk.LogSourceProvisioner, Level: codersdk.LogLevelInfo, Stage: "Applying", Output: line},
			}}); err != nil {
				t.Fatal(err)
			}
		}
		daemonA.Complete(t, job.JobID, codersdk.CompleteJobRequest{
			State: []byte(`{"serial":1}`),
			Resources: []codersdk.ProvisionedResource{{Type: "terraform_data", Name: "ws", Agents: []codersdk.ProvisionedAgent{
				{Name: "main", Token: "6f1e2f3a-1d2b-4c5d-8e9f-0a1b2c3d4e5f", OperatingSystem: "linux", Architecture: "amd64"},
			}}},
		})
		select {
		case err := <-followed:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("log follow did not end when the job completed")
		}
		if strings.Join(got, "|") != "terraform init|terraform apply" {
			t.Fatalf("followed logs: got %q", got)
		}
		w = waitStatus(t, member, w.ID, codersdk.WorkspaceStatusRunning)
		if len(w.LatestBuild.Resources) != 1 || len(w.LatestBuild.Resources[0].Agents) != 1 || w.LatestBuild.Resources[0].Agents[0].Status != "connecting" {
			t.Fatalf("resources: got %+v, want one resource with one connecting agent", w.LatestBuild.Resources)
		}

		// Stop: the daemon gets the previous build's state.
		b, err := member.CreateWorkspaceBuild(ctx, w.ID, codersdk.CreateWorkspaceBuildRequest{Transition: codersdk.WorkspaceTransitionStop})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := member.CreateWorkspaceBuild(ctx, w.ID, codersdk.CreateWorkspaceBuildRequest{Transition: codersdk.WorkspaceTransitionStart}); !codersdk.IsStatus(err, http.StatusConflict) {
			t.Fatalf("second build while one is pending: got %v, want 409", err)
		}
		job = daemonA.Acquire(t, 5*time.Second)
		if job == nil || string(job.State) != `{"serial":1}` || job.BuildNumber != 2 {
			t.Fatalf("stop job: got %+v, want build 2 with the previous state", job)
		}
		waitStatus(t, member, w.ID, codersdk.WorkspaceStatusStopping)
		daemonA.Complete(t, job.JobID, codersdk.CompleteJobRequest{State: []byte(`{"serial":2}`)})
		waitStatus(t, member, w.ID, codersdk.WorkspaceStatusStopped)
		state, err := member.WorkspaceBuildState(ctx, b.ID)
		if err != nil || string(state) != `{"serial":2}` {
			t.Fatalf("state of build 2: got %q, %v", state, err)
		}

		// Cancel a pending build.
		b, err = member.CreateWorkspaceBuild(ctx, w.ID, codersdk.CreateWorkspaceBuildRequest{Transition: codersdk.WorkspaceTransitionStart})
		if err != nil {
			t.Fatal(err)
		}
		if err := member.CancelWorkspaceBuild(ctx, b.ID); err != nil {
			t.Fatal(err)
		}
		waitStatus(t, member, w.ID, codersdk.WorkspaceStatusCanceled)

		// Delete.
		if _, err := member.CreateWorkspaceBuild(ctx, w.ID, codersdk.CreateWorkspaceBuildRequest{Transition: codersdk.WorkspaceTransitionDelete}); err != nil {
			t.Fatal(err)
		}
		daemonA.RunOne(t)
		waitStatus(t, member, w.ID, codersdk.WorkspaceStatusDeleted)
		list, err := member.Workspaces(ctx, codersdk.WorkspaceFilter{Owner: codersdk.Me})
		if err != nil || list.Count != 0 {
			t.Fatalf("list after delete: got %d workspaces, %v; want 0", list.Count, err)
		}
	})

	t.Run("ConcurrentClaimersNeverShareAJob", func(t *testing.T) {
		const jobs = 30
		for i := range jobs {
			if _, err := member.CreateWorkspace(ctx, codersdk.Me, codersdk.CreateWorkspaceRequest{TemplateID: tpl.ID, Name: fmt.Sprintf("c%d", i)}); err != nil {
				t.Fatal(err)
			}
		}
		var mu sync.Mutex
		seen := map[string]string{}
		var dup []string
		var wg sync.WaitGroup
		for _, d := range []*coderdtest.Daemon{daemonA, daemonB} {
			for range 3 { // several concurrent claim loops per daemon
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						j, err := d.Client.AcquireJob(ctx, d.ID, 300*time.Millisecond)
						if err != nil {
							t.Error(err)
							return
						}
						if j == nil {
							return
						}
						mu.Lock()
						if prev, ok := seen[j.JobID]; ok {
							dup = append(dup, j.JobID+" by "+prev+" and "+d.ID)
						}
						seen[j.JobID] = d.ID
						mu.Unlock()
						if err := d.Client.CompleteJob(ctx, d.ID, j.JobID, codersdk.CompleteJobRequest{State: []byte("{}")}); err != nil {
							t.Error(err)
							return
						}
					}
				}()
			}
		}
		wg.Wait()
		if len(dup) > 0 || len(seen) != jobs {
			t.Fatalf("claimed %d distinct jobs (want %d), duplicates: %v", len(seen), jobs, dup)
		}
	})

	t.Run("WaitingClaimerWokenAtOnce", func(t *testing.T) {
		got := make(chan time.Time, 1)
		go func() {
			j, err := daemonB.Client.AcquireJob(ctx, daemonB.ID, 20*time.Second)
			if err != nil || j == nil {
				t.Errorf("acquire: %v, %v", j, err)
			}
			got <- time.Now()
		}()
		waitAcquiresWaiting(t, cfg.Prometheus.Address, 1) // the claimer found the queue empty and waits
		enqueued := time.Now()
		w, err := member.CreateWorkspace(ctx, codersdk.Me, codersdk.CreateWorkspaceRequest{TemplateID: tpl.ID, Name: "wake"})
		if err != nil {
			t.Fatal(err)
		}
		select {
		case at := <-got:
			if d := at.Sub(enqueued); d > time.Second {
				t.Fatalf("waiting claimer got the job %s after it was enqueued, want well under a second", d)
			}
			t.Logf("enqueue to claim: %s", at.Sub(enqueued))
		case <-time.After(10 * time.Second):
			t.Fatal("waiting claimer never got the job")
		}
		_ = w
	})

	t.Run("HeartbeatDeadlineFailsJob", func(t *testing.T) {
		w, err := member.CreateWorkspace(ctx, codersdk.Me, codersdk.CreateWorkspaceRequest{TemplateID: tpl.ID, Name: "hb"})
		if err != nil {
			t.Fatal(err)
		}
		var j *codersdk.AcquiredJob
		for j == nil || j.WorkspaceID != w.ID {
			if j != nil { // an older job: finish it
				daemonA.Complete(t, j.JobID, codersdk.CompleteJobRequest{})
			}
			j = daemonA.Acquire(t, 5*time.Second)
			if j == nil {
				t.Fatal("no job")
			}
		}
		// The daemon goes silent: no update for longer than the 2s deadline.
		w = waitStatus(t, member, w.ID, codersdk.WorkspaceStatusFailed)
		if !strings.Contains(w.LatestBuild.Job.Error, "heartbeat") {
			t.Fatalf("job error: got %q, want it to mention heartbeats", w.LatestBuild.Job.Error)
		}
		if _, err := daemonA.Client.UpdateJob(ctx, daemonA.ID, j.JobID, codersdk.UpdateJobRequest{}); !codersdk.IsStatus(err, http.StatusConflict) {
			t.Fatalf("late heartbeat: got %v, want 409", err)
		}
		// The next build works.
		if _, err := member.CreateWorkspaceBuild(ctx, w.ID, codersdk.CreateWorkspaceBuildRequest{Transition: codersdk.WorkspaceTransitionStart}); err != nil {
			t.Fatal(err)
		}
		daemonA.RunOne(t)
		waitStatus(t, member, w.ID, codersdk.WorkspaceStatusRunning)
	})

	// Metrics are on their own listener (--prometheus-address), never on
	// the public one.
	if status, _ := coderdtest.Do(t, http.MethodGet, anon.URL.String()+"/metrics", "", nil, ""); status != http.StatusNotFound {
		t.Errorf("/metrics on the public listener: got %d, want 404", status)
	}
	status, body = coderdtest.Do(t, http.MethodGet, "http://"+cfg.Prometheus.Address+"/metrics", "", nil, "")
	if status != http.StatusOK || !strings.Contains(string(body), `coderd_api_requests_processed_total{code="201",method="POST",path="/api/v2/users/first"} 1`) ||
		!strings.Contains(string(body), "coderd_provisionerd_jobs_acquired_total") {
		t.Fatalf("/metrics: got %d without the API and queue counters", status)
	}

	before, err := owner.Workspaces(ctx, codersdk.WorkspaceFilter{})
	if err != nil {
		t.Fatal(err)
	}
	// Graceful shutdown: a long-poll in flight when the signal comes still
	// gets its answer.
	inFlight := make(chan error, 1)
	go func() {
		j, err := daemonB.Client.AcquireJob(ctx, daemonB.ID, 1500*time.Millisecond)
		if err == nil && j != nil {
			err = fmt.Errorf("unexpected job %s", j.JobID)
		}
		inFlight <- err
	}()
	waitAcquiresWaiting(t, cfg.Prometheus.Address, 1) // the long-poll is in coderd before the signal
	if err := stop(); err != nil {
		t.Fatalf("graceful shutdown: %v", err)
	}
	if err := <-inFlight; err != nil {
		t.Fatalf("request in flight during shutdown: %v", err)
	}

	// Restart on the same global config dir: everything is still there.
	anon, _ = runServer(t, cfg)
	owner = login(t, anon, "admin@example.com")
	users, err := owner.Users(ctx)
	if err != nil || users.Count != 2 {
		t.Fatalf("users after restart: got %d, %v; want 2", users.Count, err)
	}
	if _, err := owner.TemplateByName(ctx, "default", "minimal"); err != nil {
		t.Fatalf("template after restart: %v", err)
	}
	after, err := owner.Workspaces(ctx, codersdk.WorkspaceFilter{})
	if err != nil || after.Count != before.Count || after.Count == 0 {
		t.Fatalf("workspaces after restart: got %d, want %d (err %v)", after.Count, before.Count, err)
	}
	for i := range after.Workspaces {
		if after.Workspaces[i].ID != before.Workspaces[i].ID || after.Workspaces[i].LatestBuild.Status != before.Workspaces[i].LatestBuild.Status {
			t.Fatalf("workspace %d after restart: got %s %s, want %s %s", i, after.Workspaces[i].Name, after.Workspaces[i].LatestBuild.Status,
				before.Workspaces[i].Name, before.Workspaces[i].LatestBuild.Status)
		}
	}
}

// TestServerExternalPostgres runs the server against --postgres-url: the
// Debian PostgreSQL that make test starts on loopback (or the test's own
// cluster when run alone), never its built-in one.
func TestServerExternalPostgres(t *testing.T) {
	dir := t.TempDir()
	dbURL := coderdtest.NewDatabase(t)
	anon, stop := runServer(t, controlplane.Config{PostgresURL: dbURL, ConfigDir: filepath.Join(dir, "config")})
	ctx := context.Background()
	if _, err := anon.CreateFirstUser(ctx, codersdk.CreateFirstUserRequest{Email: "admin@example.com", Username: "admin", Password: coderdtest.FirstUserPassword}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "config", "postgres")); !os.IsNotExist(err) {
		t.Fatalf("with --postgres-url the built-in PostgreSQL must not run, but %s exists (%v)", filepath.Join(dir, "config", "postgres"), err)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	// Migrations are safe to run twice: a second start over the same database.
	anon, _ = runServer(t, controlplane.Config{PostgresURL: dbURL, ConfigDir: filepath.Join(dir, "config")})
	if has, err := anon.HasFirstUser(ctx); err != nil || !has {
		t.Fatalf("first user after restart: %v, %v", has, err)
	}
}
