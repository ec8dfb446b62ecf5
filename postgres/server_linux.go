package postgres

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"airgapcoder/internal/atomicfile"
)

const (
	// The helper gets the data directory's lock and the running binary as
	// extra descriptors. The binary is executed through /proc/self/fd, so
	// the PostgreSQL user needs no access to the folders above it (go
	// test's build folder, /root/...).
	lockFD = 3
	exeFD  = 4
	// helperStopGrace is how long a helper may take to stop after SIGTERM
	// before it is killed.
	helperStopGrace = 10 * time.Second
	// defaultStartTimeout bounds the library's readiness check when ctx
	// has no deadline.
	defaultStartTimeout = time.Minute
)

// helperConfig is the first line the parent writes to the helper's stdin.
// It travels on stdin, not in the environment, because it holds the
// password.
type helperConfig struct {
	BinDir        string        `json:"bin_dir"`
	DataDir       string        `json:"data_dir"`
	RunDir        string        `json:"run_dir"`  // the library's RuntimePath, also the socket folder
	TempDir       string        `json:"temp_dir"` // the helper's TMPDIR
	CacheDir      string        `json:"cache_dir"`
	Version       string        `json:"version"`
	Port          uint32        `json:"port"`
	Password      string        `json:"password"`
	RepositoryURL string        `json:"repository_url"`
	StartTimeout  time.Duration `json:"start_timeout"`
}

// helperStatus is the one line the helper writes to its stdout.
type helperStatus struct {
	Ready bool   `json:"ready,omitempty"`
	Error string `json:"error,omitempty"`
}

func (s *Server) start(ctx context.Context) error {
	if os.Getenv(helperEnv) != "" {
		return fmt.Errorf("postgres: start: %s is set: this process is a PostgreSQL helper; call postgres.RunHelperIfRequested first thing in main and TestMain", helperEnv)
	}
	o := s.opts
	acct, err := resolveAccount(o.RunAsUser)
	if err != nil {
		return err
	}
	if err := prepareDirs(o, acct); err != nil {
		return err
	}
	archive, version, err := ensureArchive(ctx, o, s.log)
	if err != nil {
		return err
	}
	binDir, err := unpack(archive, o.BinariesDir, s.log)
	if err != nil {
		return err
	}
	s.binDir = binDir // Start holds s.mu
	lock, err := lockDataDir(o.DataDir)
	if err != nil {
		return err
	}
	// The helper inherits the lock; the parent's copy goes in any case.
	defer lock.Close()
	if err := stopStale(o.DataDir, s.log); err != nil {
		return err
	}
	initialized, err := checkDataDir(o.DataDir, version)
	if err != nil {
		return err
	}
	password, err := loadPassword(o.DataDir, initialized)
	if err != nil {
		return err
	}
	if err := resetRuntimeDir(o.RuntimeDir, acct); err != nil {
		return err
	}
	port := o.Port
	if port == 0 {
		if port, err = freePort(); err != nil {
			return err
		}
		// A restart keeps the port, so the URL its clients hold stays
		// right.
		s.opts.Port = port
	}
	cfg := helperConfig{
		BinDir:        binDir,
		DataDir:       o.DataDir,
		RunDir:        libraryRuntimeDir(o.RuntimeDir),
		TempDir:       helperTempDir(o.RuntimeDir),
		CacheDir:      o.CacheDir,
		Version:       version,
		Port:          port,
		Password:      password,
		RepositoryURL: o.binaryRepositoryURL,
		StartTimeout:  defaultStartTimeout,
	}
	if d, ok := ctx.Deadline(); ok {
		cfg.StartTimeout = max(time.Until(d), time.Second)
	}
	started := time.Now()
	proc, err := s.startHelper(ctx, cfg, acct, lock)
	if err != nil {
		// The lock is still ours: stop whatever the helper left.
		_ = stopStale(o.DataDir, s.log)
		return err
	}
	u := connURL(password, port, database)
	if err := ensureDatabase(ctx, connURL(password, port, "postgres")); err != nil {
		_ = proc.stop(context.Background())
		return fmt.Errorf("postgres: create database %q: %w", database, err)
	}
	proc.postmaster, _ = readPostmasterPID(o.DataDir)
	s.proc, s.url = proc, u
	s.log.Info("PostgreSQL is ready", "version", version, "port", port, "data_dir", o.DataDir, "took", time.Since(started).Round(time.Millisecond))
	return nil
}

