package supportbundle_test

import (
	"archive/zip"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"airgapcoder/appliance"
	"airgapcoder/certs"
	"airgapcoder/coderd"
	"airgapcoder/coderd/coderdtest"
	"airgapcoder/codersdk"
	"airgapcoder/internal/logring"
	"airgapcoder/internal/supportbundle"
)

// Secrets planted in the deployment, its appliance folder and its logs.
// None may appear in the bundle.
const (
	plantedPSK          = "planted-psk-0c9a7e51"
	plantedDBPassword   = "planted-db-password-7d2f"
	plantedBuildPass    = "planted-builder-pass-41aa"
	plantedAgentToken   = "planted-agent-token-93be"
	plantedRestartPass  = "planted-restart-pass-5e6f"
	plantedOIDCSecret   = "planted-oidc-secret-a8c1"
	plantedCookieSecret = "planted-cookie-b3d9"
)

// TestSupportBundleHoldsNoSecret builds a bundle, as the owner, over TLS,
// from a deployment that is an appliance (its overview read from a real
// appliance folder) with a log ring, after planting secrets everywhere: a
// provisioner PSK, a database password in postgres-url, in the manifest's
// upstream URLs and in a restart record, the owner's session token and an
// API token, the CA's and the server's private keys, the replica secret,
// and log lines carrying all of them as attributes, in URLs, as
// name=value and in headers. Every file, decompressed, is searched for
// each; the files docs/architecture.md lists must be there.
func TestSupportBundleHoldsNoSecret(t *testing.T) {
	ctx := context.Background()
	dir := applianceDir(t)
	d := coderdtest.New(t, coderdtest.Options{ProvisionerPSK: plantedPSK})
	owner, _ := d.CreateFirstUser(t)
	apiToken, err := owner.CreateToken(ctx, codersdk.Me, codersdk.CreateTokenRequest{Lifetime: time.Hour, TokenName: "support"})
	if err != nil {
		t.Fatal(err)
	}
	replicaSecret, err := d.DB.DeploymentValue(ctx, "replica_relay_secret", "unused")
	if err != nil {
		t.Fatal(err)
	}

	// The appliance's API over the same database: its overview, its log
	// ring, HTTPS.
	ring := logring.New(logring.DefaultSize)
	var journal bytes.Buffer
	log := slog.New(logring.NewHandler(slog.NewTextHandler(&journal, nil), ring, nil))
	srv := httptest.NewUnstartedServer(nil)
	u, _ := url.Parse("https://" + srv.Listener.Addr().String())
	api, err := coderd.New(ctx, coderd.Options{
		DB: d.DB, Logger: log.With("component", "coderd"), AccessURL: u, Version: "v0.0.0-test", ProvisionerPSK: plantedPSK,
		RecentLogs: ring, Appliance: func(ctx context.Context) (codersdk.Appliance, error) { return appliance.Overview(ctx, dir) },
	})
	if err != nil {
		t.Fatal(err)
	}
	srv.Config.Handler = api
	srv.StartTLS()
	t.Cleanup(func() { api.Shutdown(); srv.Close() })
	client := codersdk.New(u)
	client.HTTPClient = srv.Client()
	client.SessionToken = owner.SessionToken

	pgURL := "postgres://coder:" + plantedDBPassword + "@db.example.internal:5432/coder?sslmode=verify-full"
	sec := log.With("component", "provisionerd")
	sec.Info("daemon registered", "psk", plantedPSK, "provisioner_daemon_psk", plantedPSK)
	sec.Warn("registered with psk=" + plantedPSK + " from 10.0.0.5")
	log.Info("connect to the database", "url", pgURL, "postgres_url", pgURL)
	log.Error("agent request", "err", fmt.Errorf("GET https://coder.example/api/v2/workspaceagents/me/manifest?token=%s: 401", plantedAgentToken))
	log.Info("request", "header", "Coder-Session-Token: "+owner.SessionToken, "Cookie", "coder_session_token="+plantedCookieSecret)
	log.Info("token created", "token", apiToken.Key, "session_token", owner.SessionToken)
	log.Info("a line that quotes a token in free text: " + apiToken.Key + " and Authorization: Bearer " + owner.SessionToken)
	log.Info("oidc", "oidc_client_secret", plantedOIDCSecret, slog.Group("replica", "secret", replicaSecret))

	var buf bytes.Buffer
	names, err := supportbundle.Write(ctx, &buf, supportbundle.Options{Client: client, Now: func() time.Time { return time.Date(2026, 11, 23, 16, 0, 0, 0, time.UTC) }})
	if err != nil {
		t.Fatal(err)
	}
	files := unzip(t, buf.Bytes())
	if len(files) != len(names) {
		t.Errorf("Write named %d files, the archive holds %d", len(names), len(files))
	}
	for _, want := range []string{
		"buildinfo.json", "tls/chain.pem", "tls/connection.json", "health.json", "logs.txt", "system.json", "postgres.json",
		"appliance.json", "appliance/status.txt", "appliance/manifest.json", "appliance/config.json", "appliance/certificates.pem",
		"replicas.json", "audit.json",
	} {
		if _, ok := files[want]; !ok {
			t.Errorf("the bundle has no %s (errors.txt: %q)", want, files["errors.txt"])
		}
	}

	keyBody := func(file string) string {
		b, err := os.ReadFile(filepath.Join(certs.CertsDir(dir), file))
		if err != nil {
			t.Fatal(err)
		}
		return strings.Split(string(b), "\n")[1] // the first line of base64, not the armour
	}
	secrets := map[string]string{
		"provisioner PSK": plantedPSK, "database password": plantedDBPassword, "builder's password in the manifest": plantedBuildPass,
		"agent token": plantedAgentToken, "password in a restart record": plantedRestartPass, "OIDC client secret": plantedOIDCSecret,
		"cookie": plantedCookieSecret, "owner's session token": owner.SessionToken, "API token": apiToken.Key,
		"session token's secret": owner.SessionToken[11:], "replica secret": replicaSecret,
		"CA private key": keyBody("ca-key.pem"), "server private key": keyBody("server-key.pem"),
	}
	// The planted lines did reach the journal, so a miss below is the
	// bundle's doing.
	if !strings.Contains(journal.String(), plantedPSK) || !strings.Contains(journal.String(), owner.SessionToken) {
		t.Fatalf("the journal did not get the planted lines:\n%s", journal.String())
	}
	for name, content := range files {
		for what, secret := range secrets {
			if strings.Contains(content, secret) {
				t.Errorf("%s holds the %s %q", name, what, secret)
			}
		}
		if strings.Contains(content, "PRIVATE KEY") {
			t.Errorf("%s holds a private key", name)
		}
	}

	// What is there, redacted where it had to be.
	for _, c := range []struct{ file, want string }{
		{"logs.txt", "provisionerd: daemon registered psk=[redacted]"},
		{"logs.txt", "url=\"postgres://coder:[redacted]@db.example.internal:5432/coder?sslmode=verify-full\""},
		{"appliance/config.json", `"postgres-url": "postgres://coder:[redacted]@db.example.internal/coder"`},
		{"appliance/config.json", `"tls-address": "127.0.0.1:1"`},
		{"appliance/manifest.json", `"upstream": "https://builder:[redacted]@artifactory.example.internal/terraform/"`},
		{"appliance/status.txt", "restarted 2 times"},
		{"appliance/status.txt", "coderd"},
		{"appliance/certificates.pem", "-----BEGIN CERTIFICATE-----"},
		{"tls/chain.pem", "-----BEGIN CERTIFICATE-----"},
		{"tls/connection.json", `"version": "TLS 1.3"`},
		{"postgres.json", `"name": "max_connections"`},
		{"system.json", `"heap_alloc_bytes"`},
		{"health.json", `"name": "database"`},
	} {
		if !strings.Contains(files[c.file], c.want) {
			t.Errorf("%s does not hold %q:\n%s", c.file, c.want, head(files[c.file], 40))
		}
	}
	var a codersdk.Appliance
	if err := json.Unmarshal([]byte(files["appliance.json"]), &a); err != nil || a.Release != "2026.11.1" || len(a.Certificates) == 0 || a.DiskTotal <= 0 {
		t.Errorf("appliance.json: release %q, %d certificates, disk total %d, %v", a.Release, len(a.Certificates), a.DiskTotal, err)
	}
}

