package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime/debug"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/crypto/ssh"

	"airgapcoder/codersdk"
	"airgapcoder/relayconn"
)

// exitCodeError ends the CLI with a command's own exit code, printing
// nothing (coder ssh returns the remote command's code).
type exitCodeError struct{ code int }

func (e *exitCodeError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// sshHostPrefix is what coder config-ssh puts before workspace names; ssh
// --stdio strips it from the %h that OpenSSH passes.
const sshHostPrefix = "coder."

// workspaceAgent is a workspace and the agent a command talks to.
type workspaceAgent struct {
	workspace codersdk.Workspace
	agent     codersdk.WorkspaceAgent
}

// resolveAgent finds "[owner/]workspace[.agent]" and the agent to use.
func resolveAgent(ctx context.Context, client *codersdk.Client, arg string) (workspaceAgent, error) {
	name := strings.TrimPrefix(arg, sshHostPrefix)
	wsName, agentName, _ := strings.Cut(name, ".")
	w, err := workspaceByName(ctx, client, wsName)
	if err != nil {
		return workspaceAgent{}, err
	}
	b := w.LatestBuild
	if b.Transition != codersdk.WorkspaceTransitionStart || b.Status != codersdk.WorkspaceStatusRunning {
		return workspaceAgent{}, fmt.Errorf("workspace %s is %s: run `coder start %s` (and wait for its build) first", w.Name, b.Status, w.Name)
	}
	var agents []codersdk.WorkspaceAgent
	var names []string
	for _, r := range b.Resources {
		for _, a := range r.Agents {
			names = append(names, a.Name)
			if agentName == "" || a.Name == agentName {
				agents = append(agents, a)
			}
		}
	}
	switch {
	case len(agents) == 1:
		return workspaceAgent{workspace: w, agent: agents[0]}, nil
	case len(names) == 0:
		return workspaceAgent{}, fmt.Errorf("workspace %s has no agent: its template declares no coder_agent", w.Name)
	case agentName != "":
		return workspaceAgent{}, fmt.Errorf("workspace %s has no agent %q (it has %s)", w.Name, agentName, strings.Join(names, ", "))
	}
	return workspaceAgent{}, fmt.Errorf("workspace %s has several agents (%s): name one as %s.AGENT", w.Name, strings.Join(names, ", "), w.Name)
}

// agentArg resolves what ssh, ping and port-forward connect to: the agent
// that NAME ("[owner/]workspace[.agent]") names, and the route to it that
// --proxy (after CODER_WORKSPACE_PROXY) picks.
func (inv *invocation) agentArg(cmd *cobra.Command, name string, proxy *string) (workspaceAgent, *agentRoute, error) {
	if err := regionOptions.resolve(cmd, "", inv.environ); err != nil {
		return workspaceAgent{}, nil, err
	}
	client, err := inv.client()
	if err != nil {
		return workspaceAgent{}, nil, err
	}
	ctx := cmd.Context()
	wa, err := resolveAgent(ctx, client, name)
	if err != nil {
		return workspaceAgent{}, nil, err
	}
	route, err := inv.agentRoute(ctx, cmd, client, *proxy)
	if err != nil {
		return workspaceAgent{}, nil, err
	}
	return wa, route, nil
}

// dialAgent dials the agent along route (through the chosen region,
// falling back to the primary), waiting up to wait for an agent that is
// not connected yet (starting, or reconnecting after a coderd restart).
func (inv *invocation) dialAgent(ctx context.Context, route *agentRoute, wa workspaceAgent, opts codersdk.DialOptions, wait time.Duration, quiet bool) (net.Conn, error) {
	return inv.dialAgentWith(ctx, wa, wait, quiet, func(ctx context.Context) (net.Conn, error) {
		return route.dial(ctx, func(ctx context.Context, c *codersdk.Client) (net.Conn, error) {
			return c.DialWorkspaceAgent(ctx, wa.agent.ID, opts)
		})
	})
}

// dialAgentWith calls dial until it connects, waiting up to wait while the
// agent is not connected (saying so once, unless quiet).
func (inv *invocation) dialAgentWith(ctx context.Context, wa workspaceAgent, wait time.Duration, quiet bool, dial func(context.Context) (net.Conn, error)) (net.Conn, error) {
	deadline := time.Now().Add(wait)
	told := false
	for {
		dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		conn, err := dial(dctx)
		cancel()
		if err == nil {
			return conn, nil
		}
		if !codersdk.IsAgentUnavailable(err) || time.Now().After(deadline) || ctx.Err() != nil {
			return nil, fmt.Errorf("connect to workspace %s: %w", wa.workspace.Name, err)
		}
		if !told && !quiet {
			fmt.Fprintf(inv.stderr, "Waiting for the agent of workspace %s to connect...\n", wa.workspace.Name)
			told = true
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func (inv *invocation) sshCmd() *cobra.Command {
	var (
		stdio bool
		tty   bool
		wait  time.Duration
		proxy string
	)
	cmd := &cobra.Command{
		Use:   "ssh NAME [-- COMMAND...]",
		Short: "Open a shell in a workspace, or run a command there and return its exit code",
		Long: `Open a shell in a workspace (interactive, with a terminal, when stdin is one), or run
COMMAND there and exit with its exit code. A single COMMAND argument is run by the
workspace's shell as written; several are passed as the command's arguments.
NAME is [owner/]workspace[.agent]; a "coder." prefix (from coder config-ssh) is ignored.
As with OpenSSH, flags go before NAME: what follows it is the command.
Everything goes through coderd's relay, reached at the region --proxy chooses
(by default the one with the lowest latency); when a workspace proxy fails, the
connection goes through the primary instead, saying so on stderr.

With --stdio, the SSH protocol itself goes over stdin and stdout, for OpenSSH:
  ssh -o ProxyCommand='coder ssh --stdio %h' coder.NAME`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) < 1 {
				return usageErrorf("%s needs a workspace NAME (see --help)", cmd.CommandPath())
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			command := args[1:]
			if len(command) > 0 && command[0] == "--" {
				command = command[1:] // flags stop at NAME, so cobra keeps the "--"
			}
			if stdio && len(command) > 0 {
				return usageErrorf("--stdio takes no COMMAND: OpenSSH sends it")
			}
			wa, route, err := inv.agentArg(cmd, args[0], &proxy)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			conn, err := inv.dialAgent(ctx, route, wa, codersdk.DialOptions{Kind: codersdk.RelayKindSSH}, wait, stdio)
			if err != nil {
				return err
			}
			defer conn.Close()
			if stdio {
				return inv.sshStdio(ctx, conn)
			}
			return inv.sshSession(ctx, conn, wa, command, tty)
		},
	}
	// Flags after NAME belong to the remote command.
	cmd.Flags().SetInterspersed(false)
	cmd.Flags().BoolVar(&stdio, "stdio", false, "Speak SSH on stdin/stdout (for OpenSSH's ProxyCommand)")
	cmd.Flags().BoolVarP(&tty, "tty", "t", false, "Allocate a terminal even for a COMMAND")
	cmd.Flags().DurationVar(&wait, "wait", 2*time.Minute, "How long to wait for an agent that is not connected yet")
	proxyFlag(cmd, &proxy)
	return cmd
}

// sshStdio copies the relayed SSH stream to stdout and stdin to it, until
// either side ends.
func (inv *invocation) sshStdio(ctx context.Context, conn net.Conn) error {
	done := make(chan struct{}, 2)
	go func() {
		_, _ = io.Copy(conn, inv.stdin)
		done <- struct{}{}
	}()
	go func() {
		_, _ = io.Copy(inv.stdout, conn)
		done <- struct{}{}
	}()
	select {
	case <-done:
	case <-ctx.Done():
	}
	return nil
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./=:,@%+", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// largeReads is an output of an SSH session that reads the session's
// channel up to 256 KiB at a time (relayconn.CopyBuffered) instead of the
// 32 KiB of io.Copy. A read takes every packet that has arrived, and
// x/crypto/ssh sends a window adjustment back through every hop of the
// relay for each read while more than 96 KiB is in flight, which a bulk
// transfer keeps true: with one packet per read that was one adjustment
// per 32 KiB of output (docs/relay.md).
type largeReads struct{ io.Writer }

func (w largeReads) ReadFrom(r io.Reader) (int64, error) { return relayconn.CopyBuffered(w.Writer, r) }

// sshSessionGCPercent is the GC percent of a `coder ssh` session.
const sshSessionGCPercent = 400

// collectLessOften lets the heap grow to five times what is live before a
// collection (GOGC=400) rather than twice, unless the user set GOGC:
// x/crypto/ssh copies every packet it reads into a new allocation (32 KiB
// for bulk output), so at Go's default a bulk transfer collected every
// few megabytes, and the collector took a fifth of the CLI's CPU. The
// CLI's live heap is a few megabytes; this costs it tens at most.
func collectLessOften() {
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(sshSessionGCPercent)
	}
}

// remoteCommand is what the workspace's shell runs for args.
func remoteCommand(args []string) string {
	if len(args) == 1 {
		return args[0]
	}
	quoted := make([]string, len(args))
	for i, a := range args {
		quoted[i] = shellQuote(a)
	}
	return strings.Join(quoted, " ")
}

// sshSession runs a shell or command over conn with the streams of inv.
func (inv *invocation) sshSession(ctx context.Context, conn net.Conn, wa workspaceAgent, command []string, forceTTY bool) error {
	// The SSH transport writes every packet with two flushed writes: queue
	// them, so that a packet leaves while the next is encrypted and stdin
	// crosses the relay in large writes (docs/relay.md).
	conn = relayconn.QueuedWrites(conn)
	collectLessOften()
	sconn, chans, reqs, err := ssh.NewClientConn(conn, sshHostPrefix+wa.workspace.Name, &ssh.ClientConfig{
		User: wa.workspace.OwnerName,
		// coderd authenticated both ends; the agent's host key is made
		// fresh at every start.
		HostKeyCallback: ssh.InsecureIgnoreHostKey(), //nolint:gosec
		Timeout:         30 * time.Second,
	})
	if err != nil {
		return fmt.Errorf("ssh to workspace %s: %w", wa.workspace.Name, err)
	}
	client := ssh.NewClient(sconn, chans, reqs)
	defer client.Close()
	sess, err := client.NewSession()
	if err != nil {
		return fmt.Errorf("open ssh session: %w", err)
	}
	defer sess.Close()

	stdinFile, _ := inv.stdin.(*os.File)
	stdoutFile, _ := inv.stdout.(*os.File)
	interactive := stdinFile != nil && isTerminal(stdinFile) && (len(command) == 0 || forceTTY)
	if interactive {
		cols, rows := 80, 24
		if stdoutFile != nil {
			if c, r, err := terminalSize(stdoutFile); err == nil {
				cols, rows = c, r
			}
		}
		term := inv.getenv("TERM")
		if term == "" {
			term = "xterm-256color"
		}
		if err := sess.RequestPty(term, rows, cols, ssh.TerminalModes{ssh.ECHO: 1}); err != nil {
			return fmt.Errorf("request a terminal: %w", err)
		}
		restore, err := makeRaw(stdinFile)
		if err == nil {
			defer restore()
		}
		if stdoutFile != nil {
			stop := watchWindowSize(stdoutFile, func(c, r int) { _ = sess.WindowChange(r, c) })
			defer stop()
		}
	}
	sess.Stdin, sess.Stdout, sess.Stderr = inv.stdin, largeReads{inv.stdout}, largeReads{inv.stderr}
	if len(command) == 0 {
		err = sess.Shell()
	} else {
		err = sess.Start(remoteCommand(command))
	}
	if err != nil {
		return fmt.Errorf("start in workspace %s: %w", wa.workspace.Name, err)
	}
	waited := make(chan error, 1)
	go func() { waited <- sess.Wait() }()
	select {
	case err = <-waited:
	case <-ctx.Done():
		_ = sess.Signal(ssh.SIGTERM)
		_ = client.Close()
		return &exitCodeError{code: 130} // as a shell reports an interrupted command
	}
	var ee *ssh.ExitError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ee):
		code := ee.ExitStatus()
		if code < 0 || code > 255 {
			code = 255
		}
		return &exitCodeError{code: code}
	}
	// The relay connection broke: coderd (or the replica this session went
	// through) went away, or the agent did.
	return fmt.Errorf("the connection to workspace %s through coderd was lost before the command ended "+
		"(was a coderd replica or the workspace's agent restarted?): run it again; a new connection goes to a live replica", wa.workspace.Name)
}
