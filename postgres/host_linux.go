package postgres

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Stale-server shutdown: SIGINT (fast shutdown) first, SIGKILL when it is
// not gone after staleStopTimeout.
const (
	staleStopTimeout = 15 * time.Second
	staleKillTimeout = 5 * time.Second
)

// account is the unprivileged user that runs PostgreSQL when the caller is
// root.
type account struct {
	name     string
	uid, gid uint32
}

// resolveAccount returns the account to switch to, or nil when the caller
// is not root (PostgreSQL then runs as the caller).
func resolveAccount(name string) (*account, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup(name)
	if err != nil {
		var idErr error
		if u, idErr = user.LookupId(name); idErr != nil {
			return nil, fmt.Errorf("postgres: look up the user to run PostgreSQL as: %w", err)
		}
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("postgres: user %q has uid %q: %w", name, u.Uid, err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("postgres: user %q has gid %q: %w", name, u.Gid, err)
	}
	if uid == 0 {
		return nil, fmt.Errorf("postgres: user %q is root; PostgreSQL must run as an unprivileged user", name)
	}
	return &account{name: u.Username, uid: uint32(uid), gid: uint32(gid)}, nil
}

// prepareDirs creates the four folders. When acct is set it gives DataDir
// and RuntimeDir to acct and checks that acct can reach DataDir, RuntimeDir
// and BinariesDir. BinariesDir stays the caller's: PostgreSQL only reads it.
func prepareDirs(opts Options, acct *account) error {
	for _, d := range []struct {
		path string
		perm os.FileMode
	}{
		{opts.DataDir, 0o700}, {opts.RuntimeDir, 0o700}, {opts.CacheDir, 0o755}, {opts.BinariesDir, 0o755},
	} {
		if err := mkdir(d.path, d.perm); err != nil {
			return fmt.Errorf("postgres: create %s: %w", d.path, err)
		}
	}
	if acct == nil {
		return nil
	}
	for _, dir := range []string{opts.DataDir, opts.RuntimeDir} {
		if err := chownTree(dir, acct); err != nil {
			return fmt.Errorf("postgres: give %s to user %s: %w", dir, acct.name, err)
		}
	}
	for _, dir := range []string{opts.DataDir, opts.RuntimeDir, opts.BinariesDir} {
		if err := checkReachable(dir, acct); err != nil {
			return err
		}
	}
	return nil
}

// mkdir creates dir with perm, and the folders above it that are missing
// with 0755 (MkdirAll would give them perm too).
func mkdir(dir string, perm os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return err
	}
	if err := os.Mkdir(dir, perm); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return nil
}

// chownTree gives dir and everything under it to acct, unless dir already
// belongs to acct.
func chownTree(dir string, acct *account) error {
	if st, err := statT(dir); err != nil {
		return err
	} else if st.Uid == acct.uid && st.Gid == acct.gid {
		return nil
	}
	return filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, int(acct.uid), int(acct.gid))
	})
}

// checkReachable checks that acct may search dir and every folder above it,
// from the permission bits (ACLs are not read).
func checkReachable(dir string, acct *account) error {
	for p := dir; ; p = filepath.Dir(p) {
		st, err := statT(p)
		if err != nil {
			return fmt.Errorf("postgres: %s: %w", p, err)
		}
		if !permits(st, acct, 0o1) {
			return fmt.Errorf("postgres: user %s, which runs PostgreSQL, cannot reach %s: %s is not searchable by it (mode %v, owner uid %d, gid %d); run coder as a non-root user, point --global-config at a folder that user can reach, or use an external database (--postgres-url)",
				acct.name, dir, p, fs.FileMode(st.Mode&0o7777), st.Uid, st.Gid)
		}
		if p == filepath.Dir(p) {
			return nil
		}
	}
}

// permits reports whether acct (with its primary group only) has the
// permission bit (4 read, 2 write, 1 search/execute) on st.
func permits(st *syscall.Stat_t, acct *account, bit uint32) bool {
	switch {
	case st.Uid == acct.uid:
		return st.Mode&(bit<<6) != 0
	case st.Gid == acct.gid:
		return st.Mode&(bit<<3) != 0
	default:
		return st.Mode&bit != 0
	}
}

