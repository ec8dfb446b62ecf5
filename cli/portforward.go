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

	"airgapcoder/codersdk"
	"airgapcoder/relayconn"
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
		proxy string
	)
	cmd := &cobra.Command{
		Use:   "port-forward NAME --tcp LOCAL:REMOTE [--tcp ...]",
		Short: "Forward local TCP ports to ports inside a workspace, through coderd",
		Long: `Listen on local TCP ports (127.0.0.1 unless a bind address is given) and forward
every connection to a port inside the workspace, through coderd's relay, reached at
the region --proxy chooses (falling back to the primary when a workspace proxy
fails). Runs until interrupted. NAME is [owner/]workspace[.agent].`,
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
			wa, route, err := inv.agentArg(cmd, args[0], &proxy)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
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
				wg.Go(func() { inv.forward(ctx, route, wa, ln, fs[i].remote, wait) })
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
	proxyFlag(cmd, &proxy)
	return cmd
}

// forward accepts connections on ln and relays each to port remote.
func (inv *invocation) forward(ctx context.Context, route *agentRoute, wa workspaceAgent, ln net.Listener, remote uint16, wait time.Duration) {
	d := &preparedDialer{route: route, agentID: wa.agent.ID, life: ctx}
	defer d.close()
	d.refill()
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
			if err := inv.forwardConn(ctx, local, d, wa, opts, wait); err != nil && ctx.Err() == nil {
				fmt.Fprintf(inv.stderr, "forward %s to port %d: %v\n", local.RemoteAddr(), remote, oneLine(err))
			}
		})
	}
}

// forwardConn relays one local connection. On a connection prepared ahead,
// the client's bytes go out behind the target without waiting for coderd's
// answer (codersdk.PreparedConn.Start), so a new connection costs one trip
// through the relay, not two. A refusal forwarded none of them: the
// connection is then dialed as when none is prepared (waiting for an agent
// that is away), and the bytes go again on it.
func (inv *invocation) forwardConn(ctx context.Context, local net.Conn, d *preparedDialer, wa workspaceAgent, opts codersdk.DialOptions, wait time.Duration) error {
	dial := func() (net.Conn, error) {
		return inv.dialAgentWith(ctx, wa, wait, true, func(dctx context.Context) (net.Conn, error) {
			return d.dial(dctx, opts)
		})
	}
	started := d.start(opts)
	if started == nil {
		conn, err := dial()
		if err != nil {
			return err
		}
		// When the local side stops sending, replies still flow back
		// until the workspace side ends (the relay cannot pass a
		// half-close on).
		relayconn.Splice(local, conn, relayconn.SpliceOptions{HalfClose: true})
		return nil
	}
	w := &earlyWriter{conn: started}
	w.cond = sync.NewCond(&w.mu)
	defer w.close()
	go func() {
		if _, err := relayconn.CopyBuffered(w, local); err != nil {
			_ = local.Close()
			w.close()
		}
	}()
	var remote net.Conn = started
	// Prepare the next connection once this one's first bytes came back
	// (or soon after the answer, for a target that waits): sooner, it
	// competes with this one for coderd and the CPU.
	refill := sync.OnceFunc(d.refill)
	defer refill()
	err := started.Answer(ctx)
	later := time.AfterFunc(10*time.Millisecond, refill)
	defer later.Stop()
	switch {
	case err == nil:
		w.settle()
	case errors.Is(err, codersdk.ErrPreparedConnLost) || codersdk.IsAgentUnavailable(err):
		// Lost before coderd answered, or the agent is away: dial again
		// and send what was sent, unless a lost connection may have
		// delivered it already.
		if remote, err = w.replace(dial, errors.Is(err, codersdk.ErrPreparedConnLost)); err != nil {
			return err
		}
	default:
		w.fail(err)
		return fmt.Errorf("connect to workspace %s: %w", wa.workspace.Name, err)
	}
	_, _ = relayconn.CopyBuffered(relayconn.AfterWrite{Conn: local, Hook: refill}, remote)
	return nil
}

// earlyWriter is the local→relay side of a connection started before
// coderd answered. It keeps what it sends until the answer (up to
// maxEarly, then it waits for the answer), so that after a refusal the
// same bytes can go on the connection that replaces it.
type earlyWriter struct {
	mu      sync.Mutex
	cond    *sync.Cond
	conn    net.Conn // nil while being replaced
	kept    []byte   // sent before the answer
	settled bool     // answered: writes go straight through
	err     error    // no connection any more
}

const maxEarly = 256 << 10

func (w *earlyWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	for w.err == nil && (w.conn == nil || (!w.settled && len(w.kept)+len(b) > maxEarly)) {
		w.cond.Wait()
	}
	if w.err != nil {
		w.mu.Unlock()
		return 0, w.err
	}
	conn, early := w.conn, !w.settled
	if early {
		w.kept = append(w.kept, b...)
	}
	w.mu.Unlock()
	n, err := conn.Write(b)
	if err != nil && early {
		// The connection may be refused and replaced: then these bytes go
		// again on the new one. Wait for the answer to know.
		w.mu.Lock()
		for w.err == nil && (w.conn == conn && !w.settled) {
			w.cond.Wait()
		}
		replaced, ferr := w.conn != conn, w.err
		w.mu.Unlock()
		if replaced && ferr == nil {
			return len(b), nil
		}
	}
	return n, err
}

// settle lets writes through: coderd connected the target.
func (w *earlyWriter) settle() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.settled, w.kept = true, nil
	w.cond.Broadcast()
}

