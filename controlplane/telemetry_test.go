package controlplane_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"airgapcoder/coderd/coderdtest"
	"airgapcoder/codersdk"
	"airgapcoder/controlplane"
	"airgapcoder/internal/testwait"
)

// request is what a fake upstream received.
type request struct {
	method, path, contentType, userAgent string
	body                                 []byte
}

// fakeUpstream is an httptest server on loopback that records requests and
// answers each with status and body.
func fakeUpstream(t *testing.T, status int, body string) (*httptest.Server, <-chan request) {
	t.Helper()
	got := make(chan request, 16)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		select {
		case got <- request{r.Method, r.URL.Path, r.Header.Get("Content-Type"), r.Header.Get("User-Agent"), b}:
		default:
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	return srv, got
}

func nextRequest(t *testing.T, what string, got <-chan request) request {
	t.Helper()
	select {
	case r := <-got:
		return r
	case <-time.After(15 * time.Second):
		t.Fatalf("%s: no request within 15s", what)
		return request{}
	}
}

// snapshot is the telemetry body as the collector sees it.
type snapshot struct {
	DeploymentID string    `json:"deployment_id"`
	Version      string    `json:"version"`
	Time         time.Time `json:"time"`
	Users        int64     `json:"users"`
	Templates    int64     `json:"templates"`
	Workspaces   int64     `json:"workspaces"`
	OS           string    `json:"os"`
	Arch         string    `json:"arch"`
}

// nextSnapshot waits for a POST /snapshot and checks that it holds exactly
// the documented fields.
func nextSnapshot(t *testing.T, got <-chan request) snapshot {
	t.Helper()
	r := nextRequest(t, "telemetry collector", got)
	if r.method != http.MethodPost || r.path != "/snapshot" || r.contentType != "application/json" || r.userAgent != "coder/v1.2.3-test" {
		t.Fatalf("telemetry request: got %s %s (%s, %s), want POST /snapshot (application/json, coder/v1.2.3-test)", r.method, r.path, r.contentType, r.userAgent)
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(r.body, &fields); err != nil {
		t.Fatalf("snapshot %s: %v", r.body, err)
	}
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if want := []string{"arch", "deployment_id", "os", "templates", "time", "users", "version", "workspaces"}; !slices.Equal(keys, want) {
		t.Fatalf("snapshot fields: got %v, want exactly %v", keys, want)
	}
	for _, private := range []string{"admin", "example.com", "minimal", "dev"} {
		if strings.Contains(string(r.body), private) {
			t.Fatalf("snapshot %s contains %q", r.body, private)
		}
	}
	var s snapshot
	if err := json.Unmarshal(r.body, &s); err != nil {
		t.Fatal(err)
	}
	if s.DeploymentID == "" || s.Version != "v1.2.3-test" || s.OS == "" || s.Arch == "" || time.Since(s.Time) > time.Minute {
		t.Fatalf("snapshot: got %+v", s)
	}
	return s
}

// TestTelemetryAndUpdateCheck runs the server with telemetry and the update
// check on, both pointed at fakes on loopback: the collector gets a snapshot
// at start whose counts match the database, and /api/v2/updatecheck reports
// what the release feed serves.
func TestTelemetryAndUpdateCheck(t *testing.T) {
	t.Parallel()
	collector, snapshots := fakeUpstream(t, http.StatusNoContent, "")
	feed, feedRequests := fakeUpstream(t, http.StatusOK, `{"version": "v9.9.9", "url": "https://mirror.example.internal/coder/v9.9.9/"}`)
	cfg := controlplane.Config{
		PostgresURL: coderdtest.NewDatabase(t), ConfigDir: filepath.Join(t.TempDir(), "config"), ProvisionerPSK: "test-psk",
		Telemetry: true, TelemetryURL: collector.URL, UpdateCheck: true, UpdateCheckURL: feed.URL + "/coder/latest.json",
	}
	anon, stop := runServer(t, cfg)
	ctx := context.Background()

	bi, err := anon.BuildInfo(ctx)
	if err != nil || !bi.Telemetry || !bi.UpdateCheck {
		t.Fatalf("buildinfo: got %+v, %v; want telemetry and update_check true", bi, err)
	}
	first := nextSnapshot(t, snapshots)
	if first.Users != 0 || first.Templates != 0 || first.Workspaces != 0 {
		t.Fatalf("first snapshot on an empty deployment: got %d users, %d templates, %d workspaces; want 0 each", first.Users, first.Templates, first.Workspaces)
	}
	if r := nextRequest(t, "release feed", feedRequests); r.method != http.MethodGet || r.path != "/coder/latest.json" || r.userAgent != "coder/v1.2.3-test" {
		t.Fatalf("release feed request: got %s %s (%s)", r.method, r.path, r.userAgent)
	}

	// The update check needs a session.
	status, body := coderdtest.Do(t, http.MethodGet, anon.URL.String()+"/api/v2/updatecheck", "", nil, "")
	if status != http.StatusUnauthorized {
		t.Fatalf("updatecheck without a session: got %s, want 401", coderdtest.String(status, body))
	}
	owner, _ := coderdtest.CreateFirstUser(t, anon)
	var check struct {
		Current         string `json:"current"`
		Version         string `json:"version"`
		URL             string `json:"url"`
		UpdateAvailable bool   `json:"update_available"`
	}
	testwait.For(t, 10*time.Second, "updatecheck 200", func() (bool, string) {
		status, body = coderdtest.Do(t, http.MethodGet, anon.URL.String()+"/api/v2/updatecheck", owner.SessionToken, nil, "")
		return status == http.StatusOK, coderdtest.String(status, body)
	})
	if err := json.Unmarshal(body, &check); err != nil {
		t.Fatal(err)
	}
	if check.Version != "v9.9.9" || check.Current != "v1.2.3-test" || !check.UpdateAvailable || check.URL != "https://mirror.example.internal/coder/v9.9.9/" {
		t.Fatalf("updatecheck: got %+v, want v9.9.9 newer than v1.2.3-test with the feed's URL", check)
	}

	// One user, one template, one workspace; the next start reports them.
	daemon := coderdtest.NewDaemon(t, pskClient(anon), "telemetry-daemon", nil)
	tpl := coderdtest.CreateTemplate(t, owner, daemon, "minimal", coderdtest.MinimalTemplate, nil)
	if _, err := owner.CreateWorkspace(ctx, codersdk.Me, codersdk.CreateWorkspaceRequest{TemplateID: tpl.ID, Name: "dev"}); err != nil {
		t.Fatal(err)
	}
	daemon.RunOne(t)
	if err := stop(); err != nil {
		t.Fatalf("graceful shutdown: %v", err)
	}

	runServer(t, cfg)
	second := nextSnapshot(t, snapshots)
	if second.Users != 1 || second.Templates != 1 || second.Workspaces != 1 {
		t.Fatalf("snapshot after restart: got %d users, %d templates, %d workspaces; want 1 each", second.Users, second.Templates, second.Workspaces)
	}
	if second.DeploymentID != first.DeploymentID {
		t.Fatalf("deployment id changed across a restart: %q then %q", first.DeploymentID, second.DeploymentID)
	}
}

// TestTelemetryAndUpdateCheckNeedURL: turning either on without a URL is
// refused, with a message that says which flag to set: there is no default
// destination to fall back to.
func TestTelemetryAndUpdateCheckNeedURL(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  controlplane.Config
		want string
	}{
		{"Telemetry", controlplane.Config{Telemetry: true}, "--telemetry-url"},
		{"UpdateCheck", controlplane.Config{UpdateCheck: true}, "--update-check-url"},
		{"TelemetryWithUpdateCheckURL", controlplane.Config{Telemetry: true, UpdateCheck: true, UpdateCheckURL: "http://127.0.0.1:1/latest.json"}, "--telemetry-url"},
		{"UpdateCheckWithTelemetryURL", controlplane.Config{Telemetry: true, TelemetryURL: "http://127.0.0.1:1", UpdateCheck: true}, "--update-check-url"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.cfg.HTTPAddress = "127.0.0.1:0"
			tt.cfg.PostgresURL = "postgres://127.0.0.1:1/none"
			srv, err := controlplane.New(tt.cfg)
			if err == nil {
				t.Fatalf("New: got %v, want an error", srv)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("New: got %q, want it to name %s", err, tt.want)
			}
		})
	}
}
