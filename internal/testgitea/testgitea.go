// Package testgitea runs a real Gitea for tests: the site's Git server and
// an OpenID Connect provider at once. Gitea is built by
// scripts/install-deps.sh from its module (code.gitea.io/gitea at
// [Version]) into a cache folder, beside the templates/, options/ and
// public/ folders it reads from disk, and runs here on loopback over HTTPS
// with a certificate from a fresh test CA, on SQLite in the test's temporary
// folder, with an admin user whose API token the harness keeps. Gitea's
// frontend (scripts and styles built with npm) is not built: install-deps
// puts empty stand-ins in its place, and the pages tests use, the login and
// authorize forms, are plain HTML that works without it.
//
// The test sets Gitea up through its API: users ([Gitea.AddUser]),
// organizations and teams, which Gitea puts in the ID token's "groups"
// claim as "org" and "org:team" when the "groups" scope is asked for
// ([Gitea.AddOrg], [Gitea.AddTeam], [Gitea.AddTeamMember]), OAuth2
// applications ([Gitea.AddOAuthApp]), repositories ([Gitea.CreateRepo]) and
// personal access tokens ([Gitea.AddToken]). Users sign in on Gitea's own
// login page, from a real browser (its field names are [UsernameField] and
// friends) or from Go ([Gitea.SignIn]).
//
// Trust: nothing trusts the test CA unless told to. A client must be given
// [Gitea.CAFile] or [Gitea.CertPool] (as `coder certs import` gives the
// CA to the appliance, and GIT_SSL_CAINFO gives it to git); one that is not
// fails on the first request with "x509: certificate signed by unknown
// authority".
//
// It is for tests only. It never skips: a missing build fails the test
// with the command that makes it.
package testgitea

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"airgapcoder/internal/syncbuf"
	"airgapcoder/internal/testpki"
	"airgapcoder/internal/testport"
	"airgapcoder/internal/testserver"
	"airgapcoder/internal/testtier"
)

// Version is the Gitea release scripts/install-deps.sh builds; the build
// is cached in a folder named after it.
const Version = "v1.26.0"

// startTimeout bounds Gitea's start, from its database migration to a
// served health check.
const startTimeout = 90 * time.Second

// adminUsername is the site administrator Start creates, whose token the
// API calls carry. ("admin" is a name Gitea reserves.)
const adminUsername = "gitea_admin"

// Dir returns the folder scripts/install-deps.sh builds Gitea into:
// $XDG_CACHE_HOME/airgapcoder/gitea-VERSION ($HOME/.cache when
// XDG_CACHE_HOME is unset), holding the binary "gitea" and the templates/,
// options/ and public/ folders Gitea serves from (its STATIC_ROOT_PATH).
func Dir() (string, error) { return testserver.CacheDir("gitea", Version) }

// Path returns the Gitea binary in [Dir]. It fails the test, with the
// command that builds it, when the binary or one of the folders beside it
// is missing.
func Path(t testing.TB) string {
	t.Helper()
	testtier.Heavy(t, "runs Gitea")
	dir, err := Dir()
	if err == nil {
		// (public/assets/js/index.js: the stand-in for the frontend
		// that a browser needs, missing from older builds.)
		for _, name := range []string{"gitea", "templates", "options", "public/assets/js/index.js"} {
			if _, err = os.Stat(filepath.Join(dir, name)); err != nil {
				break
			}
		}
	}
	if err != nil {
		t.Fatalf("testgitea: Gitea %s is not built (%v): run ./scripts/install-deps.sh, which builds it from its module", Version, err)
	}
	return filepath.Join(dir, "gitea")
}

// Options change how Start runs Gitea. The zero value is Gitea's defaults.
type Options struct {
	// AccessTokenExpiration is how long an OAuth2 access token, and the ID
	// token issued with it, is valid ([oauth2]
	// ACCESS_TOKEN_EXPIRATION_TIME, in whole seconds). Zero is Gitea's
	// default, an hour. Refresh tokens stay valid for Gitea's default
	// (730 hours).
	AccessTokenExpiration time.Duration
}

