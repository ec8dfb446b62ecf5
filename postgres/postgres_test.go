//go:build linux

package postgres

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"airgapcoder/internal/testtier"
)

func TestMain(m *testing.M) {
	RunHelperIfRequested()
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		if shared.base != "" {
			_ = os.RemoveAll(shared.base)
		}
		os.Exit(code)
	}))
}

// shared holds the archive cache and the unpacked binaries for all tests,
// so that the machine's installation is repacked once.
var shared struct {
	once              sync.Once
	base, cache, bins string
	err               error
}

func sharedDirs(t *testing.T) (cache, bins string) {
	t.Helper()
	shared.once.Do(func() {
		shared.base, shared.err = os.MkdirTemp("", "postgres-test-shared-")
		if shared.err == nil {
			shared.err = os.Chmod(shared.base, 0o755)
		}
		shared.cache = filepath.Join(shared.base, "cache")
		shared.bins = filepath.Join(shared.base, "cache", "binaries")
	})
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	return shared.cache, shared.bins
}

// reachableTempDir is a t.TempDir that the unprivileged PostgreSQL user can
// traverse (t.TempDir creates its folders 0700).
func reachableTempDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, p := range []string{dir, filepath.Dir(dir)} {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// noDownloads is a repository URL for the library that fails the test when
// anything asks it for anything.
func noDownloads(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("embedded-postgres tried to download %s", r.URL)
		http.NotFound(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// testWriter sends log output to t.Log until the test ends.
type testWriter struct {
	t    *testing.T
	mu   sync.Mutex
	done bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

func testLogger(t *testing.T) *slog.Logger {
	w := &testWriter{t: t}
	t.Cleanup(func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.done = true
	})
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func testOptions(t *testing.T) Options {
	t.Helper()
	base := reachableTempDir(t)
	cache, bins := sharedDirs(t)
	return Options{
		DataDir:             filepath.Join(base, "postgres", "data"),
		RuntimeDir:          filepath.Join(base, "run"),
		CacheDir:            cache,
		BinariesDir:         bins,
		Logger:              testLogger(t),
		binaryRepositoryURL: noDownloads(t),
	}
}

func startServer(t *testing.T, opts Options) *Server {
	t.Helper()
	testtier.Heavy(t, "starts the built-in PostgreSQL")
	s, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.Start(ctx); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = s.Stop(ctx)
	})
	return s
}

func connect(t *testing.T, u string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

func exec1(t *testing.T, conn *pgx.Conn, sql string) {
	t.Helper()
	if _, err := conn.Exec(context.Background(), sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func queryNote(t *testing.T, u string) string {
	t.Helper()
	var body string
	if err := connect(t, u).QueryRow(context.Background(), "SELECT body FROM notes").Scan(&body); err != nil {
		t.Fatalf("read the row back: %v", err)
	}
	return body
}

func postmasterPID(t *testing.T, dataDir string) int {
	t.Helper()
	pid, err := readPostmasterPID(dataDir)
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// processUID reads the real uid from /proc/<pid>/status.
func processUID(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "Uid:"); ok {
			uid, err := strconv.Atoi(strings.Fields(rest)[0])
			if err != nil {
				t.Fatal(err)
			}
			return uid
		}
	}
	t.Fatalf("no Uid line in /proc/%d/status", pid)
	return -1
}

func TestRestartKeepsData(t *testing.T) {
	opts := testOptions(t)
	s := startServer(t, opts)

	u, err := url.Parse(s.URL())
	if err != nil {
		t.Fatal(err)
	}
	if pw, _ := u.User.Password(); u.Scheme != "postgres" || u.User.Username() != "coder" || pw == "" ||
		u.Hostname() != "127.0.0.1" || u.Path != "/coder" || u.Query().Get("sslmode") != "disable" {
		t.Errorf("URL() = %s, want postgres://coder:PASSWORD@127.0.0.1:PORT/coder?sslmode=disable", s.URL())
	}
	conn := connect(t, s.URL())
	exec1(t, conn, "CREATE TABLE notes (body text)")
	exec1(t, conn, "INSERT INTO notes VALUES ('kept')")
	_ = conn.Close(context.Background())

	pid := postmasterPID(t, opts.DataDir)
	if uid := processUID(t, pid); uid == 0 {
		t.Errorf("the postmaster (pid %d) runs as uid 0", pid)
	} else if os.Geteuid() == 0 {
		nobody, err := user.Lookup(DefaultRunAsUser)
		if err != nil {
			t.Fatal(err)
		}
		if want, _ := strconv.Atoi(nobody.Uid); uid != want {
			t.Errorf("the postmaster runs as uid %d, want %d (%s)", uid, want, DefaultRunAsUser)
		}
	}
	if info, err := os.Stat(passwordPath(opts.DataDir)); err != nil {
		t.Error(err)
	} else if info.Mode().Perm() != 0o600 {
		t.Errorf("password file mode = %v, want 0600", info.Mode().Perm())
	}

	// A second server on the same data directory is refused.
	other, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Start(context.Background()); !errors.Is(err, ErrInUse) {
		t.Errorf("second Start on the same data directory: got %v, want ErrInUse", err)
	}

	ctx := context.Background()
	if err := s.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if err := s.Stop(ctx); err != nil {
		t.Errorf("second Stop: got %v, want nil", err)
	}
	if alive(pid) {
		t.Errorf("the postmaster (pid %d) still runs after Stop", pid)
	}

	s2 := startServer(t, opts)
	if got := queryNote(t, s2.URL()); got != "kept" {
		t.Errorf("after restart: got %q, want %q", got, "kept")
	}
}

func TestRecoversStaleServer(t *testing.T) {
	opts := testOptions(t)
	s1 := startServer(t, opts)
	conn := connect(t, s1.URL())
	exec1(t, conn, "CREATE TABLE notes (body text)")
	exec1(t, conn, "INSERT INTO notes VALUES ('survived')")
	_ = conn.Close(context.Background())
	stale := postmasterPID(t, opts.DataDir)

	// A crash: the helper dies without stopping PostgreSQL.
	helper := s1.proc
	if err := helper.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-helper.exited
	if !alive(stale) {
		t.Fatalf("PostgreSQL (pid %d) died with its helper; nothing stale to recover", stale)
	}

	s2 := startServer(t, opts)
	if alive(stale) {
		t.Errorf("the stale postmaster (pid %d) still runs", stale)
	}
	if pid := postmasterPID(t, opts.DataDir); pid == stale {
		t.Errorf("postmaster pid = %d, the stale one", pid)
	}
	if got := queryNote(t, s2.URL()); got != "survived" {
		t.Errorf("got %q, want %q", got, "survived")
	}

	// Stopping the crashed server reports the crash and leaves the new
	// server alone.
	if err := s1.Stop(context.Background()); err == nil {
		t.Error("Stop of the server whose helper was killed: got nil, want an error")
	}
	if got := queryNote(t, s2.URL()); got != "survived" {
		t.Errorf("after the old server's Stop: got %q, want %q", got, "survived")
	}
}

func TestStartCancelled(t *testing.T) {
	testtier.Heavy(t, "starts the built-in PostgreSQL")
	s, err := New(testOptions(t))
	if err != nil {
		t.Fatal(err)
	}
	opts := s.opts
	// Binaries first, so that the deadline falls into initdb or the start.
	archive, _, err := ensureArchive(context.Background(), opts, s.log)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := unpack(archive, opts.BinariesDir, s.log); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := s.Start(ctx); err == nil {
		t.Log("PostgreSQL started within the deadline; nothing was cancelled")
		if err := s.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
	} else if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Start: got %v, want a deadline error", err)
	}
	if procs := processesUsing(t, opts.DataDir); len(procs) > 0 {
		t.Errorf("processes still use the data directory: %v", procs)
	}
	s2 := startServer(t, opts)
	exec1(t, connect(t, s2.URL()), "SELECT 1")
}

// processesUsing lists the processes whose command line names dir.
func processesUsing(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || !alive(pid) {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Contains(cmdline, []byte(dir)) {
			found = append(found, fmt.Sprintf("%d: %s", pid, bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '})))
		}
	}
	return found
}

func TestNoBinaries(t *testing.T) {
	tests := []struct {
		name    string
		version string
		want    func(opts Options) []string
	}{
		{
			name: "nothing to repack",
			want: func(o Options) []string {
				return []string{o.InstallDir, o.CacheDir, "apt-get install postgresql", "--postgres-url"}
			},
		},
		{
			name:    "archive missing",
			version: "99.1.0",
			want: func(o Options) []string {
				return []string{filepath.Join(o.CacheDir, archiveName("99.1.0")), "--postgres-url"}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			base := reachableTempDir(t)
			opts := Options{
				DataDir:             filepath.Join(base, "postgres", "data"),
				RuntimeDir:          filepath.Join(base, "run"),
				CacheDir:            filepath.Join(base, "cache"),
				BinariesDir:         filepath.Join(base, "binaries"),
				InstallDir:          filepath.Join(base, "empty-installation"),
				Version:             tt.version,
				Logger:              testLogger(t),
				binaryRepositoryURL: noDownloads(t),
			}
			if err := os.Mkdir(opts.InstallDir, 0o755); err != nil {
				t.Fatal(err)
			}
			s, err := New(opts)
			if err != nil {
				t.Fatal(err)
			}
			err = s.Start(context.Background())
			if !errors.Is(err, ErrNoBinaries) {
				t.Fatalf("Start: got %v, want ErrNoBinaries", err)
			}
			for _, want := range tt.want(opts) {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not mention %q", err, want)
				}
			}
			if entries, _ := os.ReadDir(opts.DataDir); len(entries) != 0 {
				t.Errorf("the data directory is not empty: %v", entries)
			}
		})
	}
}

func TestUnreachableDataDir(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("only root switches to another user")
	}
	opts := testOptions(t)
	private := filepath.Join(filepath.Dir(opts.RuntimeDir), "private")
	if err := os.Mkdir(private, 0o700); err != nil {
		t.Fatal(err)
	}
	opts.DataDir = filepath.Join(private, "postgres", "data")
	s, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	err = s.Start(context.Background())
	if err == nil {
		_ = s.Stop(context.Background())
		t.Fatal("Start: got nil, want an error")
	}
	for _, want := range []string{DefaultRunAsUser, opts.DataDir, private + " is not searchable", "--global-config", "--postgres-url", "non-root"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}
