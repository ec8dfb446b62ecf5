package agent

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/pkg/sftp"
	"golang.org/x/crypto/ssh"

	"airgapcoder/relayconn"
)

// The SSH server. It listens on nothing: coderd hands it streams of kind
// ssh, already authenticated (only the workspace's owner and users with the
// owner role may open them), so it accepts the "none" method and its host
// key is generated at start (clients use StrictHostKeyChecking no). Sessions
// run as the agent's user: a login shell (with a PTY if asked, window
// changes included), exec with the command's exit code, the sftp subsystem,
// and direct-tcpip channels (ssh -L). A shell, command or sftp session
// starts only once the start scripts that block login have finished (or
// loginWait passed), saying so on its stderr while it waits; an
// interactive shell shows the template's motd_file first.

// drainIdle is how long output is read after a command exits while nothing
// arrives: background processes that keep the output open do not hold the
// session forever (OpenSSH's sshd would wait for them).
const drainIdle = 250 * time.Millisecond

// defaultLoginWait caps how long a session waits for the start scripts that
// block login.
const defaultLoginWait = 5 * time.Minute

// SSHCiphers are the ciphers the agent's SSH server offers, in the order
// coder config-ssh asks OpenSSH to prefer them: AES-GCM, then AES-CTR for
// clients without it. chacha20-poly1305, OpenSSH's first choice, is not
// offered: x/crypto/ssh runs it at about half the speed of AES-GCM on
// processors with AES instructions (docs/relay.md), and it is not an
// algorithm FIPS 140 approves, which some restricted sites require.
var SSHCiphers = []string{ssh.CipherAES128GCM, ssh.CipherAES256GCM, ssh.CipherAES128CTR, ssh.CipherAES192CTR, ssh.CipherAES256CTR}

type sshServer struct {
	agent  *Agent
	config *ssh.ServerConfig
	// loginWait caps how long a session waits for the start scripts that
	// block login.
	loginWait time.Duration

	mu    sync.Mutex
	conns map[*ssh.ServerConn]struct{}
}

func newSSHServer(a *Agent) (*sshServer, error) {
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("agent: generate ssh host key: %w", err)
	}
	signer, err := ssh.NewSignerFromKey(key)
	if err != nil {
		return nil, fmt.Errorf("agent: ssh host key: %w", err)
	}
	cfg := &ssh.ServerConfig{NoClientAuth: true, ServerVersion: "SSH-2.0-CoderAirgapAgent"}
	cfg.Ciphers = SSHCiphers
	cfg.AddHostKey(signer)
	return &sshServer{agent: a, config: cfg, loginWait: defaultLoginWait, conns: map[*ssh.ServerConn]struct{}{}}, nil
}

// closeAll ends every SSH connection (at shutdown).
func (s *sshServer) closeAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		_ = c.Close()
	}
}

// serveConn runs the SSH protocol on one relayed stream.
func (s *sshServer) serveConn(ctx context.Context, nc net.Conn, log *slog.Logger) {
	// The SSH transport writes every packet with two flushed writes, and
	// each write to a yamux stream waits for the session's send loop: queue
	// them, so that the next packet is encrypted while one travels and
	// several leave in one frame (docs/relay.md).
	nc = relayconn.QueuedWrites(nc)
	sconn, chans, reqs, err := ssh.NewServerConn(nc, s.config)
	if err != nil {
		log.Debug("ssh handshake", "err", err)
		_ = nc.Close()
		return
	}
	s.mu.Lock()
	s.conns[sconn] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.conns, sconn)
		s.mu.Unlock()
		_ = sconn.Close()
	}()
	go ssh.DiscardRequests(reqs) // keepalives are answered "no", which OpenSSH takes as alive
	var wg sync.WaitGroup
	for nch := range chans {
		switch nch.ChannelType() {
		case "session":
			wg.Go(func() { s.handleSession(ctx, nch, log) })
		case "direct-tcpip":
			wg.Go(func() { s.handleDirectTCPIP(ctx, nch, log) })
		default:
			_ = nch.Reject(ssh.UnknownChannelType, "unsupported channel type "+nch.ChannelType())
		}
	}
	wg.Wait()
}

