package agent

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"airgapcoder/codersdk"
	"airgapcoder/internal/testrun"
	"airgapcoder/internal/testtier"
)

// fakeCoderd serves the agent endpoints of the codersdk contract from
// memory: a fixed manifest, and records of what the agent reports. (The
// tests in scripts_test.go do the same through the real coderd.)
type fakeCoderd struct {
	manifest codersdk.AgentManifest

	mu        sync.Mutex
	lifecycle []string
	logs      []codersdk.AgentLogInput
	metadata  []codersdk.AgentMetadataUpdate
	ports     []codersdk.PostAgentPortsRequest
	changed   chan struct{}

	// manifestFailures is how many manifest requests are answered 503
	// before the manifest; manifestRequests counts them all (under mu).
	manifestFailures, manifestRequests int
}

const fakeAgentToken = "fake-agent-token"

func newFakeCoderd(t *testing.T, m codersdk.AgentManifest) (*fakeCoderd, *codersdk.Client) {
	t.Helper()
	f := &fakeCoderd{manifest: m, changed: make(chan struct{})}
	mux := http.NewServeMux()
	record := func(path string, into func(json.RawMessage)) {
		mux.HandleFunc("POST /api/v2/workspaceagents/me/"+path, func(w http.ResponseWriter, r *http.Request) {
			var body json.RawMessage
			if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
				http.Error(w, `{"message":"bad body"}`, http.StatusBadRequest)
				return
			}
			f.mu.Lock()
			into(body)
			close(f.changed)
			f.changed = make(chan struct{})
			f.mu.Unlock()
			w.WriteHeader(http.StatusOK)
		})
	}
	record("lifecycle", func(b json.RawMessage) {
		var req codersdk.PostAgentLifecycleRequest
		_ = json.Unmarshal(b, &req)
		f.lifecycle = append(f.lifecycle, req.State)
	})
	record("logs", func(b json.RawMessage) {
		var req codersdk.PostAgentLogsRequest
		_ = json.Unmarshal(b, &req)
		f.logs = append(f.logs, req.Logs...)
	})
	record("metadata", func(b json.RawMessage) {
		var req codersdk.PostAgentMetadataRequest
		_ = json.Unmarshal(b, &req)
		f.metadata = append(f.metadata, req.Metadata...)
	})
	record("startup", func(json.RawMessage) {})
	record("ports", func(b json.RawMessage) {
		var req codersdk.PostAgentPortsRequest
		_ = json.Unmarshal(b, &req)
		f.ports = append(f.ports, req)
	})
	mux.HandleFunc("GET /api/v2/workspaceagents/me/manifest", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.manifestRequests++
		fail := f.manifestRequests <= f.manifestFailures
		f.mu.Unlock()
		if fail {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"message":"coderd is starting"}`))
			return
		}
		_ = json.NewEncoder(w).Encode(f.manifest)
	})
	mux.HandleFunc("GET /api/v2/workspaceagents/me/connect", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(`{"message":"no relay in this fake"}`))
	})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(codersdk.SessionTokenHeader) != fakeAgentToken {
			http.Error(w, `{"message":"bad token"}`, http.StatusUnauthorized)
			return
		}
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	c := codersdk.New(u)
	c.SessionToken = fakeAgentToken
	return f, c
}

// waitFor waits until cond holds on what the agent reported.
func (f *fakeCoderd) waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		f.mu.Lock()
		ok, changed := cond(), f.changed
		f.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-changed:
		case <-deadline.C:
			f.mu.Lock()
			defer f.mu.Unlock()
			t.Fatalf("not within %s: %s; lifecycle %v, logs %+v, metadata %+v", timeout, what, f.lifecycle, f.logs, f.metadata)
		}
	}
}

// logged reports whether source logged line (call with f.mu held).
func (f *fakeCoderd) logged(source, line string) bool {
	return slices.ContainsFunc(f.logs, func(l codersdk.AgentLogInput) bool { return l.Source == source && l.Output == line })
}

// runAgent runs an agent against c until the test ends; stop cancels it and
// waits for Run to return.
func runAgent(t *testing.T, c *codersdk.Client, opts Options) (stop func()) {
	t.Helper()
	opts.Client, opts.Logger, opts.PortsInterval = c, discardLogger(), -1
	opts.ReconnectMin, opts.ReconnectMax = 50*time.Millisecond, 200*time.Millisecond
	opts.LogFlushInterval, opts.MetadataFlushInterval = 50*time.Millisecond, 100*time.Millisecond
	dir := t.TempDir()
	opts.LogDir, opts.ScriptDataDir = filepath.Join(dir, "logs"), filepath.Join(dir, "data")
	a, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return testrun.Background(t, "agent", a.Run)
}

func TestAgentStartOutcomes(t *testing.T) {
	for _, tc := range []struct {
		name    string
		scripts []codersdk.AgentScript
		timeout time.Duration
		want    string
	}{
		{"no scripts", nil, 0, codersdk.AgentLifecycleReady},
		{"all succeed", []codersdk.AgentScript{
			{LogSourceID: "a", RunOnStart: true, Script: "true"},
			{LogSourceID: "b", RunOnStart: true, StartBlocksLogin: true, Script: "true"},
			{LogSourceID: "c", RunOnStop: true, Script: "exit 1"},
		}, 0, codersdk.AgentLifecycleReady},
		{"one fails", []codersdk.AgentScript{
			{LogSourceID: "a", RunOnStart: true, Script: "true"},
			{LogSourceID: "b", RunOnStart: true, Script: "exit 2"},
		}, 0, codersdk.AgentLifecycleStartError},
		{"one times out", []codersdk.AgentScript{{LogSourceID: "a", RunOnStart: true, TimeoutSeconds: 1, Script: "sleep 30"}}, 0,
			codersdk.AgentLifecycleStartTimeout},
		{"the agent's default timeout", []codersdk.AgentScript{{LogSourceID: "a", RunOnStart: true, Script: "sleep 30"}}, 300 * time.Millisecond,
			codersdk.AgentLifecycleStartTimeout},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f, c := newFakeCoderd(t, codersdk.AgentManifest{AgentID: "a1", Scripts: tc.scripts})
			runAgent(t, c, Options{StartupScriptTimeout: tc.timeout})
			want := []string{codersdk.AgentLifecycleStarting, tc.want}
			f.waitFor(t, 10*time.Second, "lifecycle "+tc.want, func() bool { return slices.Equal(f.lifecycle, want) })
		})
	}
}

func TestAgentShutdownRunsStopScripts(t *testing.T) {
	testtier.Heavy(t, "waits for two runs of a per-second cron schedule")
	dir := t.TempDir()
	f, c := newFakeCoderd(t, codersdk.AgentManifest{
		AgentID: "a1", Directory: dir,
		Scripts: []codersdk.AgentScript{
			{LogSourceID: "start", DisplayName: "Startup Script", RunOnStart: true, Script: "echo started"},
			{LogSourceID: "stop", DisplayName: "Shutdown Script", RunOnStop: true, TimeoutSeconds: 10,
				Script: "sleep 0.3; echo stopped; echo $FROM_TEMPLATE > stopped"},
			{LogSourceID: "cron", DisplayName: "Tick", Cron: "* * * * * *", Script: "echo tick"},
		},
		Metadata:             []codersdk.AgentMetadataDescription{{Key: "load", Script: "echo 0.42", IntervalSeconds: 1}},
		EnvironmentVariables: map[string]string{"FROM_TEMPLATE": "yes"},
	})
	stop := runAgent(t, c, Options{})
	f.waitFor(t, 10*time.Second, "ready, the start script's output, two cron runs and a metadata value", func() bool {
		ticks := 0
		for _, l := range f.logs {
			if l.Source == "cron" && l.Output == "tick" {
				ticks++
			}
		}
		return slices.Equal(f.lifecycle, []string{codersdk.AgentLifecycleStarting, codersdk.AgentLifecycleReady}) &&
			f.logged("start", "started") && ticks >= 2 &&
			slices.ContainsFunc(f.metadata, func(m codersdk.AgentMetadataUpdate) bool { return m.Key == "load" && m.Result.Value == "0.42" })
	})
	f.mu.Lock()
	early := f.logged("stop", "stopped")
	f.mu.Unlock()
	if early {
		t.Fatal("the stop script ran before the agent shut down")
	}
	stop()
	// Run returned: the stop script ran to its end, its output went out,
	// and off came after shutting_down.
	if b, err := os.ReadFile(filepath.Join(dir, "stopped")); err != nil || string(b) != "yes\n" {
		t.Errorf("the stop script's file: %q, %v", b, err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if want := []string{codersdk.AgentLifecycleStarting, codersdk.AgentLifecycleReady, codersdk.AgentLifecycleShuttingDown, codersdk.AgentLifecycleOff}; !slices.Equal(f.lifecycle, want) {
		t.Errorf("lifecycle %v, want %v", f.lifecycle, want)
	}
	if !f.logged("stop", "stopped") {
		t.Errorf("the stop script's output did not reach coderd: %+v", f.logs)
	}
}