func (s *Server) stop(ctx context.Context) error {
	err := s.proc.stop(ctx)
	if err == nil {
		if pid := s.proc.postmaster; pid > 0 && !waitGone(pid, staleStopTimeout) {
			return fmt.Errorf("postgres: stop: the helper is done but the postmaster (pid %d) still runs after %s", pid, staleStopTimeout)
		}
		s.log.Info("PostgreSQL stopped")
		return nil
	}
	// The helper did not stop cleanly: PostgreSQL may still run. Stop it,
	// unless another server holds the data directory by now.
	if lock, lerr := lockDataDir(s.opts.DataDir); lerr == nil {
		if serr := stopStale(s.opts.DataDir, s.log); serr != nil {
			err = errors.Join(err, serr)
		}
		_ = lock.Close()
	}
	return err
}

// checkDataDir reports whether dataDir holds a cluster. It refuses a
// cluster of another major version and a folder that is neither empty nor
// a cluster: embedded-postgres would delete either and run initdb.
func checkDataDir(dataDir, version string) (initialized bool, err error) {
	b, err := os.ReadFile(filepath.Join(dataDir, "PG_VERSION"))
	if errors.Is(err, fs.ErrNotExist) {
		entries, err := os.ReadDir(dataDir)
		if err != nil {
			return false, fmt.Errorf("postgres: %w", err)
		}
		if len(entries) > 0 {
			return false, fmt.Errorf("postgres: %s is neither empty nor a PostgreSQL data directory (no PG_VERSION); move its contents away or choose another folder", dataDir)
		}
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("postgres: %w", err)
	}
	have := strings.TrimSpace(string(b))
	want, _, _ := strings.Cut(version, ".")
	if have != want {
		return false, fmt.Errorf("postgres: %s holds a PostgreSQL %s cluster but the binaries are PostgreSQL %s (%s); run it with PostgreSQL %s binaries or upgrade it with pg_upgrade", dataDir, have, want, version, have)
	}
	return true, nil
}

// loadPassword reads the superuser's password, or creates it before the
// first initdb.
func loadPassword(dataDir string, initialized bool) (string, error) {
	p := passwordPath(dataDir)
	b, err := os.ReadFile(p)
	switch {
	case err == nil:
		pw := strings.TrimSpace(string(b))
		if pw == "" {
			return "", fmt.Errorf("postgres: password file %s is empty", p)
		}
		return pw, nil
	case !errors.Is(err, fs.ErrNotExist):
		return "", fmt.Errorf("postgres: %w", err)
	case initialized:
		return "", fmt.Errorf("postgres: %s holds a cluster but its password file %s is missing; restore the file, or move the data directory away to start a new cluster", dataDir, p)
	}
	raw := make([]byte, 24)
	if _, err := rand.Read(raw); err != nil {
		return "", fmt.Errorf("postgres: generate password: %w", err)
	}
	pw := hex.EncodeToString(raw)
	if err := atomicfile.Write(p, []byte(pw+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("postgres: write password file: %w", err)
	}
	return pw, nil
}

// resetRuntimeDir empties runtimeDir and creates the helper's temporary
// folder in it.
func resetRuntimeDir(runtimeDir string, acct *account) error {
	entries, err := os.ReadDir(runtimeDir)
	if err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(runtimeDir, e.Name())); err != nil {
			return fmt.Errorf("postgres: empty %s: %w", runtimeDir, err)
		}
	}
	tmp := helperTempDir(runtimeDir)
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	if acct != nil {
		if err := os.Chown(tmp, int(acct.uid), int(acct.gid)); err != nil {
			return fmt.Errorf("postgres: %w", err)
		}
	}
	return nil
}

func freePort() (uint32, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("postgres: pick a port: %w", err)
	}
	defer l.Close()
	return uint32(l.Addr().(*net.TCPAddr).Port), nil
}

func connURL(password string, port uint32, db string) string {
	u := url.URL{
		Scheme:   "postgres",
		User:     url.UserPassword(superuser, password),
		Host:     net.JoinHostPort("127.0.0.1", strconv.FormatUint(uint64(port), 10)),
		Path:     "/" + db,
		RawQuery: "sslmode=disable",
	}
	return u.String()
}

// ensureDatabase creates the database "coder" unless it exists.
func ping(ctx context.Context, u string) error {
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	var one int
	return conn.QueryRow(ctx, "SELECT 1").Scan(&one)
}

func ensureDatabase(ctx context.Context, adminURL string) error {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", database).Scan(&exists); err != nil {
		return err
	}
	if exists {
		return nil
	}
	_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{database}.Sanitize())
	return err
}