func (s *sshServer) handleDirectTCPIP(ctx context.Context, nch ssh.NewChannel, log *slog.Logger) {
	var req struct {
		Host       string
		Port       uint32
		OriginHost string
		OriginPort uint32
	}
	if err := ssh.Unmarshal(nch.ExtraData(), &req); err != nil || req.Port > 65535 {
		_ = nch.Reject(ssh.ConnectionFailed, "malformed direct-tcpip request")
		return
	}
	conn, err := dialWorkspace(ctx, req.Host, uint16(req.Port))
	if err != nil {
		_ = nch.Reject(ssh.ConnectionFailed, err.Error())
		return
	}
	ch, reqs, err := nch.Accept()
	if err != nil {
		_ = conn.Close()
		return
	}
	go ssh.DiscardRequests(reqs)
	log.Debug("ssh direct-tcpip", "host", req.Host, "port", req.Port)
	relayconn.Splice(ch, conn, relayconn.SpliceOptions{})
}

// session is one SSH session channel.
type session struct {
	srv  *sshServer
	ch   ssh.Channel
	log  *slog.Logger
	env  []string
	pty  *ptyRequest
	term *terminal // set once a PTY is open
	// closed is closed when the client has closed the channel.
	closed chan struct{}

	mu      sync.Mutex
	proc    *os.Process
	started bool
}

type ptyRequest struct {
	Term          string
	Columns, Rows uint32
	Width, Height uint32
	Modes         string
}

type windowChange struct {
	Columns, Rows uint32
	Width, Height uint32
}

func (s *sshServer) handleSession(ctx context.Context, nch ssh.NewChannel, log *slog.Logger) {
	ch, reqs, err := nch.Accept()
	if err != nil {
		return
	}
	sess := &session{srv: s, ch: ch, log: log, closed: make(chan struct{})}
	done := make(chan struct{})
	for req := range reqs {
		ok := sess.handleRequest(ctx, req, done)
		if req.WantReply {
			_ = req.Reply(ok, nil)
		}
	}
	close(sess.closed)
	// The client closed the channel: a command it left behind gets SIGHUP,
	// as from sshd.
	sess.mu.Lock()
	p := sess.proc
	sess.mu.Unlock()
	select {
	case <-done:
	default:
		if p != nil {
			_ = signalGroup(p, syscall.SIGHUP)
		}
	}
}

func (sess *session) handleRequest(ctx context.Context, req *ssh.Request, done chan struct{}) bool {
	switch req.Type {
	case "env":
		var kv struct{ Name, Value string }
		if ssh.Unmarshal(req.Payload, &kv) != nil || kv.Name == "" || strings.Contains(kv.Name, "=") {
			return false
		}
		sess.env = append(sess.env, kv.Name+"="+kv.Value)
		return true
	case "pty-req":
		var p ptyRequest
		if ssh.Unmarshal(req.Payload, &p) != nil {
			return false
		}
		sess.pty = &p
		return true
	case "window-change":
		var w windowChange
		if ssh.Unmarshal(req.Payload, &w) != nil {
			return false
		}
		sess.mu.Lock()
		t := sess.term
		if sess.pty != nil {
			sess.pty.Columns, sess.pty.Rows = w.Columns, w.Rows
		}
		sess.mu.Unlock()
		if t != nil {
			_ = t.resize(w.Columns, w.Rows)
		}
		return true
	case "signal":
		var sig struct{ Name string }
		if ssh.Unmarshal(req.Payload, &sig) != nil {
			return false
		}
		sess.mu.Lock()
		p := sess.proc
		sess.mu.Unlock()
		if signum, ok := signals[sig.Name]; ok && p != nil {
			return signalGroup(p, signum) == nil
		}
		return false
	case "shell", "exec", "subsystem":
		sess.mu.Lock()
		if sess.started {
			sess.mu.Unlock()
			return false
		}
		sess.started = true
		sess.mu.Unlock()
		var command string
		switch req.Type {
		case "exec":
			var p struct{ Command string }
			if ssh.Unmarshal(req.Payload, &p) != nil {
				return false
			}
			command = p.Command
		case "subsystem":
			var p struct{ Name string }
			if ssh.Unmarshal(req.Payload, &p) != nil || p.Name != "sftp" {
				return false
			}
			go func() {
				defer close(done)
				if sess.waitForLogin(ctx) {
					sess.serveSFTP()
				}
			}()
			return true
		}
		go func() {
			defer close(done)
			code := 255
			if sess.waitForLogin(ctx) {
				if req.Type == "shell" {
					sess.showMOTD()
				}
				code = sess.run(req.Type, command)
			}
			_, _ = sess.ch.SendRequest("exit-status", false, ssh.Marshal(struct{ Status uint32 }{uint32(code)}))
			_ = sess.ch.CloseWrite()
			_ = sess.ch.Close()
		}()
		return true
	}
	return false
}