// Gitea is a running Gitea. Its methods are safe for concurrent use.
type Gitea struct {
	// URL is Gitea's root URL, "https://127.0.0.1:PORT/" (ROOT_URL, with
	// the trailing slash). Repositories are at URL+"OWNER/NAME.git".
	URL string
	// Issuer is the OpenID Connect issuer as Gitea advertises it in
	// discovery and in the "iss" claim: URL without the trailing slash,
	// "https://127.0.0.1:PORT". Discovery is at
	// Issuer+"/.well-known/openid-configuration".
	Issuer string
	// CAFile is the PEM file of the test CA that signed Gitea's
	// certificate (what `coder certs import` would import, and what
	// GIT_SSL_CAINFO names for git).
	CAFile string
	// AdminUsername is the site administrator Start created; the harness
	// calls the API with its token.
	AdminUsername string

	api    testserver.JSONAPI // at URL, with the admin's token
	pki    *testpki.PKI
	output func() string

	mu        sync.Mutex
	passwords map[string]string // by username
	teams     map[string]int64  // team IDs by "org/team"
}

// Start runs Gitea on loopback over HTTPS with a certificate from a fresh
// test CA, SQLite in the test's temporary folder, no SSH, no registration
// and no network of its own (OFFLINE_MODE), OAuth2 provider on, and
// creates the admin user. Everything stops at t.Cleanup.
func Start(t testing.TB, opts Options) *Gitea {
	t.Helper()
	bin := Path(t)
	static := filepath.Dir(bin)
	dir := t.TempDir()
	pki, err := testpki.New(dir)
	if err != nil {
		t.Fatalf("testgitea: make test CA: %v", err)
	}
	port := testport.Port(t)
	g := &Gitea{
		URL:           fmt.Sprintf("https://127.0.0.1:%d/", port),
		CAFile:        pki.CAFile,
		AdminUsername: adminUsername,
		pki:           pki,
		passwords:     map[string]string{},
		teams:         map[string]int64{},
	}
	g.Issuer = strings.TrimSuffix(g.URL, "/")
	g.api = testserver.JSONAPI{
		Client: &http.Client{
			Timeout: 30 * time.Second,
			Transport: &http.Transport{
				TLSClientConfig:     &tls.Config{RootCAs: pki.CertPool()},
				TLSHandshakeTimeout: 10 * time.Second,
			},
		},
		BaseURL: g.URL,
	}
	t.Cleanup(g.api.Client.CloseIdleConnections)

	cfg := filepath.Join(dir, "custom", "conf", "app.ini")
	if err := writeConfig(cfg, config(dir, static, port, pki, opts)); err != nil {
		t.Fatalf("testgitea: write app.ini: %v", err)
	}
	out := &syncbuf.Buffer{}
	g.output = out.String
	run, err := newRunner(bin, dir, cfg, out)
	if err != nil {
		t.Fatalf("testgitea: %v", err)
	}

	// The schema first, then the admin (whose creation does not migrate),
	// then the server, so that nothing races on the SQLite file.
	if err := run.once("migrate"); err != nil {
		t.Fatalf("testgitea: %v\n%s", err, out.String())
	}
	adminPassword := testserver.RandomString(24)
	if err := run.once("admin", "user", "create", "--admin",
		"--username", adminUsername, "--password", adminPassword, "--email", adminUsername+"@gitea.test",
		"--must-change-password=false",
		"--access-token", "--access-token-name", "testgitea", "--access-token-scopes", "all"); err != nil {
		t.Fatalf("testgitea: %v\n%s", err, out.String())
	}
	token, err := accessToken(out.String())
	if err != nil {
		t.Fatalf("testgitea: create the admin: %v\n%s", err, out.String())
	}
	g.api.Header = func(r *http.Request) { r.Header.Set("Authorization", "token "+token) }
	g.passwords[adminUsername] = adminPassword

	exited, err := testserver.Start(t, run.command("web"))
	if err != nil {
		t.Fatalf("testgitea: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	if err := g.waitReady(ctx, exited); err != nil {
		t.Fatalf("testgitea: Gitea did not start: %v\n%s", err, out.String())
	}
	return g
}

// CertPool returns a pool holding only the test CA.
func (g *Gitea) CertPool() *x509.CertPool { return g.pki.CertPool() }

// HTTPClient returns a client that trusts the test CA (and nothing else),
// keeps cookies and follows redirects: a browser for tests that drive
// Gitea's pages from Go (see SignIn). Each call has its own transport:
// close its idle connections at the test's end (goleak counts their
// goroutines).
func (g *Gitea) HTTPClient() *http.Client { return testserver.BrowserClient(g.CertPool()) }

// Output returns what Gitea and its commands have logged so far, for a
// failure message.
func (g *Gitea) Output() string { return g.output() }

// waitReady polls Gitea's health check until it answers 200, ctx ends or
// Gitea exits.
func (g *Gitea) waitReady(ctx context.Context, exited <-chan struct{}) error {
	return testserver.WaitReady(ctx, exited, 100*time.Millisecond, func() error {
		return g.call(ctx, http.MethodGet, "api/healthz", nil, nil)
	})
}

// runner runs Gitea's commands with one configuration and a minimal
// environment: Gitea reads settings from GITEA__SECTION__KEY variables and
// git reads HOME and GIT_*; the test's environment must not reach them.
type runner struct {
	bin, dir, cfg string
	env           []string
	out           *syncbuf.Buffer
}

func newRunner(bin, dir, cfg string, out *syncbuf.Buffer) (*runner, error) {
	home, tmp := filepath.Join(dir, "home"), filepath.Join(dir, "tmp")
	for _, d := range []string{home, tmp} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
	}
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "TMPDIR=" + tmp, "GITEA_WORK_DIR=" + dir}
	if u, err := user.Current(); err == nil {
		env = append(env, "USER="+u.Username)
	}
	return &runner{bin: bin, dir: dir, cfg: cfg, env: env, out: out}, nil
}

