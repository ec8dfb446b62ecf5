package coderd_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"runtime"
	"strings"
	"testing"

	"airgapcoder/coderd"
	"airgapcoder/coderd/coderdtest"
	"airgapcoder/codersdk"
	"airgapcoder/internal/logring"
)

// debugEndpoints are the owners' diagnostics; each must answer 403 to a
// member.
var debugEndpoints = map[string]func(context.Context, *codersdk.Client) error{
	"logs":      func(ctx context.Context, c *codersdk.Client) error { _, err := c.DebugLogs(ctx); return err },
	"system":    func(ctx context.Context, c *codersdk.Client) error { _, err := c.DebugSystem(ctx); return err },
	"postgres":  func(ctx context.Context, c *codersdk.Client) error { _, err := c.DebugPostgres(ctx); return err },
	"appliance": func(ctx context.Context, c *codersdk.Client) error { _, err := c.DebugAppliance(ctx); return err },
}

// TestDebugOwnersOnly: a member gets 403 from every debug endpoint, and a
// plain coder server (no appliance, no log ring) answers 404 where it has
// nothing to say.
func TestDebugOwnersOnly(t *testing.T) {
	d := coderdtest.New(t, coderdtest.Options{})
	owner, _ := d.CreateFirstUser(t)
	member, _ := d.CreateUser(t, owner, "member")
	ctx := context.Background()
	for name, get := range debugEndpoints {
		if err := get(ctx, member); !codersdk.IsStatus(err, http.StatusForbidden) {
			t.Errorf("%s as a member: got %v, want 403", name, err)
		}
		want := http.StatusOK
		if name == "logs" || name == "appliance" {
			want = http.StatusNotFound
		}
		if err := get(ctx, owner); want == http.StatusOK && err != nil || want != http.StatusOK && !codersdk.IsStatus(err, want) {
			t.Errorf("%s as the owner of a plain server: got %v, want %d", name, err, want)
		}
	}
}

