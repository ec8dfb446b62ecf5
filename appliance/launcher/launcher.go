// Package launcher starts and stops workspace processes as their owners'
// own unprivileged OS accounts, so that a member's workspace on the
// appliance host never runs as root or as the appliance's service user.
//
// It is the only part of the appliance that keeps root. The server side
// (Server) listens on a unix socket that only the service user (and root)
// may use, checked by the socket file's owner and mode and again by the
// peer's credentials (SO_PEERCRED). Templates reach it through the client
// command `coder appliance launch`, which the provisioner names in
// CODER_WORKSPACE_LAUNCHER.
//
// What a caller decides and what it does not:
//
//   - the owner and workspace names (validated as coderd validates them);
//     from them the launcher derives the account (AccountName) and the
//     workspace folder, WorkspacesDir/<owner>/<workspace>: a caller names
//     no path and no uid;
//   - the command and the environment variables the process gets. They
//     reach only that process (not argv, which every user can read in
//     /proc), so secrets such as the agent token stay with the owner's uid.
//
// Accounts are made on demand with useradd: their own group, no
// supplementary groups (no sudo), a locked password, the comment
// AccountComment(owner). An existing account of that name without that
// comment is never used. The launcher creates WorkspacesDir (root's, 0755)
// and WorkspacesDir/<owner> (the account's, 0700); the workspace folder
// itself is made by the started process, as the account, so the launcher
// never follows a path a member could have planted. Each started process
// gets a new session; its pid is kept in StateDir (root's, 0700), and Stop
// signals it only while it still runs as that account.
//
// It must not run anything as root on a caller's behalf, accept a path or
// a uid from a caller, or import the rest of the appliance.
package launcher

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Request is one call on the socket: a JSON object on one line.
type Request struct {
	// Op is "start" or "stop".
	Op        string `json:"op"`
	Owner     string `json:"owner"`
	Workspace string `json:"workspace"`
	// Command is the argv to start (start only).
	Command []string `json:"command,omitempty"`
	// Env is KEY=VALUE pairs the process gets (start only), on top of
	// HOME, USER, LOGNAME, SHELL and PATH.
	Env []string `json:"env,omitempty"`
}

// Response is the launcher's answer: a JSON object on one line.
type Response struct {
	Error string `json:"error,omitempty"`
	// PID is the started (or stopped) process; 0 when stop found none.
	PID int `json:"pid,omitempty"`
	// User and UID are the owner's account, Home the workspace folder.
	User string `json:"user,omitempty"`
	UID  int    `json:"uid,omitempty"`
	Home string `json:"home,omitempty"`
}

// Options configure a Server.
type Options struct {
	// Socket is the unix socket path to listen on, in a folder of root's
	// that no one else may write.
	Socket string
	// WorkspacesDir holds a folder per owner, each holding a folder per
	// workspace.
	WorkspacesDir string
	// StateDir keeps the pid of every started process (root's only).
	StateDir string
	// ServiceUser is the account allowed to connect besides root: the
	// socket is given to it.
	ServiceUser string
	// StopTimeout is how long Stop waits after SIGTERM before SIGKILL
	// (default 10s).
	StopTimeout time.Duration
	Logger      *slog.Logger
}

// Server is the privileged side.
type Server struct {
	opts       Options
	log        *slog.Logger
	serviceUID int
	ready      chan struct{}
	// accounts serializes useradd (it locks /etc/passwd, and two calls for
	// one owner must make one account).
	accounts sync.Mutex
}