// startHelper re-executes the running binary as the helper, hands it cfg
// and waits for its status line.
func (s *Server) startHelper(ctx context.Context, cfg helperConfig, acct *account, lock *os.File) (*helperProcess, error) {
	exePath, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("postgres: find the running binary: %w", err)
	}
	exe, err := os.Open(exePath)
	if err != nil {
		return nil, fmt.Errorf("postgres: open the running binary: %w", err)
	}
	defer exe.Close()
	if acct != nil {
		if st, err := statT(exePath); err == nil && !permits(st, acct, 0o1) {
			return nil, fmt.Errorf("postgres: user %s, which runs PostgreSQL, may not execute %s (mode %v); make it executable for all (chmod o+rx) or run coder as a non-root user", acct.name, exePath, fs.FileMode(st.Mode&0o7777))
		}
	}
	stdinR, stdinW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer stdinR.Close()
	stdoutR, stdoutW, err := os.Pipe()
	if err != nil {
		_ = stdinW.Close()
		return nil, err
	}
	defer stdoutW.Close()
	attr := &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if acct != nil {
		attr.Credential = &syscall.Credential{Uid: acct.uid, Gid: acct.gid, Groups: []uint32{}}
	}
	p := &helperProcess{
		cmd: &exec.Cmd{
			Path:        fmt.Sprintf("/proc/self/fd/%d", exeFD),
			Args:        []string{"coder-postgres-helper"},
			Env:         helperEnviron(),
			Dir:         cfg.TempDir,
			Stdin:       stdinR,
			Stdout:      stdoutW,
			ExtraFiles:  []*os.File{lock, exe}, // lockFD, exeFD
			SysProcAttr: attr,
			WaitDelay:   5 * time.Second,
		},
		stdin:  stdinW,
		stdout: stdoutR,
		stderr: newLogWriter(s.log.With("process", "postgres")),
		exited: make(chan struct{}),
	}
	p.cmd.Stderr = p.stderr
	if err := p.cmd.Start(); err != nil {
		_ = stdinW.Close()
		_ = stdoutR.Close()
		who := "the caller"
		if acct != nil {
			who = "user " + acct.name
		}
		return nil, fmt.Errorf("postgres: start the helper (%s as %s): %w", exePath, who, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		p.stderr.Flush()
		close(p.exited)
	}()
	if err := p.handshake(ctx, cfg); err != nil {
		// Do not wait for a start that nobody wants any more.
		now, cancel := context.WithCancel(context.Background())
		cancel()
		_ = p.stop(now)
		return nil, err
	}
	return p, nil
}

// helperEnviron is the parent's environment without PG* variables (they
// would steer initdb and pg_ctl) and with the helper marker.
func helperEnviron() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "PG") || k == helperEnv || k == "TMPDIR" {
			continue
		}
		env = append(env, kv)
	}
	return append(env, helperEnv+"=1")
}

// handshake sends cfg and waits for the helper's status line.
func (p *helperProcess) handshake(ctx context.Context, cfg helperConfig) error {
	line, err := json.Marshal(cfg)
	if err != nil {
		return err
	}
	if _, err := p.stdin.Write(append(line, '\n')); err != nil {
		return fmt.Errorf("postgres: send the helper its configuration: %w", err)
	}
	status := make(chan []byte, 1)
	go func() {
		b, _ := bufio.NewReader(p.stdout).ReadBytes('\n')
		status <- b
	}()
	var b []byte
	select {
	case b = <-status:
	case <-ctx.Done():
		return fmt.Errorf("postgres: wait for PostgreSQL to start: %w", context.Cause(ctx))
	}
	if len(b) == 0 {
		<-p.exited
		return fmt.Errorf("postgres: the helper exited before PostgreSQL was ready: %v (its output is in the log)", p.err)
	}
	var st helperStatus
	if err := json.Unmarshal(b, &st); err != nil {
		return fmt.Errorf("postgres: the helper answered %q, not its status; is postgres.RunHelperIfRequested called first thing in main (or TestMain)?", strings.TrimSpace(string(b)))
	}
	if !st.Ready {
		return fmt.Errorf("postgres: start PostgreSQL: %s", st.Error)
	}
	return nil
}

// stop asks the helper to stop PostgreSQL by closing its stdin and waits.
// When ctx ends first it sends SIGTERM, and SIGKILL after helperStopGrace.
// It returns an error unless the helper exited cleanly.
func (p *helperProcess) stop(ctx context.Context) error {
	_ = p.stdin.Close()
	defer p.stdout.Close()
	select {
	case <-p.exited:
	case <-ctx.Done():
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(helperStopGrace):
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
	}
	if p.err != nil {
		return fmt.Errorf("postgres: stop: the helper failed: %w (its output is in the log)", p.err)
	}
	return nil
}
