package agent

import (
	"context"
	"errors"
	"net"
	"strconv"
	"syscall"
	"time"

	"airgapcoder/codersdk"
	"airgapcoder/relayconn"
)

// answerWait bounds how long a new stream may take to bring its header
// and be answered; the answer lifts it.
const answerWait = 15 * time.Second

// handleStream serves one stream coderd opened: it reads the
// codersdk.RelayHeader, answers with a codersdk.RelayReply, and hands the
// stream to the SSH server or a web terminal session, or splices it to a
// TCP port.
func (a *Agent) handleStream(ctx context.Context, stream net.Conn) {
	_ = stream.SetDeadline(time.Now().Add(answerWait))
	var hdr codersdk.RelayHeader
	if err := relayconn.ReadFrame(stream, &hdr); err != nil {
		a.log.Warn("bad relay stream header", "err", err)
		_ = stream.Close()
		return
	}
	a.serveStream(ctx, stream, hdr, func() {})
}

// settleWait is how long after its answer a TCP connection whose target
// has not spoken yet counts as made (serveStream).
const settleWait = 10 * time.Millisecond

// serveStream serves a stream, or a spare connection (spares.go), whose
// header was read. settled is called once the connection no longer needs
// the machine's attention to be made: for a TCP port once the target's
// first bytes went back (or settleWait after the answer, for a target that
// waits for its client), else once answered; and at the latest when
// serveStream returns (a refusal, a connection that ended first). It must
// be safe to call more than once.
func (a *Agent) serveStream(ctx context.Context, stream net.Conn, hdr codersdk.RelayHeader, settled func()) {
	defer settled() // at the latest: refused, or ended before it settled
	log := a.log.With("conn", hdr.ConnID, "user", hdr.User, "kind", hdr.Kind)
	reply := func(err error) bool {
		r := codersdk.RelayReply{}
		if err != nil {
			r.Error = err.Error()
		}
		if werr := relayconn.WriteFrame(stream, r); werr != nil || err != nil {
			_ = stream.Close()
			return false
		}
		_ = stream.SetDeadline(time.Time{})
		return true
	}
	switch hdr.Kind {
	case codersdk.RelayKindSSH:
		if !reply(nil) {
			return
		}
		settled()
		log.Debug("ssh connection")
		a.ssh.serveConn(ctx, stream, log)
	case codersdk.RelayKindTCP:
		target, err := dialWorkspace(ctx, hdr.Host, hdr.Port)
		if err == nil {
			err = forwardWaiting(stream, target)
		}
		if !reply(err) {
			log.Debug("tcp connection refused", "host", hdr.Host, "port", hdr.Port, "err", err)
			if target != nil {
				_ = target.Close()
			}
			return
		}
		log.Debug("tcp connection", "host", hdr.Host, "port", hdr.Port)
		later := time.AfterFunc(settleWait, settled)
		defer later.Stop()
		// The agent's shutdown ends the forward (a spare's own socket
		// outlives the session; a reconnect must not cut it).
		if a.runCtx != nil {
			stop := context.AfterFunc(a.runCtx, func() { _ = stream.Close(); _ = target.Close() })
			defer stop()
		}
		// Either side's end closes both, as on every hop of the relay.
		relayconn.Splice(relayconn.AfterWrite{Conn: stream, Hook: settled}, target, relayconn.SpliceOptions{})
	case codersdk.RelayKindPTY:
		a.ptys.serve(stream, hdr, func(err error) bool {
			defer settled()
			return reply(err)
		}, log)
	default:
		reply(errors.New("unknown stream kind " + strconv.Quote(hdr.Kind) + " (this agent speaks ssh, tcp and pty)"))
	}
}

// forwardWaiting writes to target the first bytes the stream already holds
// behind its header (a prepared connection's client writes before coderd
// answers), up to 8 KiB, before the agent answers: the target starts on its
// reply while the answer travels, which saves a new connection one write's
// time. It does not wait for bytes that have not arrived, and 8 KiB fit in
// a new connection's socket buffers, so a target that does not read cannot
// hold the answer up.
func forwardWaiting(stream net.Conn, target net.Conn) error {
	if err := stream.SetReadDeadline(time.Now()); err != nil {
		return nil
	}
	defer stream.SetReadDeadline(time.Now().Add(answerWait))
	var buf [8 << 10]byte
	n, _ := stream.Read(buf[:]) // an error: nothing waits, or the stream ended (splice sees it)
	if n == 0 {
		return nil
	}
	_, err := target.Write(buf[:n])
	return err
}

// dialWorkspace connects to host:port inside the workspace; an empty host
// is the loopback, IPv4 then IPv6.
func dialWorkspace(ctx context.Context, host string, port uint16) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var d net.Dialer
	p := strconv.Itoa(int(port))
	if host != "" {
		return d.DialContext(ctx, "tcp", net.JoinHostPort(host, p))
	}
	conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort("127.0.0.1", p))
	if err != nil && errors.Is(err, syscall.ECONNREFUSED) {
		if conn6, err6 := d.DialContext(ctx, "tcp", net.JoinHostPort("::1", p)); err6 == nil {
			return conn6, nil
		}
	}
	return conn, err
}