func statT(p string) (*syscall.Stat_t, error) {
	info, err := os.Stat(p)
	if err != nil {
		return nil, err
	}
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return nil, fmt.Errorf("%s: no unix file status", p)
	}
	return st, nil
}

// lockDataDir takes the data directory's flock without waiting. The helper
// inherits the descriptor and holds the lock while it lives.
func lockDataDir(dataDir string) (*os.File, error) {
	f, err := os.Open(dataDir)
	if err != nil {
		return nil, fmt.Errorf("postgres: lock %s: %w", dataDir, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: another coder server runs PostgreSQL on %s; stop it or use another --global-config", ErrInUse, dataDir)
		}
		return nil, fmt.Errorf("postgres: lock %s: %w", dataDir, err)
	}
	return f, nil
}

// stopStale stops the postmaster that dataDir/postmaster.pid names if it is
// still running in dataDir, and removes the pid file once no such process
// runs. The caller holds the data directory's lock, so the postmaster has
// no helper any more.
func stopStale(dataDir string, log *slog.Logger) error {
	pidFile := filepath.Join(dataDir, "postmaster.pid")
	pid, err := readPostmasterPID(dataDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if errors.Is(err, errBadPID) {
		log.Warn("removing an unreadable postmaster.pid", "file", pidFile)
		return removePidFile(pidFile)
	}
	if err != nil {
		return fmt.Errorf("postgres: read %s: %w", pidFile, err)
	}
	if !isPostmasterOf(pid, dataDir) {
		log.Info("removing a stale postmaster.pid; its process is gone", "file", pidFile, "pid", pid)
		return removePidFile(pidFile)
	}
	log.Warn("stopping a PostgreSQL server left running by an earlier coder server", "pid", pid, "data_dir", dataDir)
	start := time.Now()
	_ = syscall.Kill(pid, syscall.SIGINT) // fast shutdown
	if !waitGone(pid, staleStopTimeout) {
		log.Warn("the stale PostgreSQL server ignored fast shutdown; killing it", "pid", pid, "waited", staleStopTimeout)
		_ = syscall.Kill(pid, syscall.SIGKILL)
		if !waitGone(pid, staleKillTimeout) {
			return fmt.Errorf("postgres: stale PostgreSQL server (pid %d) on %s survived SIGKILL", pid, dataDir)
		}
	}
	log.Info("stopped the stale PostgreSQL server", "pid", pid, "took", time.Since(start).Round(time.Millisecond))
	return removePidFile(pidFile)
}

// errBadPID: postmaster.pid does not start with a pid.
var errBadPID = errors.New("postmaster.pid does not start with a pid")

// readPostmasterPID reads the pid that dataDir/postmaster.pid names.
func readPostmasterPID(dataDir string) (int, error) {
	pidFile := filepath.Join(dataDir, "postmaster.pid")
	b, err := os.ReadFile(pidFile)
	if err != nil {
		return 0, err
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("postgres: %s: %w", pidFile, errBadPID)
	}
	return pid, nil
}

func removePidFile(p string) error {
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("postgres: remove %s: %w", p, err)
	}
	return nil
}

// isPostmasterOf reports whether pid is a live postgres process whose
// working directory is dataDir (the postmaster changes into its data
// directory). When the working directory cannot be read the name decides.
func isPostmasterOf(pid int, dataDir string) bool {
	if !alive(pid) {
		return false
	}
	comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	if err != nil || strings.TrimSpace(string(comm)) != "postgres" {
		return false
	}
	cwd, err := os.Readlink(fmt.Sprintf("/proc/%d/cwd", pid))
	if err != nil {
		return true
	}
	want, err := filepath.EvalSymlinks(dataDir)
	if err != nil {
		want = dataDir
	}
	return filepath.Clean(cwd) == want
}

// alive reports whether pid exists and is not a zombie (a postmaster whose
// parent died may wait for a reaper that never comes).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command name in parentheses.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 || i+2 >= len(b) {
		return false
	}
	state := b[i+2]
	return state != 'Z' && state != 'X'
}

func waitGone(pid int, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if !alive(pid) {
			return true
		}
		time.Sleep(50 * time.Millisecond)
	}
	return !alive(pid)
}

// killProcess sends pid SIGKILL.
func killProcess(pid int) error { return syscall.Kill(pid, syscall.SIGKILL) }
