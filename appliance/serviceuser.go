package appliance

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"airgapcoder/appliance/launcher"
	"airgapcoder/bundle"
	"airgapcoder/internal/atomicfile"
)

// Privilege separation
//
// Only two things on the appliance host run as root: `coder appliance
// install` (it writes releases, the service user and the systemd units) and
// the workspace launcher (package launcher), which starts each workspace of
// the process template as its owner's own account. Everything else (the
// PostgreSQL server, the mirror, coderd, the provisioners and the terraform
// they run) runs as the service user:
//
//   - under systemd, coder-appliance.service has User= and
//     coder-appliance-launcher.service (root) serves the launcher;
//   - `coder appliance up` started as root by hand does the same in one
//     command: it keeps root only for the launcher and runs the appliance
//     as the service user in a child process (UpAsRoot).
//
// What the service user owns, no one else may read: DIR/data (the database,
// its password, the audit journal, the service user's home with rootless
// podman's storage), DIR/cache (terraform's work folders and state, which
// hold agent tokens), DIR/run, and the keys in DIR/certs. Workspaces live
// in DIR/workspaces/<owner>/<workspace>, each owner's folder the owner
// account's own (0700).

// Layout paths of privilege separation.
func (l Layout) Workspaces() string     { return filepath.Join(l.Dir, "workspaces") }
func (l Layout) LauncherDir() string    { return filepath.Join(l.Dir, "launcher") }
func (l Layout) LauncherSocket() string { return filepath.Join(l.LauncherDir(), "launcher.sock") }

// ServiceHome is the service user's HOME while it runs the appliance:
// rootless podman keeps its storage and registry trust there.
func (l Layout) ServiceHome() string { return filepath.Join(l.Data(), "home") }

// ServiceRuntime is the service user's XDG_RUNTIME_DIR (rootless podman's
// runtime files).
func (l Layout) ServiceRuntime() string { return filepath.Join(l.Run(), "user") }

// LaunchCommand is the executable a template runs to start or stop a
// workspace through the launcher (the provisioner names it in
// CODER_WORKSPACE_LAUNCHER): `coder appliance launch --socket ...`.
func (l Layout) LaunchCommand() string { return filepath.Join(l.Run(), "launch") }

// ServeLauncher runs the workspace launcher of the appliance in dir until
// ctx ends (as root: `coder appliance launcher`, and UpAsRoot). It first
// gives the service user what it must own; ready, when set, is closed once
// the socket accepts calls.
func ServeLauncher(ctx context.Context, dir string, log *slog.Logger, ready chan<- struct{}) error {
	l, acct, err := prepareServiceUser(dir, nil)
	if err != nil {
		return err
	}
	return serveLauncher(ctx, l, acct, log, ready)
}

// serveLauncher is ServeLauncher once the service user is prepared.
func serveLauncher(ctx context.Context, l Layout, acct serviceAccount, log *slog.Logger, ready chan<- struct{}) error {
	srv, err := launcher.New(launcher.Options{
		Socket: l.LauncherSocket(), WorkspacesDir: l.Workspaces(), StateDir: filepath.Join(l.LauncherDir(), "pids"),
		ServiceUser: acct.Name, Logger: log.With("component", "launcher"),
	})
	if err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	select {
	case <-srv.Ready():
		if ready != nil {
			close(ready)
		}
	case err := <-done:
		return err
	}
	return <-done
}