// TestSupportBundleAsMember: a member's bundle still writes, listing what
// a member may not read in errors.txt.
func TestSupportBundleAsMember(t *testing.T) {
	d := coderdtest.New(t, coderdtest.Options{})
	owner, _ := d.CreateFirstUser(t)
	member, _ := d.CreateUser(t, owner, "member")
	var buf bytes.Buffer
	if _, err := supportbundle.Write(context.Background(), &buf, supportbundle.Options{Client: member}); err != nil {
		t.Fatal(err)
	}
	files := unzip(t, buf.Bytes())
	if _, ok := files["buildinfo.json"]; !ok {
		t.Errorf("no buildinfo.json in %v", keys(files))
	}
	for _, want := range []string{"health.json: ", "logs.txt: ", "postgres.json: ", "system.json: ", "appliance.json: ", "tls/chain.pem: "} {
		if !strings.Contains(files["errors.txt"], want) {
			t.Errorf("errors.txt does not say why %s is missing:\n%s", strings.TrimSuffix(want, ": "), files["errors.txt"])
		}
	}
}

// applianceDir is an installed appliance folder, as far as the overview
// reads one: a current release with its manifest, appliance.yaml,
// certificates, a restart record. Nothing listens on its addresses.
func applianceDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	rel := filepath.Join(dir, "releases", "2026.11.1")
	if err := os.MkdirAll(rel, 0o755); err != nil {
		t.Fatal(err)
	}
	manifest := `{"schema": 1, "name": "acme-coder", "release": "2026.11.1", "build_time": "2026-11-20T10:00:00Z", "tool_version": "v2.0.0",
		"components": {"coder": [{"platform": "linux/amd64", "path": "bin/coder-linux-amd64", "version": "v2.0.0", "sha256": "aa"}],
			"providers": [{"source": "registry.terraform.io/coder/coder", "version": "2.1.0", "platforms": ["linux/amd64"],
				"upstream": "https://builder:` + plantedBuildPass + `@artifactory.example.internal/terraform/"}]},
		"files": []}`
	write := func(path, body string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(rel, "manifest.json"), manifest)
	if err := os.Symlink(filepath.Join("releases", "2026.11.1"), filepath.Join(dir, "current")); err != nil {
		t.Fatal(err)
	}
	write(filepath.Join(dir, appliance.ConfigFile), "tls-address: 127.0.0.1:1\nmirror-address: 127.0.0.1:2\nhttp-address: \"\"\n"+
		"postgres-url: postgres://coder:"+plantedDBPassword+"@db.example.internal/coder\n")
	write(filepath.Join(dir, "run", "restarts.json"), `{"postgres": {"restarts": 2, "last_error": "connect to postgres://coder:`+plantedRestartPass+`@127.0.0.1:5432/coder: refused", "at": "2026-11-23T15:00:00Z"}}`)
	if _, err := certs.Generate(dir, []string{"127.0.0.1", "localhost"}, certs.Options{}); err != nil {
		t.Fatal(err)
	}
	return dir
}

// unzip returns every file of a zip archive, decompressed, by name.
func unzip(t *testing.T, archive []byte) map[string]string {
	t.Helper()
	z, err := zip.NewReader(bytes.NewReader(archive), int64(len(archive)))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, f := range z.File {
		r, err := f.Open()
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(r)
		r.Close()
		if err != nil {
			t.Fatalf("%s: %v", f.Name, err)
		}
		out[f.Name] = string(b)
	}
	return out
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func head(s string, n int) string {
	lines := strings.Split(s, "\n")
	return strings.Join(lines[:min(n, len(lines))], "\n")
}
