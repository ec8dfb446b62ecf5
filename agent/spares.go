package agent

import (
	"context"
	"errors"
	"net"
	"sync"
	"time"

	"airgapcoder/codersdk"
	"airgapcoder/relayconn"
)

// Spare connections (coderd/relayspares.go): while its session with coderd
// is up, the agent keeps codersdk.AgentSpareConns raw relay connections
// dialed ahead, each waiting for the header of one user connection, which
// it then serves as it serves a stream, on a socket of its own. Each is
// replaced once its connection is made (serveStream's settled: for a TCP
// port, once the target's first bytes went back), not before: dialing,
// with its TLS handshake, while a connection is being made competes with
// it for the CPU. Without spares every connection is a stream of the
// session, so a spare that cannot be had is only waited for (with
// backoff), never an error, and none is tried again in a session whose raw
// upgrade a proxy between refuses.

// runSpares keeps the session's spare connections, dialed through c (the
// URL the session is connected through), until ctx, the session's life,
// ends.
func (a *Agent) runSpares(ctx context.Context, c *codersdk.Client) {
	for range codersdk.AgentSpareConns {
		a.streams.Go(func() { a.keepSpare(ctx, c) })
	}
}

// keepSpare keeps one spare connection dialed through c until ctx ends.
func (a *Agent) keepSpare(ctx context.Context, c *codersdk.Client) {
	b := a.newBackoff()
	for ctx.Err() == nil {
		conn, err := c.ConnectAgentSpare(ctx)
		if errors.Is(err, relayconn.ErrUpgradeNotPassed) {
			a.log.Debug("no spare connections in this session: the raw upgrade does not reach coderd", "err", err)
			return
		}
		if err != nil {
			a.log.Debug("dial a spare connection to coderd", "err", err)
			if !a.backoffWait(ctx, b, nil) {
				return
			}
			continue
		}
		hdr, err := waitForHeader(ctx, conn)
		if err != nil {
			_ = conn.Close()
			if ctx.Err() == nil {
				a.log.Debug("spare connection ended before use", "err", err)
				if !a.backoffWait(ctx, b, nil) {
					return
				}
			}
			continue
		}
		b.Reset()
		settled := make(chan struct{})
		a.streams.Go(func() { a.serveStream(ctx, conn, hdr, sync.OnceFunc(func() { close(settled) })) })
		select {
		case <-settled:
		case <-ctx.Done():
		}
	}
}

// waitForHeader waits, as long as it takes, for the header coderd writes
// on a spare connection when it takes it for a user's connection; the
// session's end closes a spare still waiting. The answer then has
// answerWait, as on a stream.
func waitForHeader(ctx context.Context, conn net.Conn) (codersdk.RelayHeader, error) {
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	var hdr codersdk.RelayHeader
	err := relayconn.ReadFrame(conn, &hdr)
	if !stop() {
		return hdr, context.Cause(ctx)
	}
	if err != nil {
		return hdr, err
	}
	return hdr, conn.SetDeadline(time.Now().Add(answerWait))
}