// signals maps SSH signal names to this platform's signals.
var signals = map[string]syscall.Signal{
	"HUP": syscall.SIGHUP, "INT": syscall.SIGINT, "QUIT": syscall.SIGQUIT, "KILL": syscall.SIGKILL,
	"TERM": syscall.SIGTERM, "USR1": sigUSR1, "USR2": sigUSR2, "ALRM": syscall.SIGALRM, "PIPE": syscall.SIGPIPE,
}

func (sess *session) serveSFTP() {
	m := sess.srv.agent.currentManifest()
	server, err := sftp.NewServer(sess.ch, sftp.WithServerWorkingDirectory(sess.srv.agent.workDir(m)))
	if err != nil {
		sess.log.Warn("sftp", "err", err)
		_ = sess.ch.Close()
		return
	}
	sess.log.Debug("sftp session")
	err = server.Serve()
	code := 0
	if err != nil && !errors.Is(err, io.EOF) {
		code = 1
	}
	// The exit status goes out before server.Close closes the channel.
	_, _ = sess.ch.SendRequest("exit-status", false, ssh.Marshal(struct{ Status uint32 }{uint32(code)}))
	_ = server.Close()
	_ = sess.ch.Close()
}

// command builds the process for a shell (command "") or an exec request.
func (sess *session) command(command string) *exec.Cmd {
	var extra []string
	if sess.pty != nil {
		term := sess.pty.Term
		if term == "" {
			term = "xterm-256color"
		}
		extra = append(extra, "TERM="+term)
	}
	extra = append(extra, "SSH_CONNECTION=0.0.0.0 0 0.0.0.0 0")
	return sess.srv.agent.userCommand(command, append(extra, sess.env...)...)
}

// run starts the process and returns its exit code.
func (sess *session) run(kind, command string) int {
	cmd := sess.command(command)
	sess.log.Info("ssh session", "type", kind, "pty", sess.pty != nil)
	sess.log.Debug("ssh command", "command", truncate(command, 200))
	if sess.pty != nil {
		return sess.runPTY(cmd)
	}
	return sess.runPipes(cmd)
}

func (sess *session) setProc(p *os.Process) {
	sess.mu.Lock()
	sess.proc = p
	sess.mu.Unlock()
}

func (sess *session) runPTY(cmd *exec.Cmd) int {
	t, err := openTerminal(sess.pty.Columns, sess.pty.Rows)
	if err != nil {
		fmt.Fprintf(sess.ch.Stderr(), "coder agent: allocate a terminal: %v\r\n", err)
		return 255
	}
	defer t.close()
	if err := t.start(cmd); err != nil {
		fmt.Fprintf(sess.ch.Stderr(), "coder agent: start %s: %v\r\n", cmd.Path, err)
		return 127
	}
	sess.mu.Lock()
	sess.term = t
	// A window change that arrived before the terminal opened.
	cols, rows := sess.pty.Columns, sess.pty.Rows
	sess.mu.Unlock()
	_ = t.resize(cols, rows)
	sess.setProc(cmd.Process)
	go func() { _, _ = io.Copy(t.master, sess.ch) }()
	exited := make(chan struct{})
	out := make(chan struct{})
	go func() {
		defer close(out)
		drain(sess.ch, t.master, exited)
	}()
	code := exitCode(cmd.Wait())
	close(exited)
	<-out
	return code
}

