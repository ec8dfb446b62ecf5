package agent

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"airgapcoder/codersdk"
	"airgapcoder/internal/testrun"
)

// sshAgent is an agent that has its manifest and script runner, with an SSH
// client connected to its SSH server over a pipe (what the relay hands it).
type sshAgent struct {
	agent   *Agent
	scripts *scriptRunner
	client  *ssh.Client
	dir     string
}

func newSSHAgent(t *testing.T, environ []string, m codersdk.AgentManifest) *sshAgent {
	t.Helper()
	u, _ := url.Parse("http://127.0.0.1:1")
	c := codersdk.New(u)
	c.SessionToken = "agent-token"
	dir := t.TempDir()
	a, err := New(Options{Client: c, Environ: environ, Logger: discardLogger(), ScriptDataDir: filepath.Join(dir, "data"), LogDir: filepath.Join(dir, "logs")})
	if err != nil {
		t.Fatal(err)
	}
	if m.Directory == "" {
		m.Directory = dir
	}
	scripts := newScriptRunner(scriptRunnerConfig{log: discardLogger(), out: newFakeOutput(), env: a.execEnv(m), scripts: m.Scripts,
		logDir: a.opts.LogDir, dataDir: a.opts.ScriptDataDir, killGrace: time.Second})
	a.manifest, a.scripts = m, scripts
	ctx, cancel := context.WithCancel(context.Background())
	// A loopback pair (net.Pipe does not buffer, and both ends of an SSH
	// handshake write first).
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	clientConn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server, err := ln.Accept()
	_ = ln.Close()
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		a.ssh.serveConn(ctx, server, discardLogger())
	}()
	sconn, chans, reqs, err := ssh.NewClientConn(clientConn, "dev", &ssh.ClientConfig{User: "dev", HostKeyCallback: ssh.InsecureIgnoreHostKey()})
	if err != nil {
		t.Fatal(err)
	}
	client := ssh.NewClient(sconn, chans, reqs)
	t.Cleanup(func() {
		_ = client.Close()
		cancel()
		<-served
	})
	return &sshAgent{agent: a, scripts: scripts, client: client, dir: m.Directory}
}

// exec runs command and returns stdout, stderr and how long it took.
func (s *sshAgent) exec(t *testing.T, command string) (string, string, time.Duration) {
	t.Helper()
	sess, err := s.client.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	var stdout, stderr bytes.Buffer
	sess.Stdout, sess.Stderr = &stdout, &stderr
	began := time.Now()
	if err := sess.Run(command); err != nil {
		var ee *ssh.ExitError
		if !errors.As(err, &ee) {
			t.Fatalf("run %q: %v", command, err)
		}
	}
	return stdout.String(), stderr.String(), time.Since(began)
}

func TestSSHEnvironment(t *testing.T) {
	s := newSSHAgent(t, []string{"PATH=/usr/bin:/bin", "AGENT_ONLY=1", "CODER_AGENT_TOKEN=secret", BinaryDirEnv + "=/tmp/coder.abcdef"}, codersdk.AgentManifest{
		WorkspaceName: "dev", OwnerName: "alice", AgentName: "main",
		EnvironmentVariables: map[string]string{"FROM_TEMPLATE": "yes", "PATH": "/opt/tpl:$PATH", "REFERS": "${AGENT_ONLY}-x"},
	})
	out, _, _ := s.exec(t, `echo "$FROM_TEMPLATE|$REFERS|$AGENT_ONLY|${CODER_AGENT_TOKEN:-none}|${CODER_AGENT_BINARY_DIR:-none}|$CODER|$CODER_WORKSPACE_NAME|$CODER_WORKSPACE_OWNER_NAME|$CODER_WORKSPACE_AGENT_NAME"; echo "$PATH"; pwd`)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 {
		t.Fatalf("output %q", out)
	}
	if want := "yes|1-x|1|none|none|true|dev|alice|main"; lines[0] != want {
		t.Errorf("variables: got %q, want %q", lines[0], want)
	}
	// CODER_SCRIPT_BIN_DIR first, the template's PATH (expanded against the
	// agent's), then the agent binary's folder.
	path := filepath.SplitList(lines[1])
	if len(path) < 4 || path[0] != s.agent.scriptBinDir() || path[1] != "/opt/tpl" || path[2] != "/usr/bin" || path[3] != "/bin" {
		t.Errorf("PATH %q, want %s:/opt/tpl:/usr/bin:/bin[:agent folder]", lines[1], s.agent.scriptBinDir())
	}
	if lines[2] != s.dir {
		t.Errorf("pwd %q, want %q", lines[2], s.dir)
	}
}