// UpAsRoot is `coder appliance up` started as root: it serves the
// workspace launcher (not for role: proxy, which starts no workspaces) and
// runs the appliance (this binary with args) as the service user, passing
// SIGTERM on when ctx ends, until that child exits. The child's failure is
// returned.
func UpAsRoot(ctx context.Context, opts UpOptions, args []string) error {
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	l, acct, err := prepareServiceUser(opts.Dir, opts.Overrides)
	if err != nil {
		return err
	}
	exe, err := serviceExecutable(l, acct)
	if err != nil {
		return err
	}
	cfg, err := LoadConfig(l.Dir, opts.Overrides)
	if err != nil {
		return err
	}
	if !cfg.IsProxy() { // a proxy starts no workspaces
		lctx, stopLauncher := context.WithCancel(context.WithoutCancel(ctx))
		defer stopLauncher()
		ready := make(chan struct{})
		launcherDone := make(chan error, 1)
		go func() { launcherDone <- serveLauncher(lctx, l, acct, log, ready) }()
		select {
		case <-ready:
		case err := <-launcherDone:
			return fmt.Errorf("workspace launcher: %w", err)
		}
		defer func() { stopLauncher(); <-launcherDone }()
	}

	cmd := exec.Command(exe, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, os.Stdout, os.Stderr
	cmd.Env = serviceEnv(withoutNotifySocket(os.Environ()), l, acct)
	var relay *notifyRelay
	if os.Getenv(notifySocketEnv) != "" {
		// systemd hears only its main process (NotifyAccess=main): the
		// child's messages come to a socket of ours and are passed on.
		if relay, err = relayNotifications(filepath.Join(l.Run(), "notify.sock"), acct, log); err != nil {
			return err
		}
		defer relay.Close()
		cmd.Env = append(cmd.Env, notifySocketEnv+"="+relay.Addr())
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Credential: &syscall.Credential{Uid: uint32(acct.UID), Gid: uint32(acct.GID), Groups: []uint32{}},
		// Should this process die (even by SIGKILL), the appliance stops
		// too rather than run on without its launcher.
		Pdeathsig: syscall.SIGTERM,
	}
	if cfg.IsProxy() {
		log.Info("running the workspace proxy as the service user", "user", acct.Name, "uid", acct.UID)
	} else {
		log.Info("running the appliance as the service user; root keeps only the workspace launcher", "user", acct.Name, "uid", acct.UID)
	}
	started := make(chan error, 1)
	exited := make(chan error, 1)
	go func() {
		// Pdeathsig fires when the thread that started the child ends: keep
		// that thread, locked to this goroutine, until the child is gone.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		exited <- cmd.Wait()
	}()
	if err := <-started; err != nil {
		return fmt.Errorf("start the appliance as %s: %w", acct.Name, err)
	}
	if relay != nil {
		relay.From(cmd.Process.Pid)
	}
	select {
	case err = <-exited:
	case <-ctx.Done():
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err = <-exited:
		case <-time.After(120 * time.Second):
			_ = cmd.Process.Kill()
			err = <-exited
		}
		if err == nil || ctx.Err() != nil && isSignalExit(err, syscall.SIGTERM) {
			return nil
		}
	}
	if err != nil {
		return fmt.Errorf("the appliance (as %s) exited: %w", acct.Name, err)
	}
	return nil
}

// serviceExecutable is the coder binary the service user runs the
// appliance with: this one, or else (when the service user may not run it,
// say from root's home) the current release's own.
func serviceExecutable(l Layout, acct serviceAccount) (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", err
	}
	candidates := []string{self}
	if rel, err := l.CurrentRelease(); err == nil && rel != "" {
		candidates = append(candidates, filepath.Join(l.Release(rel), bundle.CoderPath(runtime.GOOS+"/"+runtime.GOARCH)))
	}
	var errs []error
	for _, c := range candidates {
		err := reachableBy(filepath.Dir(c), acct)
		if err == nil {
			var st os.FileInfo
			if st, err = os.Stat(c); err == nil && st.Mode().Perm()&0o001 == 0 {
				err = fmt.Errorf("%s has mode %o", c, st.Mode().Perm())
			}
		}
		if err == nil {
			return c, nil
		}
		errs = append(errs, err)
	}
	return "", fmt.Errorf("the service user %s may run no coder binary: %w", acct.Name, errors.Join(errs...))
}

func isSignalExit(err error, sig syscall.Signal) bool {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == sig
}

// serviceEnv is the environment of the appliance run as acct: the
// caller's, with the account's identity and its HOME and runtime folder.
func serviceEnv(environ []string, l Layout, acct serviceAccount) []string {
	drop := map[string]bool{"HOME": true, "USER": true, "LOGNAME": true, "XDG_RUNTIME_DIR": true, "XDG_CONFIG_HOME": true, "XDG_DATA_HOME": true}
	var env []string
	for _, kv := range environ {
		k, _, _ := strings.Cut(kv, "=")
		if !drop[k] {
			env = append(env, kv)
		}
	}
	return append(env, "HOME="+l.ServiceHome(), "USER="+acct.Name, "LOGNAME="+acct.Name, "XDG_RUNTIME_DIR="+l.ServiceRuntime())
}

// prepareServiceUser makes sure the service user exists with subordinate
// ids (rootless podman) and owns what it must, alone (as root; install and
// both root entry points of up call it).
func prepareServiceUser(dir string, overrides map[string]any) (Layout, serviceAccount, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return Layout{}, serviceAccount{}, err
	}
	l := Layout{Dir: abs}
	cfg, err := LoadConfig(abs, overrides)
	if err != nil {
		return l, serviceAccount{}, err
	}
	if os.Geteuid() != 0 {
		return l, serviceAccount{}, errors.New("only root can prepare the service user")
	}
	acct, err := ensureServiceUser(cfg.ServiceUser)
	if err != nil {
		return l, acct, err
	}
	if err := reachableBy(l.Dir, acct); err != nil {
		return l, acct, err
	}
	if !cfg.IsProxy() { // rootless podman's; a proxy runs no workspaces
		if err := ensureSubordinateIDs(acct.Name); err != nil {
			return l, acct, err
		}
	}
	if err := giveToServiceUser(l, acct); err != nil {
		return l, acct, fmt.Errorf("give the service user %s its folders: %w", acct.Name, err)
	}
	return l, acct, nil
}