func (sess *session) runPipes(cmd *exec.Cmd) int {
	inR, inW, err := os.Pipe()
	if err != nil {
		return 255
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		return 255
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		return 255
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, errW
	setProcessGroup(cmd)
	err = cmd.Start()
	_ = inR.Close()
	_ = outW.Close()
	_ = errW.Close()
	defer outR.Close()
	defer errR.Close()
	if err != nil {
		_ = inW.Close()
		fmt.Fprintf(sess.ch.Stderr(), "coder agent: start %s: %v\n", cmd.Path, err)
		return 127
	}
	sess.setProc(cmd.Process)
	go func() {
		// Stdin ends when the client sends EOF; the process may well exit
		// first (the write end is closed below). Up to 256 KiB a read:
		// each read of the channel may send a window adjustment back
		// through the relay (see largeReads in cli/ssh.go).
		_, _ = relayconn.CopyBuffered(inW, sess.ch)
		_ = inW.Close()
	}()
	exited := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { drain(sess.ch, outR, exited) })
	wg.Go(func() { drain(sess.ch.Stderr(), errR, exited) })
	code := exitCode(cmd.Wait())
	_ = inW.Close()
	close(exited)
	wg.Wait()
	return code
}

// drain copies src to dst until src ends or, once exited is closed, until
// drainIdle passes without output.
func drain(dst io.Writer, src *os.File, exited <-chan struct{}) {
	done := make(chan struct{})
	defer close(done)
	var mu sync.Mutex
	isExited := false
	go func() {
		select {
		case <-exited:
			mu.Lock()
			isExited = true
			mu.Unlock()
			_ = src.SetReadDeadline(time.Now().Add(drainIdle))
		case <-done:
		}
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
			mu.Lock()
			if isExited {
				_ = src.SetReadDeadline(time.Now().Add(drainIdle))
			}
			mu.Unlock()
		}
		if err != nil {
			return // EOF, EIO from a PTY whose last writer closed, or idle
		}
	}
}

func exitCode(err error) int {
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ee.ExitCode()
	}
	return 255
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// waitForLogin holds the session until the start scripts that block login
// have finished, for at most loginWait, telling the user on stderr. It
// returns false when the session or the agent ended meanwhile.
func (sess *session) waitForLogin(ctx context.Context) bool {
	scripts := sess.srv.agent.currentScripts()
	if scripts == nil {
		return true
	}
	select {
	case <-scripts.loginDone:
		return true
	default:
	}
	nl := "\n"
	if sess.pty != nil {
		nl = "\r\n"
	}
	stderr := sess.ch.Stderr()
	wait := sess.srv.loginWait
	fmt.Fprintf(stderr, "coder agent: waiting for the workspace's startup scripts to finish (at most %s)...%s", wait, nl)
	sess.log.Info("ssh session waits for the startup scripts that block login")
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-scripts.loginDone:
		if scripts.loginFailed.Load() {
			fmt.Fprintf(stderr, "coder agent: a startup script failed, so the workspace may be incomplete; its output is in the agent's logs (coder show)%s", nl)
		}
		return true
	case <-t.C:
		fmt.Fprintf(stderr, "coder agent: the startup scripts are still running after %s; going on without them%s", wait, nl)
		return true
	case <-sess.closed:
		return false
	case <-ctx.Done():
		return false
	}
}

// showMOTD writes the template's motd_file to a login shell's output,
// unless ~/.hushlogin exists (as login(1) does).
func (sess *session) showMOTD() {
	path := sess.srv.agent.currentManifest().MOTDFile
	if path == "" {
		return
	}
	home, _ := os.UserHomeDir()
	if home != "" {
		if _, err := os.Stat(filepath.Join(home, ".hushlogin")); err == nil {
			return
		}
		if path == "~" || strings.HasPrefix(path, "~/") {
			path = filepath.Join(home, path[1:])
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		sess.log.Debug("motd", "path", path, "err", err)
		return
	}
	text := string(b)
	if sess.pty != nil {
		text = strings.ReplaceAll(strings.ReplaceAll(text, "\r\n", "\n"), "\n", "\r\n")
	}
	_, _ = io.WriteString(sess.ch, text)
}