func (r *runner) command(args ...string) *exec.Cmd {
	cmd := exec.Command(r.bin, append([]string{"--config", r.cfg, "--work-path", r.dir}, args...)...)
	cmd.Dir = r.dir
	cmd.Env = r.env
	cmd.Stdout, cmd.Stderr = r.out, r.out
	return cmd
}

// once runs a command to its end. (testserver.Start runs Gitea's server
// in a process group of its own, so that the cleanup ends the git
// processes it starts with it.)
func (r *runner) once(args ...string) error {
	if err := r.command(args...).Run(); err != nil {
		return fmt.Errorf("gitea %s: %w", strings.Join(args[:min(3, len(args))], " "), err)
	}
	return nil
}

// accessToken finds the token `gitea admin user create --access-token`
// printed.
func accessToken(out string) (string, error) {
	const prefix = "Access token was successfully created... "
	i := strings.LastIndex(out, prefix)
	if i < 0 {
		return "", errors.New("no access token in the output")
	}
	tok, _, _ := strings.Cut(out[i+len(prefix):], "\n")
	if tok = strings.TrimSpace(tok); tok == "" {
		return "", errors.New("empty access token")
	}
	return tok, nil
}

// section is one [section] of app.ini, its keys in order.
type section struct {
	name string // "" for the keys before the first section
	keys [][2]string
}