// reachableBy checks that acct may pass through every folder down to dir.
func reachableBy(dir string, acct serviceAccount) error {
	for d := dir; ; d = filepath.Dir(d) {
		st, err := os.Stat(d)
		if err != nil {
			return err
		}
		sys := st.Sys().(*syscall.Stat_t)
		perm := st.Mode().Perm()
		ok := perm&0o001 != 0 || int(sys.Uid) == acct.UID && perm&0o100 != 0 || int(sys.Gid) == acct.GID && perm&0o010 != 0
		if !ok {
			return fmt.Errorf("the service user %s cannot reach %s: %s has mode %o; let it through (chmod o+x %s) or put the appliance elsewhere",
				acct.Name, dir, d, perm, d)
		}
		if d == filepath.Dir(d) {
			return nil
		}
	}
}

// giveToServiceUser creates the service user's folders and makes them its
// own. DIR/certs and the audit journal, which root's commands (certs
// import, backup, install) write to, are gone through every time; a
// folder tree is gone through only when its top is not the service
// user's yet (an appliance that ran as root before).
func giveToServiceUser(l Layout, acct serviceAccount) error {
	for _, d := range []struct {
		path string
		mode os.FileMode
	}{
		{l.Data(), 0o700}, {l.Cache(), 0o700}, {l.Run(), 0o700},
		{l.ServiceHome(), 0o700}, {l.ServiceRuntime(), 0o700},
		{filepath.Join(l.Dir, "certs"), 0o755},
	} {
		if err := os.MkdirAll(d.path, d.mode); err != nil {
			return err
		}
		st, err := os.Lstat(d.path)
		if err != nil {
			return err
		}
		if int(st.Sys().(*syscall.Stat_t).Uid) != acct.UID || d.path == filepath.Join(l.Dir, "certs") {
			if err := chownTree(d.path, acct); err != nil {
				return err
			}
		}
		if err := os.Chmod(d.path, d.mode); err != nil {
			return err
		}
	}
	if err := os.Lchown(l.AuditJournal(), acct.UID, acct.GID); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// chownTree gives every file under root to acct, links included (not
// followed).
func chownTree(root string, acct serviceAccount) error {
	return filepath.WalkDir(root, func(path string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(path, acct.UID, acct.GID)
	})
}

// ensureSubordinateIDs gives name a range of 65536 subordinate uids and
// gids (/etc/subuid, /etc/subgid) when it has none: rootless podman maps a
// container's users into them.
func ensureSubordinateIDs(name string) error {
	var args []string
	next := 100000
	for _, f := range []struct{ file, flag string }{{"/etc/subuid", "--add-subuids"}, {"/etc/subgid", "--add-subgids"}} {
		has, end, err := readSubordinate(f.file, name)
		if err != nil {
			return err
		}
		next = max(next, end)
		if !has {
			args = append(args, f.flag)
		}
	}
	if len(args) == 0 {
		return nil
	}
	rng := fmt.Sprintf("%d-%d", next, next+65535)
	var cmd []string
	for _, a := range args {
		cmd = append(cmd, a, rng)
	}
	if out, err := exec.Command("usermod", append(cmd, name)...).CombinedOutput(); err != nil {
		return fmt.Errorf("give %s subordinate ids %s (for rootless podman): %v: %s", name, rng, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// readSubordinate reports whether file has a range for name, and the end
// of the highest range in it.
func readSubordinate(file, name string) (has bool, end int, err error) {
	f, err := os.Open(file)
	if errors.Is(err, fs.ErrNotExist) {
		return false, 0, nil
	}
	if err != nil {
		return false, 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Split(strings.TrimSpace(sc.Text()), ":")
		if len(fields) != 3 {
			continue
		}
		start, err1 := strconv.Atoi(fields[1])
		count, err2 := strconv.Atoi(fields[2])
		if err1 != nil || err2 != nil {
			continue
		}
		end = max(end, start+count)
		if fields[0] == name {
			has = true
		}
	}
	return has, end, sc.Err()
}

// writeLaunchCommand writes the executable templates call to reach the
// launcher: `exec <coder> appliance launch --socket <socket> "$@"`.
func writeLaunchCommand(l Layout, coder string) error {
	script := "#!/bin/sh\n# Starts and stops workspaces as their owners' accounts (coder appliance launch --help).\nexec " +
		shellQuote(coder) + " appliance launch --socket " + shellQuote(l.LauncherSocket()) + " \"$@\"\n"
	return atomicfile.Write(l.LaunchCommand(), []byte(script), 0o700)
}

// shellQuote quotes s as one word of a POSIX shell command.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