// New checks opts; it starts nothing.
func New(opts Options) (*Server, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("launcher: the workspace launcher must run as root (it starts each owner's workspace as that owner's own account)")
	}
	if opts.Socket == "" || opts.WorkspacesDir == "" || opts.StateDir == "" || opts.ServiceUser == "" {
		return nil, errors.New("launcher: Socket, WorkspacesDir, StateDir and ServiceUser are required")
	}
	u, err := user.Lookup(opts.ServiceUser)
	if err != nil {
		return nil, fmt.Errorf("launcher: look up the service user: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	if uid == 0 {
		return nil, fmt.Errorf("launcher: the service user %q is root", opts.ServiceUser)
	}
	if opts.StopTimeout <= 0 {
		opts.StopTimeout = 10 * time.Second
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Server{opts: opts, log: log, serviceUID: uid, ready: make(chan struct{})}, nil
}

// Ready is closed once the socket accepts calls.
func (s *Server) Ready() <-chan struct{} { return s.ready }

// Run serves the socket until ctx ends; it returns nil then.
func (s *Server) Run(ctx context.Context) error {
	for _, d := range []struct {
		path string
		mode os.FileMode
	}{{s.opts.WorkspacesDir, 0o755}, {filepath.Dir(s.opts.Socket), 0o755}, {s.opts.StateDir, 0o700}} {
		if err := os.MkdirAll(d.path, d.mode); err != nil {
			return fmt.Errorf("launcher: create %s: %w", d.path, err)
		}
		if err := os.Chmod(d.path, d.mode); err != nil {
			return fmt.Errorf("launcher: %w", err)
		}
	}
	// Root's own folders: nobody else may plant a link in them.
	for _, d := range []string{s.opts.WorkspacesDir, s.opts.StateDir, filepath.Dir(s.opts.Socket)} {
		if err := ownedByRoot(d); err != nil {
			return fmt.Errorf("launcher: %w", err)
		}
	}
	_ = os.Remove(s.opts.Socket)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: s.opts.Socket, Net: "unix"})
	if err != nil {
		return fmt.Errorf("launcher: listen on %s: %w", s.opts.Socket, err)
	}
	defer ln.Close()
	if err := os.Chown(s.opts.Socket, s.serviceUID, -1); err != nil {
		return fmt.Errorf("launcher: give the socket to %s: %w", s.opts.ServiceUser, err)
	}
	if err := os.Chmod(s.opts.Socket, 0o600); err != nil {
		return fmt.Errorf("launcher: %w", err)
	}
	s.log.Info("workspace launcher ready", "socket", s.opts.Socket, "workspaces", s.opts.WorkspacesDir, "service_user", s.opts.ServiceUser)
	close(s.ready)

	var wg sync.WaitGroup
	defer wg.Wait()
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	for {
		conn, err := ln.AcceptUnix()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("launcher: accept: %w", err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer conn.Close()
			s.serve(ctx, conn)
		}()
	}
}

// serve answers one call.
func (s *Server) serve(ctx context.Context, conn *net.UnixConn) {
	enc := json.NewEncoder(conn)
	uid, err := peerUID(conn)
	if err != nil || (uid != 0 && uid != s.serviceUID) {
		s.log.Warn("launcher call refused: not the service user", "uid", uid, "err", err)
		_ = enc.Encode(Response{Error: "only the appliance's service user may call the workspace launcher"})
		return
	}
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	line, err := bufio.NewReader(conn).ReadBytes('\n')
	if err != nil {
		_ = enc.Encode(Response{Error: "read the request: " + err.Error()})
		return
	}
	var req Request
	if err := json.Unmarshal(line, &req); err != nil {
		_ = enc.Encode(Response{Error: "decode the request: " + err.Error()})
		return
	}
	var resp Response
	switch req.Op {
	case "start":
		resp, err = s.start(req)
	case "stop":
		resp, err = s.stop(ctx, req)
	default:
		err = fmt.Errorf("unknown op %q (want start or stop)", req.Op)
	}
	if err != nil {
		s.log.Error("launcher call failed", "op", req.Op, "owner", req.Owner, "workspace", req.Workspace, "err", err)
		resp = Response{Error: err.Error()}
	}
	_ = enc.Encode(resp)
}

// nameRe is coderd's rule for user and workspace names.
var nameRe = regexp.MustCompile(`^[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,30}[a-zA-Z0-9])?$`)

// envNameRe is what an environment variable's name may be.
var envNameRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

func checkNames(owner, workspace string) error {
	if !nameRe.MatchString(owner) {
		return fmt.Errorf("owner %q is not a valid user name", owner)
	}
	if !nameRe.MatchString(workspace) {
		return fmt.Errorf("workspace %q is not a valid workspace name", workspace)
	}
	return nil
}

// AccountName is the OS account of a workspace owner: "ws-" and the
// owner's name in lower case (coderd's names fit the 32 characters an
// account name may have).
func AccountName(owner string) string { return "ws-" + strings.ToLower(owner) }

// AccountComment marks an account as the launcher's (the passwd comment).
func AccountComment(owner string) string {
	return "coder workspace account of " + strings.ToLower(owner)
}

// Home is the workspace folder of owner's workspace under workspacesDir.
func Home(workspacesDir, owner, workspace string) string {
	return filepath.Join(workspacesDir, strings.ToLower(owner), strings.ToLower(workspace))
}

type account struct {
	name     string
	uid, gid int
	shell    string
}