// config is Gitea's app.ini for a test: everything under dir, HTTPS on
// 127.0.0.1:port with the test certificate, static files from static.
func config(dir, static string, port int, pki *testpki.PKI, opts Options) []section {
	top := section{keys: [][2]string{{"APP_NAME", "testgitea"}, {"RUN_MODE", "prod"}, {"WORK_PATH", dir}}}
	if u, err := user.Current(); err == nil {
		top.keys = append(top.keys, [2]string{"RUN_USER", u.Username})
	}
	if os.Geteuid() == 0 {
		top.keys = append(top.keys, [2]string{"I_AM_BEING_UNSAFE_RUNNING_AS_ROOT", "true"})
	}
	root := fmt.Sprintf("https://127.0.0.1:%d/", port)
	oauth2 := [][2]string{{"ENABLED", "true"}, {"JWT_SECRET", base64.RawURLEncoding.EncodeToString(testserver.RandomBytes(32))}}
	if opts.AccessTokenExpiration > 0 {
		secs := max(1, int(opts.AccessTokenExpiration/time.Second))
		oauth2 = append(oauth2, [2]string{"ACCESS_TOKEN_EXPIRATION_TIME", strconv.Itoa(secs)})
	}
	return []section{
		top,
		{"server", [][2]string{
			{"PROTOCOL", "https"}, {"HTTP_ADDR", "127.0.0.1"}, {"HTTP_PORT", strconv.Itoa(port)},
			{"DOMAIN", "127.0.0.1"}, {"ROOT_URL", root}, {"LOCAL_ROOT_URL", root},
			{"CERT_FILE", pki.CertFile}, {"KEY_FILE", pki.KeyFile},
			{"APP_DATA_PATH", filepath.Join(dir, "data")}, {"STATIC_ROOT_PATH", static},
			{"OFFLINE_MODE", "true"}, {"DISABLE_SSH", "true"}, {"START_SSH_SERVER", "false"},
			{"LFS_START_SERVER", "false"}, {"ENABLE_PPROF", "false"},
		}},
		{"database", [][2]string{{"DB_TYPE", "sqlite3"}, {"PATH", filepath.Join(dir, "data", "gitea.db")}, {"SQLITE_JOURNAL_MODE", "WAL"}}},
		{"repository", [][2]string{{"ROOT", filepath.Join(dir, "repositories")}, {"DEFAULT_BRANCH", "main"}}},
		{"security", [][2]string{
			{"INSTALL_LOCK", "true"}, {"SECRET_KEY", testserver.RandomString(32)}, {"INTERNAL_TOKEN", testserver.RandomString(64)},
			{"MIN_PASSWORD_LENGTH", "8"}, {"PASSWORD_COMPLEXITY", "off"},
		}},
		{"oauth2", oauth2},
		{"service", [][2]string{
			{"DISABLE_REGISTRATION", "true"}, {"REQUIRE_SIGNIN_VIEW", "false"}, {"REGISTER_EMAIL_CONFIRM", "false"},
			{"ENABLE_NOTIFY_MAIL", "false"}, {"DEFAULT_KEEP_EMAIL_PRIVATE", "false"}, {"ENABLE_CAPTCHA", "false"},
		}},
		{"openid", [][2]string{{"ENABLE_OPENID_SIGNIN", "false"}, {"ENABLE_OPENID_SIGNUP", "false"}}},
		{"mailer", [][2]string{{"ENABLED", "false"}}},
		{"actions", [][2]string{{"ENABLED", "false"}}},
		{"packages", [][2]string{{"ENABLED", "false"}}},
		{"cron.update_checker", [][2]string{{"ENABLED", "false"}}},
		{"log", [][2]string{{"MODE", "console"}, {"LEVEL", "Info"}, {"ROOT_PATH", filepath.Join(dir, "log")}}},
	}
}

func writeConfig(path string, sections []section) error {
	var b bytes.Buffer
	for _, s := range sections {
		if s.name != "" {
			fmt.Fprintf(&b, "\n[%s]\n", s.name)
		}
		for _, kv := range s.keys {
			fmt.Fprintf(&b, "%s = %s\n", kv[0], kv[1])
		}
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return os.WriteFile(path, b.Bytes(), 0o600)
}