// TestDebugPostgres: the owner reads the server's version, pg_settings
// and the largest tables of the deployment's database.
func TestDebugPostgres(t *testing.T) {
	d := coderdtest.New(t, coderdtest.Options{})
	owner, _ := d.CreateFirstUser(t)
	r, err := owner.DebugPostgres(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if r.ServerVersion == "" || !strings.Contains(r.Version, "PostgreSQL") || r.Database == "" || r.DatabaseSize <= 0 || r.StartedAt.IsZero() {
		t.Errorf("server: got version %q (%q), database %q of %d bytes, started %s", r.ServerVersion, r.Version, r.Database, r.DatabaseSize, r.StartedAt)
	}
	if r.Connections["active"] < 1 {
		t.Errorf("connections: got %v, want at least this one active", r.Connections)
	}
	settings := map[string]codersdk.PostgresSetting{}
	for _, s := range r.Settings {
		settings[s.Name] = s
	}
	if s := settings["max_connections"]; s.Setting == "" || s.Source == "" {
		t.Errorf("max_connections: got %+v in %d settings", s, len(r.Settings))
	}
	if s := settings["shared_buffers"]; s.Unit == "" {
		t.Errorf("shared_buffers: got %+v, want a unit", s)
	}
	tables := map[string]codersdk.PostgresTable{}
	for i, tb := range r.Tables {
		tables[tb.Name] = tb
		if i > 0 && tb.TotalBytes > r.Tables[i-1].TotalBytes {
			t.Errorf("tables: %s (%d bytes) after %s (%d bytes), want largest first", tb.Name, tb.TotalBytes, r.Tables[i-1].Name, r.Tables[i-1].TotalBytes)
		}
	}
	if tb, ok := tables["users"]; !ok || tb.TotalBytes <= 0 || tb.Schema == "" {
		t.Errorf("tables: got users %+v in %d tables", tb, len(r.Tables))
	}
}

// TestDebugSystem: the owner reads this process's memory and the host's.
func TestDebugSystem(t *testing.T) {
	d := coderdtest.New(t, coderdtest.Options{})
	owner, _ := d.CreateFirstUser(t)
	r, err := owner.DebugSystem(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if r.PID != os.Getpid() || r.OS != runtime.GOOS || r.CPUs < 1 || r.Goroutines < 1 || r.Process.HeapAlloc == 0 || r.Process.Sys < r.Process.HeapAlloc || r.StartedAt.IsZero() {
		t.Errorf("process: got %+v", r)
	}
	if runtime.GOOS == "linux" && (r.HostMemory == nil || r.HostMemory.Total <= 0 || r.HostMemory.Used <= 0 || r.HostMemory.Used > r.HostMemory.Total) {
		t.Errorf("host memory: got %+v (errors %q)", r.HostMemory, r.Errors)
	}
}

// TestDebugLogs: the owner reads the ring's lines, oldest first and
// redacted; the header says how many were dropped.
func TestDebugLogs(t *testing.T) {
	d := coderdtest.New(t, coderdtest.Options{})
	owner, _ := d.CreateFirstUser(t)
	member, _ := d.CreateUser(t, owner, "member")
	ring := logring.New(3)
	log := slog.New(logring.NewHandler(slog.DiscardHandler, ring, nil))
	u := withRecentLogs(t, d, ring)
	log.With("component", "api").Info("first", "n", 1)
	log.Info("second", "psk", "planted-psk-in-a-log")
	log.Info("third")
	log.Info("fourth", "url", "postgres://coder:planted-password@db/coder")

	status, body := coderdtest.Do(t, http.MethodGet, u+"/api/v2/debug/logs", owner.SessionToken, nil, "")
	if status != http.StatusOK {
		t.Fatalf("GET /api/v2/debug/logs: %s", coderdtest.String(status, body))
	}
	lines := strings.Split(strings.TrimSuffix(string(body), "\n"), "\n")
	if len(lines) != 3 || !strings.Contains(lines[0], "INFO  second psk=[redacted]") || !strings.Contains(lines[2], "fourth url=postgres://coder:[redacted]@db/coder") {
		t.Errorf("got lines %q", lines)
	}
	if strings.Contains(string(body), "planted") {
		t.Errorf("the logs hold a planted secret:\n%s", body)
	}
	resp, err := http.Get(u + "/api/v2/debug/logs")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("anonymous: got %d, want 401", resp.StatusCode)
	}
	if status, body := coderdtest.Do(t, http.MethodGet, u+"/api/v2/debug/logs", member.SessionToken, nil, ""); status != http.StatusForbidden {
		t.Errorf("member: %s, want 403", coderdtest.String(status, body))
	}
	req, _ := http.NewRequest(http.MethodGet, u+"/api/v2/debug/logs", nil)
	req.Header.Set(codersdk.SessionTokenHeader, owner.SessionToken)
	if resp, err = http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := resp.Header.Get("Coder-Log-Lines-Dropped"); got != "1" || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		t.Errorf("headers: got %q dropped, content type %q; want 1, text/plain", got, resp.Header.Get("Content-Type"))
	}
}

// withRecentLogs serves a second API over d's database whose RecentLogs
// is ring (coderdtest starts its API without one) and returns its URL.
// d's users and sessions work there too.
func withRecentLogs(t *testing.T, d *coderdtest.Deployment, ring *logring.Ring) string {
	t.Helper()
	srv := httptest.NewUnstartedServer(nil)
	u, _ := url.Parse("http://" + srv.Listener.Addr().String())
	api, err := coderd.New(context.Background(), coderd.Options{DB: d.DB, Logger: slog.New(slog.DiscardHandler), AccessURL: u, Version: "v0.0.0-test", RecentLogs: ring})
	if err != nil {
		t.Fatal(err)
	}
	srv.Config.Handler = api
	srv.Start()
	t.Cleanup(func() {
		api.Shutdown()
		srv.Close()
	})
	return u.String()
}

// TestDebugAppliance: the owner reads the appliance's overview with its
// manifest and settings.
func TestDebugAppliance(t *testing.T) {
	manifest := json.RawMessage(`{"schema":1,"name":"acme-coder","release":"2026.11.1"}`)
	d := coderdtest.New(t, coderdtest.Options{Appliance: func(context.Context) (codersdk.Appliance, error) {
		return codersdk.Appliance{Bundle: "acme-coder", Release: "2026.11.1", Manifest: manifest,
			Config: map[string]any{"postgres-url": "postgres://coder:[redacted]@db/coder"}}, nil
	}})
	owner, _ := d.CreateFirstUser(t)
	a, err := owner.DebugAppliance(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if a.Release != "2026.11.1" || !strings.Contains(string(a.Manifest), `"name":"acme-coder"`) || a.Config["postgres-url"] == nil {
		t.Errorf("got %+v", a)
	}
}