// replace dials a new connection, sends it what was kept and lets writes
// through to it. When lost is set the old connection broke without an
// answer, and bytes already sent on it may have arrived: then it fails
// instead of sending them twice.
func (w *earlyWriter) replace(dial func() (net.Conn, error), lost bool) (net.Conn, error) {
	w.mu.Lock()
	old := w.conn
	if lost && len(w.kept) > 0 {
		w.mu.Unlock()
		err := errors.New("the relay connection broke before coderd answered, after bytes were sent on it")
		w.fail(err)
		return nil, err
	}
	w.conn = nil
	w.mu.Unlock()
	_ = old.Close()
	conn, err := dial()
	if err != nil {
		w.fail(err)
		return nil, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		_ = conn.Close()
		return nil, w.err
	}
	if len(w.kept) > 0 {
		if _, err := conn.Write(w.kept); err != nil {
			_ = conn.Close()
			w.err = err
			w.cond.Broadcast()
			return nil, err
		}
	}
	w.conn, w.kept, w.settled = conn, nil, true
	w.cond.Broadcast()
	return conn, nil
}

// fail ends the writer: writes return err.
func (w *earlyWriter) fail(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err == nil {
		w.err = err
	}
	if w.conn != nil {
		_ = w.conn.Close()
	}
	w.cond.Broadcast()
}

// close closes the connection and ends the writer.
func (w *earlyWriter) close() { w.fail(net.ErrClosed) }

// preparedDialer opens a listener's relayed connections and keeps
// preparedAhead of them prepared (codersdk.PreparedConn), so that a new
// local connection waits only for the target's dial in the workspace, and
// a few at once (a browser opens several) do too. It prepares more after
// each use, once the connection is made (preparing while it is being made
// would compete with it for coderd and the CPU), not on a timer: an idle
// port-forward holds at most preparedAhead idle connections
// to coderd, and one older than preparedMaxAge is not trusted to be alive
// (coderd drops them after codersdk.PreparedConnIdle). Connections go
// along route: through the chosen region, falling back to the primary; a
// workspace proxy that refuses prepared connections (400) gets plain
// connects.
type preparedDialer struct {
	route   *agentRoute
	agentID string
	life    context.Context // bounds the preparing

	mu        sync.Mutex
	ready     []*codersdk.PreparedConn // oldest first
	preparing int
	closed    bool
}

const (
	preparedAhead  = 2
	preparedMaxAge = codersdk.PreparedConnIdle * 3 / 4
)

// dial connects to opts' target on a prepared connection (a fresh one when
// none is ready, or when the one ready turns out lost), waiting for
// coderd's answer, then prepares more.
func (d *preparedDialer) dial(ctx context.Context, opts codersdk.DialOptions) (net.Conn, error) {
	defer d.refill()
	if p := d.take(); p != nil {
		conn, err := p.Connect(ctx, opts)
		if !errors.Is(err, codersdk.ErrPreparedConnLost) {
			return conn, err
		}
	}
	return d.route.dial(ctx, func(ctx context.Context, c *codersdk.Client) (net.Conn, error) {
		if !d.route.canPrepare(c) {
			return c.DialWorkspaceAgent(ctx, d.agentID, opts)
		}
		p, err := c.PrepareWorkspaceAgentConn(ctx, d.agentID)
		if d.route.preparedRefused(c, err) {
			return c.DialWorkspaceAgent(ctx, d.agentID, opts)
		}
		if err != nil {
			return nil, err
		}
		return p.Connect(ctx, opts)
	})
}

// start sends opts' target on a prepared connection and returns it
// without waiting for coderd's answer; call refill once it came. It
// returns nil when none is ready or the ones ready turn out lost.
func (d *preparedDialer) start(opts codersdk.DialOptions) *codersdk.StartedConn {
	for {
		p := d.take()
		if p == nil {
			return nil
		}
		if c, err := p.Start(opts); err == nil {
			return c
		}
	}
}

// take returns the oldest prepared connection young enough to trust.
func (d *preparedDialer) take() *codersdk.PreparedConn {
	d.mu.Lock()
	defer d.mu.Unlock()
	for len(d.ready) > 0 {
		p := d.ready[0]
		d.ready = d.ready[1:]
		if p.Age() <= preparedMaxAge {
			return p
		}
		_ = p.Close()
	}
	return nil
}

// refill prepares connections in the background up to preparedAhead,
// counting those on their way, along the route's current way. A failure
// is left for the next dial to meet and report (and fall back on).
func (d *preparedDialer) refill() {
	d.mu.Lock()
	defer d.mu.Unlock()
	c := d.route.client()
	if !d.route.canPrepare(c) {
		return
	}
	for ; !d.closed && len(d.ready)+d.preparing < preparedAhead; d.preparing++ {
		go func() {
			ctx, cancel := context.WithTimeout(d.life, 30*time.Second)
			defer cancel()
			p, err := c.PrepareWorkspaceAgentConn(ctx, d.agentID)
			d.route.preparedRefused(c, err)
			d.mu.Lock()
			defer d.mu.Unlock()
			d.preparing--
			switch {
			case err != nil:
			case d.closed:
				_ = p.Close()
			default:
				d.ready = append(d.ready, p)
			}
		}()
	}
}

// close discards the prepared connection, now and when one on its way
// arrives.
func (d *preparedDialer) close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closed = true
	for _, p := range d.ready {
		_ = p.Close()
	}
	d.ready = nil
}
