package launcher_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"airgapcoder/appliance/launcher"
	"airgapcoder/internal/testrun"
	"airgapcoder/internal/testwait"
)

// serve starts a launcher for the test (root is required: it makes OS
// accounts) and returns its socket.
func serve(t *testing.T, serviceUser string) (socket, workspaces string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("the launcher makes OS accounts and starts processes as them: run as root (CI does)")
	}
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// Every folder above the workspaces must be searchable by the accounts.
	for d := filepath.Dir(dir); d != "/"; d = filepath.Dir(d) {
		if st, err := os.Stat(d); err == nil && st.Mode().Perm()&0o001 == 0 {
			if err := os.Chmod(d, st.Mode().Perm()|0o011); err != nil {
				t.Fatal(err)
			}
		}
	}
	socket = filepath.Join(dir, "launcher", "launcher.sock")
	workspaces = filepath.Join(dir, "workspaces")
	srv, err := launcher.New(launcher.Options{
		Socket: socket, WorkspacesDir: workspaces, StateDir: filepath.Join(dir, "launcher", "pids"),
		ServiceUser: serviceUser, StopTimeout: 2 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	testrun.Start(t, "launcher", srv.Run, srv.Ready())
	return socket, workspaces
}

func call(t *testing.T, socket string, req launcher.Request) launcher.Response {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := launcher.Call(ctx, socket, req)
	if err != nil {
		t.Fatalf("%s %s/%s: %v", req.Op, req.Owner, req.Workspace, err)
	}
	return resp
}

// waitFile waits for path to hold something and returns it.
func waitFile(t *testing.T, path string) string {
	t.Helper()
	var got string
	testwait.For(t, 10*time.Second, path+" written", func() (bool, string) {
		b, err := os.ReadFile(path)
		got = strings.TrimSpace(string(b))
		return err == nil && len(b) > 0 && strings.HasSuffix(string(b), "\n"), fmt.Sprintf("%q, %v", b, err)
	})
	return got
}

// TestStartRunsAsTheOwnersAccount: each owner's workspace runs as an
// account of its own, never root or the service user; a secret handed in
// the environment is readable only by that account, not by another
// owner's workspace, and never in argv; stop ends the process.
func TestStartRunsAsTheOwnersAccount(t *testing.T) {
	socket, workspaces := serve(t, "nobody")
	nobody, err := user.Lookup("nobody")
	if err != nil {
		t.Fatal(err)
	}
	// The script reads its secret from the environment, writes what a
	// person would check, then stays up.
	script := `id -u > uid.txt; pwd > pwd.txt; echo "$HOME" > home.txt; echo "$SECRET" > secret.txt; exec sleep 300`
	owners := map[string]string{"lt-alice": "alice-secret-1", "lt-bob": "bob-secret-2"}
	pids := map[string]int{}
	for owner, secret := range owners {
		resp := call(t, socket, launcher.Request{Op: "start", Owner: owner, Workspace: "dev",
			Command: []string{"sh", "-c", script}, Env: []string{"SECRET=" + secret}})
		t.Cleanup(func() {
			_, _ = launcher.Call(context.Background(), socket, launcher.Request{Op: "stop", Owner: owner, Workspace: "dev"})
		})
		home := filepath.Join(workspaces, owner, "dev")
		if resp.Home != home || resp.User != launcher.AccountName(owner) || resp.PID <= 0 {
			t.Fatalf("start %s: got %+v, want home %s, user %s and a pid", owner, resp, home, launcher.AccountName(owner))
		}
		if got := waitFile(t, filepath.Join(home, "secret.txt")); got != secret {
			t.Errorf("%s: the secret in the environment: got %q, want %q", owner, got, secret)
		}
		uid := waitFile(t, filepath.Join(home, "uid.txt"))
		if uid == "0" || uid == nobody.Uid || uid != strconv.Itoa(resp.UID) {
			t.Errorf("%s: runs as uid %s, want the account's own %d (not root, not the service user %s)", owner, uid, resp.UID, nobody.Uid)
		}
		if got := waitFile(t, filepath.Join(home, "pwd.txt")); got != home {
			t.Errorf("%s: starts in %q, want %s", owner, got, home)
		}
		if got := waitFile(t, filepath.Join(home, "home.txt")); got != home {
			t.Errorf("%s: HOME %q, want %s", owner, got, home)
		}
		for _, d := range []string{filepath.Dir(home), home} {
			st, err := os.Stat(d)
			if err != nil {
				t.Fatal(err)
			}
			if got := int(st.Sys().(*syscall.Stat_t).Uid); got != resp.UID || st.Mode().Perm() != 0o700 {
				t.Errorf("%s: owned by %d with mode %o, want the account's (%d) with 0700", d, got, st.Mode().Perm(), resp.UID)
			}
		}
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", resp.PID))
		if err != nil {
			t.Fatalf("the started process %d: %v", resp.PID, err)
		}
		if strings.Contains(string(cmdline), secret) {
			t.Errorf("%s: the secret is in the process's argv, which every user can read", owner)
		}
		pids[owner] = resp.PID
	}

	// From alice's account: bob's environment and folder are closed.
	probe := call(t, socket, launcher.Request{Op: "start", Owner: "lt-alice", Workspace: "probe", Command: []string{"sh", "-c",
		fmt.Sprintf(`cat /proc/%d/environ > environ.txt 2> environ.err; echo "exit $?" >> environ.err; ls %s > ls.txt 2> ls.err; echo "exit $?" >> ls.err`,
			pids["lt-bob"], filepath.Join(workspaces, "lt-bob"))}})
	home := probe.Home
	if got := waitFile(t, filepath.Join(home, "environ.err")); !strings.Contains(got, "Permission denied") || strings.HasSuffix(got, "exit 0") {
		t.Errorf("alice reading bob's /proc/<pid>/environ: got %q, want Permission denied", got)
	}
	if b, _ := os.ReadFile(filepath.Join(home, "environ.txt")); strings.Contains(string(b), owners["lt-bob"]) {
		t.Error("alice read bob's secret from his process's environment")
	}
	if got := waitFile(t, filepath.Join(home, "ls.err")); !strings.Contains(got, "Permission denied") {
		t.Errorf("alice listing bob's folder: got %q, want Permission denied", got)
	}

	// A second start of a running workspace is refused; stop ends it.
	if _, err := launcher.Call(context.Background(), socket, launcher.Request{Op: "start", Owner: "lt-bob", Workspace: "dev", Command: []string{"true"}}); err == nil || !strings.Contains(err.Error(), "already runs") {
		t.Errorf("second start: got %v, want already runs", err)
	}
	if resp := call(t, socket, launcher.Request{Op: "stop", Owner: "lt-bob", Workspace: "dev"}); resp.PID != pids["lt-bob"] {
		t.Errorf("stop: got pid %d, want %d", resp.PID, pids["lt-bob"])
	}
	if err := syscall.Kill(pids["lt-bob"], 0); err == nil {
		if st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pids["lt-bob"])); !strings.Contains(string(st), ") Z ") {
			t.Errorf("bob's workspace process %d still runs after stop", pids["lt-bob"])
		}
	}
	// Stopping again, or a workspace never started, is not an error.
	call(t, socket, launcher.Request{Op: "stop", Owner: "lt-bob", Workspace: "dev"})
	call(t, socket, launcher.Request{Op: "stop", Owner: "lt-bob", Workspace: "never"})
}