func TestSSHWaitsForBlockingScripts(t *testing.T) {
	s := newSSHAgent(t, os.Environ(), codersdk.AgentManifest{Scripts: []codersdk.AgentScript{
		{LogSourceID: "blocks", DisplayName: "Startup Script", RunOnStart: true, StartBlocksLogin: true,
			Script: "sleep 1; echo installed > tool"},
		{LogSourceID: "bg", DisplayName: "Background", RunOnStart: true, Script: "sleep 60", TimeoutSeconds: 60},
	}})
	startScripts(t, s)
	out, errOut, took := s.exec(t, "cat tool")
	if out != "installed\n" {
		t.Errorf("the command ran before the blocking script finished: stdout %q stderr %q", out, errOut)
	}
	if !strings.HasPrefix(errOut, "coder agent: waiting for the workspace's startup scripts to finish") {
		t.Errorf("stderr %q, want a notice of the wait", errOut)
	}
	// Later sessions do not wait, and the non-blocking script never held
	// them.
	out, errOut, took = s.exec(t, "echo again")
	if out != "again\n" || errOut != "" || took > 2*time.Second {
		t.Errorf("after the blocking script: stdout %q stderr %q in %s", out, errOut, took)
	}
}

func TestSSHNonBlockingScriptsDoNotDelayLogin(t *testing.T) {
	s := newSSHAgent(t, os.Environ(), codersdk.AgentManifest{Scripts: []codersdk.AgentScript{
		{LogSourceID: "slow", DisplayName: "Startup Script", RunOnStart: true, Script: "sleep 60", TimeoutSeconds: 60},
	}})
	startScripts(t, s)
	out, errOut, took := s.exec(t, "echo at once")
	if out != "at once\n" || errOut != "" || took > 2*time.Second {
		t.Errorf("got stdout %q stderr %q in %s", out, errOut, took)
	}
}

func TestSSHLoginWaitIsCapped(t *testing.T) {
	s := newSSHAgent(t, os.Environ(), codersdk.AgentManifest{Scripts: []codersdk.AgentScript{
		{LogSourceID: "stuck", RunOnStart: true, StartBlocksLogin: true, Script: "sleep 60"},
	}})
	s.agent.ssh.loginWait = 300 * time.Millisecond
	startScripts(t, s)
	out, errOut, _ := s.exec(t, "echo in")
	if out != "in\n" || !strings.Contains(errOut, "coder agent: the startup scripts are still running after 300ms; going on without them") {
		t.Errorf("got stdout %q stderr %q", out, errOut)
	}
}

func TestSSHFailedBlockingScriptIsReported(t *testing.T) {
	s := newSSHAgent(t, os.Environ(), codersdk.AgentManifest{Scripts: []codersdk.AgentScript{
		{LogSourceID: "fails", RunOnStart: true, StartBlocksLogin: true, Script: "sleep 0.5; exit 1"},
	}})
	startScripts(t, s)
	out, errOut, _ := s.exec(t, "echo in")
	if out != "in\n" || !strings.Contains(errOut, "coder agent: a startup script failed") {
		t.Errorf("got stdout %q stderr %q", out, errOut)
	}
}

func TestSSHShowsMOTD(t *testing.T) {
	motd := filepath.Join(t.TempDir(), "motd")
	if err := os.WriteFile(motd, []byte("Welcome to the workspace\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := newSSHAgent(t, os.Environ(), codersdk.AgentManifest{MOTDFile: motd})
	sess, err := s.client.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	var stdout bytes.Buffer
	sess.Stdout, sess.Stdin = &stdout, strings.NewReader("echo from the shell; exit\n")
	if err := sess.Shell(); err != nil {
		t.Fatal(err)
	}
	_ = sess.Wait()
	if got := stdout.String(); !strings.HasPrefix(got, "Welcome to the workspace\n") || !strings.Contains(got, "from the shell") {
		t.Errorf("shell output %q, want the motd first", got)
	}
	// Commands do not show it.
	if out, _, _ := s.exec(t, "echo cmd"); out != "cmd\n" {
		t.Errorf("command output %q", out)
	}
}

// startScripts runs the agent's start scripts in the background until the
// test ends, and waits for them then: a script still writing into the
// test's folders would fail its removal.
func startScripts(t *testing.T, s *sshAgent) {
	testrun.Start(t, "start scripts", func(ctx context.Context) error {
		_ = s.scripts.start(ctx)
		return nil
	}, nil)
}
