package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"airgapcoder/coderd/codersdk"
)

// forwardSpec is one --tcp [BIND:]LOCAL:REMOTE.
type forwardSpec struct {
	listen string // host:port to listen on
	remote uint16
}

func parseForwardSpec(s string) (forwardSpec, error) {
	bad := usageErrorf("--tcp %q: want LOCAL:REMOTE or BIND_ADDRESS:LOCAL:REMOTE, e.g. 8080:80 or 127.0.0.1:8080:80", s)
	i := strings.LastIndex(s, ":")
	if i < 0 {
		return forwardSpec{}, bad
	}
	local, remote := s[:i], s[i+1:]
	rp, err := strconv.ParseUint(remote, 10, 16)
	if err != nil || rp == 0 {
		return forwardSpec{}, bad
	}
	host, port := "127.0.0.1", local
	if j := strings.LastIndex(local, ":"); j >= 0 {
		host, port = strings.Trim(local[:j], "[]"), local[j+1:]
	}
	if lp, err := strconv.ParseUint(port, 10, 16); err != nil || (lp == 0 && port != "0") {
		return forwardSpec{}, bad
	}
	return forwardSpec{listen: net.JoinHostPort(host, port), remote: uint16(rp)}, nil
}

func (inv *invocation) portForwardCmd() *cobra.Command {
	var (
		specs []string
		wait  time.Duration
	)
	cmd := &cobra.Command{
		Use:   "port-forward NAME --tcp LOCAL:REMOTE [--tcp ...]",
		Short: "Forward local TCP ports to ports inside a workspace, through coderd",
		Long: `Listen on local TCP ports (127.0.0.1 unless a bind address is given) and forward
every connection to a port inside the workspace, through coderd's relay. Runs until
interrupted. NAME is [owner/]workspace[.agent].`,
		Args: exactArgs(1, "NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(specs) == 0 {
				return usageErrorf("give at least one --tcp LOCAL:REMOTE")
			}
			var fs []forwardSpec
			for _, s := range specs {
				f, err := parseForwardSpec(s)
				if err != nil {
					return err
				}
				fs = append(fs, f)
			}
			ctx := cmd.Context()
			client, err := inv.client()
			if err != nil {
				return err
			}
			wa, err := resolveAgent(ctx, client, args[0])
			if err != nil {
				return err
			}
			var lns []net.Listener
			defer func() {
				for _, ln := range lns {
					_ = ln.Close()
				}
			}()
			for _, f := range fs {
				ln, err := net.Listen("tcp", f.listen)
				if err != nil {
					return fmt.Errorf("listen on %s: %w", f.listen, err)
				}
				lns = append(lns, ln)
				fmt.Fprintf(inv.stderr, "Forwarding %s to port %d in workspace %s\n", ln.Addr(), f.remote, wa.workspace.Name)
			}
			var wg sync.WaitGroup
			for i, ln := range lns {
				wg.Go(func() { inv.forward(ctx, client, wa, ln, fs[i].remote, wait) })
			}
			<-ctx.Done()
			for _, ln := range lns {
				_ = ln.Close()
			}
			wg.Wait()
			return nil
		},
	}
	cmd.Flags().StringArrayVar(&specs, "tcp", nil, "Forward [BIND:]LOCAL:REMOTE (repeatable)")
	cmd.Flags().DurationVar(&wait, "wait", 30*time.Second, "How long a connection waits for an agent that is not connected")
	return cmd
}

// forward accepts connections on ln and relays each to port remote.
func (inv *invocation) forward(ctx context.Context, client *codersdk.Client, wa workspaceAgent, ln net.Listener, remote uint16, wait time.Duration) {
	d := &preparedDialer{client: client, agentID: wa.agent.ID}
	defer d.close()
	d.refill(ctx)
	opts := codersdk.DialOptions{Kind: codersdk.RelayKindTCP, Port: remote}
	var conns sync.WaitGroup
	defer conns.Wait()
	for {
		local, err := ln.Accept()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) && ctx.Err() == nil {
				fmt.Fprintf(inv.stderr, "accept on %s: %v\n", ln.Addr(), err)
			}
			return
		}
		conns.Go(func() {
			defer local.Close()
			stop := context.AfterFunc(ctx, func() { _ = local.Close() })
			defer stop()
			conn, err := inv.dialAgentWith(ctx, wa, wait, true, func(dctx context.Context) (net.Conn, error) {
				return d.dial(dctx, ctx, opts)
			})
			if err != nil {
				fmt.Fprintf(inv.stderr, "forward %s to port %d: %v\n", local.RemoteAddr(), remote, oneLine(err))
				return
			}
			spliceLocal(local, conn)
		})
	}
}

// preparedDialer opens a listener's relayed connections and keeps one
// prepared ahead (codersdk.PreparedConn), so that a new local connection
// waits only for the target's dial in the workspace. It prepares the next
// after each use, not on a timer: an idle port-forward holds at most one
// idle connection to coderd, and one older than preparedMaxAge is not
// trusted to be alive (coderd drops them after codersdk.PreparedConnIdle).
type preparedDialer struct {
	client  *codersdk.Client
	agentID string

	mu        sync.Mutex
	ready     *codersdk.PreparedConn
	preparing bool
	closed    bool
}

const preparedMaxAge = codersdk.PreparedConnIdle * 3 / 4

// dial connects to opts' target on a prepared connection (a fresh one when
// none is ready, or when the one ready turns out lost), and starts
// preparing the next one under life, the dialer's context.
func (d *preparedDialer) dial(ctx, life context.Context, opts codersdk.DialOptions) (net.Conn, error) {
	p := d.take()
	d.refill(life)
	if p != nil {
		conn, err := p.Connect(ctx, opts)
		if !errors.Is(err, codersdk.ErrPreparedConnLost) {
			return conn, err
		}
	}
	p, err := d.client.PrepareWorkspaceAgentConn(ctx, d.agentID)
	if err != nil {
		return nil, err
	}
	return p.Connect(ctx, opts)
}

// take returns the prepared connection, if one is ready and young enough.
func (d *preparedDialer) take() *codersdk.PreparedConn {
	d.mu.Lock()
	defer d.mu.Unlock()
	p := d.ready
	d.ready = nil
	if p != nil && p.Age() > preparedMaxAge {
		_ = p.Close()
		return nil
	}
	return p
}

// refill prepares a connection in the background unless one is ready or
// on its way. A failure is left for the next dial to meet and report.
func (d *preparedDialer) refill(life context.Context) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.ready != nil || d.preparing || d.closed {
		return
	}
	d.preparing = true
	go func() {
		ctx, cancel := context.WithTimeout(life, 30*time.Second)
		defer cancel()
		p, err := d.client.PrepareWorkspaceAgentConn(ctx, d.agentID)
		d.mu.Lock()
		defer d.mu.Unlock()
		d.preparing = false
		if err != nil {
			return
		}
		if d.ready != nil || d.closed {
			_ = p.Close()
			return
		}
		d.ready = p
	}()
}

// close discards the prepared connection, now and when one on its way
// arrives.
func (d *preparedDialer) close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closed = true
	if d.ready != nil {
		_ = d.ready.Close()
		d.ready = nil
	}
}
