package postgres

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	embeddedpostgres "github.com/fergusstrange/embedded-postgres"
)

// RunHelperIfRequested turns this process into the PostgreSQL helper when
// [Server.Start] started it, and then never returns. Otherwise it returns at
// once. Call it first thing in main and in every TestMain of a package that
// starts a [Server], before flags are parsed or anything else runs.
func RunHelperIfRequested() {
	if os.Getenv(helperEnv) == "" {
		return
	}
	_ = os.Unsetenv(helperEnv)
	os.Exit(runHelper(os.Stdin, os.Stdout, os.Stderr))
}

// runHelper starts the cluster that the configuration on stdin describes,
// reports on stdout, and stops the cluster when stdin closes or a signal
// comes.
func runHelper(stdin io.Reader, stdout, stderr io.Writer) int {
	// Keep the lock for this process only: PostgreSQL must not inherit
	// it, or a server left running would look like a live helper.
	syscall.CloseOnExec(lockFD)
	exe, _ := os.Readlink("/proc/self/exe")
	if fd, _ := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", exeFD)); fd != "" && fd == exe {
		_ = syscall.Close(exeFD)
	}
	// Until the helper exits, further signals are swallowed: a second
	// SIGTERM must not interrupt the shutdown.
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer cancel()

	report := func(err error) {
		st := helperStatus{Ready: err == nil}
		if err != nil {
			st.Error = err.Error()
		}
		_ = json.NewEncoder(stdout).Encode(st)
	}
	in := bufio.NewReader(stdin)
	line, err := in.ReadBytes('\n')
	if err != nil {
		report(fmt.Errorf("read configuration: %w", err))
		return 1
	}
	var cfg helperConfig
	if err := json.Unmarshal(line, &cfg); err != nil {
		report(fmt.Errorf("read configuration: %w", err))
		return 1
	}
	logs := tailLogs(cfg.TempDir, stderr)
	defer logs.stop()
	db, err := startCluster(ctx, cfg, stderr)
	if err != nil {
		report(err)
		return 1
	}
	logs.poll()
	if ctx.Err() != nil {
		fmt.Fprintln(stderr, "coder-postgres-helper: asked to stop while PostgreSQL started; stopping it")
		report(errors.New("stopped while starting"))
		return stopCluster(db, stderr, 1)
	}
	report(nil)

	closed := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, in)
		close(closed)
	}()
	select {
	case <-closed:
	case <-ctx.Done():
		fmt.Fprintln(stderr, "coder-postgres-helper: signalled; stopping PostgreSQL")
	}
	return stopCluster(db, stderr, 0)
}

func stopCluster(db *embeddedpostgres.EmbeddedPostgres, stderr io.Writer, code int) int {
	if err := db.Stop(); err != nil {
		fmt.Fprintf(stderr, "coder-postgres-helper: stop PostgreSQL: %v\n", err)
		return 1
	}
	return code
}

// startCluster runs initdb on an empty data directory and starts the
// cluster through embedded-postgres. A signal stops initdb (which then
// cleans the data directory); the library's Start cannot be interrupted.
func startCluster(ctx context.Context, cfg helperConfig, stderr io.Writer) (*embeddedpostgres.EmbeddedPostgres, error) {
	// The library writes its log to a temporary file.
	if err := os.Setenv("TMPDIR", cfg.TempDir); err != nil {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(cfg.DataDir, "PG_VERSION")); errors.Is(err, fs.ErrNotExist) {
		if err := initCluster(ctx, cfg, stderr); err != nil {
			return nil, err
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("stopped before PostgreSQL started: %w", err)
	}
	// The data directory is initialized and the binaries are unpacked, so
	// the library neither deletes the data directory nor looks for the
	// archive (it would download one only if both the unpacked binaries
	// and the archive were missing).
	db := embeddedpostgres.NewDatabase(embeddedpostgres.DefaultConfig().
		Version(embeddedpostgres.PostgresVersion(cfg.Version)).
		Port(cfg.Port).
		Database("postgres"). // "coder" is created by the parent
		Username(superuser).
		Password(cfg.Password).
		DataPath(cfg.DataDir).
		RuntimePath(cfg.RunDir).
		BinariesPath(cfg.BinDir).
		CachePath(cfg.CacheDir).
		BinaryRepositoryURL(cfg.RepositoryURL).
		StartTimeout(cfg.StartTimeout).
		StartParameters(map[string]string{
			"listen_addresses":        "127.0.0.1",
			"unix_socket_directories": cfg.RunDir,
		}).
		Logger(nil)) // tailLogs forwards the log file as it grows
	if err := db.Start(); err != nil {
		return nil, err
	}
	return db, nil
}

// initCluster runs initdb the way embedded-postgres would, but into the
// existing data directory: the library removes and recreates it, which the
// unprivileged user cannot do in a parent folder that root owns.
func initCluster(ctx context.Context, cfg helperConfig, out io.Writer) error {
	pwfile := filepath.Join(cfg.TempDir, "pwfile")
	if err := os.WriteFile(pwfile, []byte(cfg.Password+"\n"), 0o600); err != nil {
		return fmt.Errorf("initdb: %w", err)
	}
	defer os.Remove(pwfile)
	cmd := exec.CommandContext(ctx, filepath.Join(cfg.BinDir, "bin", "initdb"),
		"--pgdata="+cfg.DataDir,
		"--username="+superuser,
		"--pwfile="+pwfile,
		"--auth=scram-sha-256",
		"--encoding=UTF8",
		"--locale=C",
	)
	cmd.Stdout, cmd.Stderr = out, out
	// initdb removes what it created when it gets SIGTERM.
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("initdb %s: %w (its output is in the log)", cfg.DataDir, err)
	}
	return nil
}

// logTail copies the library's log files (pg_ctl and the server write
// there) to the helper's stderr as they grow.
type logTail struct {
	dir  string
	w    io.Writer
	done chan struct{}
	wg   sync.WaitGroup

	mu      sync.Mutex
	offsets map[string]int64
}

func tailLogs(dir string, w io.Writer) *logTail {
	t := &logTail{dir: dir, w: w, done: make(chan struct{}), offsets: map[string]int64{}}
	t.wg.Go(func() {
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-t.done:
				return
			case <-tick.C:
				t.poll()
			}
		}
	})
	return t
}

// stop ends the tail after a last copy.
func (t *logTail) stop() {
	close(t.done)
	t.wg.Wait()
	t.poll()
}

// poll copies what the log files gained since the last poll.
func (t *logTail) poll() {
	t.mu.Lock()
	defer t.mu.Unlock()
	names, _ := filepath.Glob(filepath.Join(t.dir, "embedded_postgres_log*"))
	for _, name := range names {
		f, err := os.Open(name)
		if err != nil {
			continue
		}
		if _, err := f.Seek(t.offsets[name], io.SeekStart); err == nil {
			n, _ := io.Copy(t.w, f)
			t.offsets[name] += n
		}
		_ = f.Close()
	}
}