// TestRefusesBadRequests: names that could be paths, env entries that are
// not NAME=VALUE, unknown ops, and a host account of the launcher's name
// that the launcher did not make.
func TestRefusesBadRequests(t *testing.T) {
	socket, workspaces := serve(t, "nobody")
	for _, tc := range []struct {
		name string
		req  launcher.Request
		want string
	}{
		{"OwnerPath", launcher.Request{Op: "start", Owner: "../etc", Workspace: "dev", Command: []string{"true"}}, "not a valid user name"},
		{"WorkspacePath", launcher.Request{Op: "start", Owner: "lt-carol", Workspace: "a/../../b", Command: []string{"true"}}, "not a valid workspace name"},
		{"Dot", launcher.Request{Op: "stop", Owner: "lt-carol", Workspace: ".."}, "not a valid workspace name"},
		{"NoCommand", launcher.Request{Op: "start", Owner: "lt-carol", Workspace: "dev"}, "needs a command"},
		{"BadEnv", launcher.Request{Op: "start", Owner: "lt-carol", Workspace: "dev", Command: []string{"true"}, Env: []string{"A B=1"}}, "is not NAME=VALUE"},
		{"Op", launcher.Request{Op: "exec", Owner: "lt-carol", Workspace: "dev"}, "unknown op"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := launcher.Call(context.Background(), socket, tc.req)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error with %q", err, tc.want)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(workspaces, "lt-carol")); err == nil {
		t.Error("a refused request made the owner's folder")
	}

	// An account of the name the launcher would use, made by someone else.
	const squatter = "lt-squat"
	if _, err := user.Lookup(launcher.AccountName(squatter)); err != nil {
		if out, err := exec.Command("useradd", "--no-create-home", "--comment", "someone else", launcher.AccountName(squatter)).CombinedOutput(); err != nil {
			t.Fatalf("useradd: %v\n%s", err, out)
		}
	}
	_, err := launcher.Call(context.Background(), socket, launcher.Request{Op: "start", Owner: squatter, Workspace: "dev", Command: []string{"true"}})
	if err == nil || !strings.Contains(err.Error(), "not a workspace account") {
		t.Fatalf("start for an owner whose account name is taken: got %v, want not a workspace account", err)
	}
}

// TestMain lets the test binary be a client of another account's
// (LAUNCHER_TEST_CALL names the socket).
func TestMain(m *testing.M) {
	if socket := os.Getenv("LAUNCHER_TEST_CALL"); socket != "" {
		_, err := launcher.Call(context.Background(), socket, launcher.Request{Op: "stop", Owner: "lt-dave", Workspace: "dev"})
		fmt.Println(err)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestOnlyTheServiceUserMayCall: a process of another account is refused,
// even when the socket's mode would let it connect.
func TestOnlyTheServiceUserMayCall(t *testing.T) {
	socket, _ := serve(t, "nobody")
	resp := call(t, socket, launcher.Request{Op: "start", Owner: "lt-dave", Workspace: "dev", Command: []string{"sleep", "300"}})
	t.Cleanup(func() {
		_, _ = launcher.Call(context.Background(), socket, launcher.Request{Op: "stop", Owner: "lt-dave", Workspace: "dev"})
	})
	// The socket is the service user's, 0600: dave cannot even connect.
	st, err := os.Stat(socket)
	if err != nil {
		t.Fatal(err)
	}
	nobody, _ := user.Lookup("nobody")
	if got := strconv.Itoa(int(st.Sys().(*syscall.Stat_t).Uid)); got != nobody.Uid || st.Mode().Perm() != 0o600 {
		t.Errorf("socket owned by %s with mode %o, want the service user's (%s), 0600", got, st.Mode().Perm(), nobody.Uid)
	}
	// This test binary, run as dave's account.
	self, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	client := filepath.Join(filepath.Dir(filepath.Dir(socket)), "client.test")
	if err := os.WriteFile(client, self, 0o755); err != nil {
		t.Fatal(err)
	}
	callAsDave := func() string {
		cmd := exec.Command("runuser", "-u", resp.User, "--", client)
		cmd.Env = append(os.Environ(), "LAUNCHER_TEST_CALL="+socket)
		out, _ := cmd.CombinedOutput()
		return string(out)
	}
	if out := callAsDave(); !strings.Contains(out, "permission denied") {
		t.Errorf("a call from %s: got %q, want permission denied on the socket", resp.User, out)
	}
	// Opened up by mistake, the peer check still refuses dave.
	if err := os.Chmod(socket, 0o666); err != nil {
		t.Fatal(err)
	}
	if out := callAsDave(); !strings.Contains(out, "only the appliance's service user") {
		t.Errorf("a call from %s through an open socket: got %q, want it refused", resp.User, out)
	}
}