// ensureAccount returns owner's account, creating it when missing.
func (s *Server) ensureAccount(owner string) (account, error) {
	s.accounts.Lock()
	defer s.accounts.Unlock()
	name := AccountName(owner)
	ownerDir := filepath.Join(s.opts.WorkspacesDir, strings.ToLower(owner))
	acct, err := lookupAccount(name, owner)
	if errors.Is(err, errNoAccount) {
		shell := "/bin/sh"
		if _, err := os.Stat("/bin/bash"); err == nil {
			shell = "/bin/bash"
		}
		var out []byte
		// useradd fails when another process holds /etc/passwd's lock (or
		// made the same account a moment ago): look again, then retry.
		for attempt := 0; attempt < 20; attempt++ {
			out, err = exec.Command("useradd", "--no-create-home", "--home-dir", ownerDir, "--shell", shell,
				"--user-group", "--comment", AccountComment(owner), name).CombinedOutput()
			if err == nil {
				break
			}
			if _, lerr := lookupAccount(name, owner); lerr == nil {
				err = nil
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil {
			return account{}, fmt.Errorf("create the account %s for %s: %v: %s", name, owner, err, strings.TrimSpace(string(out)))
		}
		s.log.Info("workspace account created", "owner", owner, "account", name)
		acct, err = lookupAccount(name, owner)
	}
	if err != nil {
		return account{}, err
	}
	// The owner's folder: the account's own, 0700. Root made its parent,
	// so no one could have put a link here; a folder that is there must be
	// a real folder of the account's.
	st, err := os.Lstat(ownerDir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		if err := os.Mkdir(ownerDir, 0o700); err != nil {
			return account{}, err
		}
		if err := os.Lchown(ownerDir, acct.uid, acct.gid); err != nil {
			return account{}, err
		}
	case err != nil:
		return account{}, err
	case !st.IsDir() || int(st.Sys().(*syscall.Stat_t).Uid) != acct.uid:
		return account{}, fmt.Errorf("%s is not a folder of the account %s: move it away", ownerDir, name)
	}
	if err := os.Chmod(ownerDir, 0o700); err != nil {
		return account{}, err
	}
	return acct, nil
}

var errNoAccount = errors.New("no such account")

// lookupAccount finds the launcher's account name for owner, refusing one
// that the launcher did not make.
func lookupAccount(name, owner string) (account, error) {
	u, err := user.Lookup(name)
	if err != nil {
		var unknown user.UnknownUserError
		if errors.As(err, &unknown) {
			return account{}, errNoAccount
		}
		return account{}, err
	}
	if u.Name != AccountComment(owner) {
		return account{}, fmt.Errorf("the host already has an account %s that is not a workspace account (comment %q): rename it", name, u.Name)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if uid == 0 || gid == 0 {
		return account{}, fmt.Errorf("account %s has uid or gid 0", name)
	}
	return account{name: name, uid: uid, gid: gid, shell: passwdShell(uid)}, nil
}

// passwdShell is uid's shell from /etc/passwd (/bin/sh when unknown).
func passwdShell(uid int) string {
	if b, err := os.ReadFile("/etc/passwd"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Split(line, ":"); len(f) >= 7 && f[2] == strconv.Itoa(uid) && f[6] != "" {
				return f[6]
			}
		}
	}
	return "/bin/sh"
}

// starter makes the workspace folder as the account and starts the
// command in a session of its own (setsid -f, so it outlives the starter
// with no signal ignored), its output appended to the folder's
// .coder-agent.log; it prints the command's pid. $1 is the folder, the rest
// the command.
const starter = `set -e
(umask 077 && mkdir -p -- "$1")
cd -- "$1"
log="$1/.coder-agent.log"
shift
setsid -f sh -c 'echo $$; exec "$@" >>"$0" 2>&1 </dev/null' "$log" "$@"
`

func (s *Server) start(req Request) (Response, error) {
	if err := checkNames(req.Owner, req.Workspace); err != nil {
		return Response{}, err
	}
	if len(req.Command) == 0 {
		return Response{}, errors.New("start needs a command")
	}
	for _, kv := range req.Env {
		if k, _, ok := strings.Cut(kv, "="); !ok || !envNameRe.MatchString(k) {
			return Response{}, fmt.Errorf("environment entry %q is not NAME=VALUE", kv)
		}
	}
	acct, err := s.ensureAccount(req.Owner)
	if err != nil {
		return Response{}, err
	}
	home := Home(s.opts.WorkspacesDir, req.Owner, req.Workspace)
	if old, _ := s.running(req, acct); old > 0 {
		return Response{}, fmt.Errorf("workspace %s/%s already runs (pid %d): stop it first", req.Owner, req.Workspace, old)
	}
	env := append([]string{
		"HOME=" + home, "USER=" + acct.name, "LOGNAME=" + acct.name, "SHELL=" + acct.shell,
		"PATH=/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin",
	}, req.Env...)
	cmd := exec.Command("/bin/sh", append([]string{"-c", starter, "launch", home}, req.Command...)...)
	cmd.Env = env
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Credential: &syscall.Credential{Uid: uint32(acct.uid), Gid: uint32(acct.gid), Groups: []uint32{}},
	}
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return Response{}, fmt.Errorf("start the workspace as %s: %v: %s", acct.name, err, strings.TrimSpace(string(ee.Stderr)))
		}
		return Response{}, fmt.Errorf("start the workspace as %s: %w", acct.name, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil || pid <= 0 {
		return Response{}, fmt.Errorf("start the workspace as %s: no pid in %q", acct.name, out)
	}
	if err := os.MkdirAll(filepath.Dir(s.pidFile(req)), 0o700); err != nil {
		return Response{}, err
	}
	if err := os.WriteFile(s.pidFile(req), []byte(strconv.Itoa(pid)+"\n"), 0o600); err != nil {
		return Response{}, err
	}
	s.log.Info("workspace started", "owner", req.Owner, "workspace", req.Workspace, "account", acct.name, "uid", acct.uid, "pid", pid)
	return Response{PID: pid, User: acct.name, UID: acct.uid, Home: home}, nil
}

// pidFile keeps the pid of req's workspace process.
func (s *Server) pidFile(req Request) string {
	return filepath.Join(s.opts.StateDir, strings.ToLower(req.Owner), strings.ToLower(req.Workspace)+".pid")
}

// running returns the pid of req's workspace process while it runs as
// acct (0 when it is gone, or the pid now belongs to someone else).
func (s *Server) running(req Request, acct account) (int, error) {
	b, err := os.ReadFile(s.pidFile(req))
	if err != nil {
		return 0, nil
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0, nil
	}
	if uid, ok := processUID(pid); !ok || uid != acct.uid {
		return 0, nil
	}
	return pid, nil
}

func (s *Server) stop(ctx context.Context, req Request) (Response, error) {
	if err := checkNames(req.Owner, req.Workspace); err != nil {
		return Response{}, err
	}
	acct, err := lookupAccount(AccountName(req.Owner), req.Owner)
	if errors.Is(err, errNoAccount) {
		return Response{}, nil // never started
	}
	if err != nil {
		return Response{}, err
	}
	pid, _ := s.running(req, acct)
	resp := Response{User: acct.name, UID: acct.uid, Home: Home(s.opts.WorkspacesDir, req.Owner, req.Workspace)}
	if pid == 0 {
		_ = os.Remove(s.pidFile(req))
		return resp, nil
	}
	resp.PID = pid
	_ = syscall.Kill(pid, syscall.SIGTERM)
	deadline := time.Now().Add(s.opts.StopTimeout)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if uid, ok := processUID(pid); !ok || uid != acct.uid {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if uid, ok := processUID(pid); ok && uid == acct.uid {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	_ = os.Remove(s.pidFile(req))
	s.log.Info("workspace stopped", "owner", req.Owner, "workspace", req.Workspace, "pid", pid)
	return resp, nil
}

// processUID is the real uid pid runs as; ok is false when pid is gone
// (or a zombie).
func processUID(pid int) (int, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, false
	}
	uid, ok := -1, true
	for _, line := range strings.Split(string(b), "\n") {
		if v, found := strings.CutPrefix(line, "State:"); found && strings.Contains(v, "Z") {
			ok = false
		}
		if v, found := strings.CutPrefix(line, "Uid:"); found {
			if f := strings.Fields(v); len(f) > 0 {
				uid, _ = strconv.Atoi(f[0])
			}
		}
	}
	return uid, ok && uid >= 0
}

// peerUID is the uid of the process at the other end of conn.
func peerUID(conn *net.UnixConn) (int, error) {
	raw, err := conn.SyscallConn()
	if err != nil {
		return -1, err
	}
	var cred *syscall.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil {
		return -1, err
	}
	if credErr != nil {
		return -1, credErr
	}
	return int(cred.Uid), nil
}

// ownedByRoot checks that dir is a real folder of root's that only root
// may write.
func ownedByRoot(dir string) error {
	st, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	sys := st.Sys().(*syscall.Stat_t)
	if !st.IsDir() || sys.Uid != 0 || st.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("%s must be a folder of root's that no one else may write", dir)
	}
	return nil
}

// Call sends req to the launcher at socket and returns its answer; an
// answer with an error is returned as one.
func Call(ctx context.Context, socket string, req Request) (Response, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		return Response{}, fmt.Errorf("reach the workspace launcher at %s (is coder appliance up running as root, or coder-appliance-launcher.service started?): %w", socket, err)
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	b, _ := json.Marshal(req)
	// A refusal may come (and the launcher hang up) before the request is
	// written: the answer is read either way.
	_, werr := conn.Write(append(b, '\n'))
	var resp Response
	if err := json.NewDecoder(conn).Decode(&resp); err != nil {
		if werr != nil {
			return Response{}, fmt.Errorf("call the workspace launcher: %w", werr)
		}
		return Response{}, fmt.Errorf("read the workspace launcher's answer: %w", err)
	}
	if resp.Error != "" {
		return resp, fmt.Errorf("workspace launcher: %s", resp.Error)
	}
	return resp, nil
}
