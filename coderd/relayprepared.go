package coderd

import (
	"context"
	"time"

	"github.com/gin-gonic/gin"

	"airgapcoder/coderd/database"
	"airgapcoder/codersdk"
	"airgapcoder/relayconn"
)

// Prepared relay connections (codersdk.PreparedConn): the request is
// authenticated and the agent checked as for /connect, then the connection
// is taken over and waits, at most codersdk.PreparedConnIdle, for its
// target. When the target comes, the session token is checked again (a
// suspended user or a deleted token gets nothing more), at the same time as
// the agent is dialed, unless nothing changed who may do what since it was
// checked (authchanges.go): then the agent is dialed at once. A connection that
// never got its target connected nothing and leaves no audit record; every
// other one leaves the same record as a /connect request.

// workspaceAgentPrepared serves GET /workspaceagents/{agent}/connect?prepare=1.
func (api *API) workspaceAgentPrepared(c *gin.Context) error {
	e := api.audit(c, codersdk.AuditActionConnect, codersdk.AuditResourceWorkspaceAgent).resource(c.Param("agent"), "")
	a, err := api.connectableAgent(c, e)
	if err != nil {
		return err
	}
	me, token, remote := actor(c), tokenFromRequest(c.Request), c.Request.RemoteAddr
	key, epoch := c.MustGet(ctxAPIKey).(database.APIKey), authEpochOf(c)
	record := connAuditOf(c)
	ctx, cancel := context.WithCancel(c.Request.Context())
	defer cancel()
	nc, err := acceptRelayConn(ctx, c)
	if err != nil {
		api.log.Info("prepared relay connection not accepted", "err", err, "remote", remote)
		return nil
	}
	api.closeOnShutdown(ctx, nc)
	_ = nc.SetReadDeadline(time.Now().Add(codersdk.PreparedConnIdle))
	var target codersdk.RelayTarget
	if err := relayconn.ReadFrame(nc, &target); err != nil {
		_ = nc.Close() // never used: nothing to record
		return nil
	}
	_ = nc.SetReadDeadline(time.Time{})

	e = record.entry(api).field("kind", target.Kind)
	stream, err := api.connectPrepared(ctx, a, me, token, target, remote, e, api.authStillHolds(epoch, key))
	if err != nil {
		reply := api.targetReply(err, "agent", a.ID, "remote", remote)
		_ = relayconn.WriteFrame(nc, reply)
		_ = nc.Close()
		e.field("error", reply.Message).write(ctx, reply.StatusCode)
		return nil
	}
	// The client's bytes that followed its target go to the agent now,
	// behind the stream's header; the client hears the agent's answer
	// before any byte from the target.
	stream.onAnswer = func(err error) {
		if werr := relayconn.WriteFrame(nc, api.targetReply(err, "agent", a.ID, "remote", remote)); werr != nil && err == nil {
			_ = stream.Close()
		}
	}
	api.relayUserConn(ctx, nc, stream, e)
	return nil
}

// targetReply is the answer to a prepared connection's target: success
// when err is nil, else err's status and error envelope.
func (api *API) targetReply(err error, attrs ...any) codersdk.RelayTargetReply {
	if err == nil {
		return codersdk.RelayTargetReply{}
	}
	ae := api.apiErrorOf(err, attrs...)
	return codersdk.RelayTargetReply{StatusCode: ae.status, Response: ae.Response}
}

// connectPrepared dials the prepared connection's target and, unless
// authHolds (nothing changed since the token was checked:
// authchanges.go), checks the token again at the same time.
func (api *API) connectPrepared(ctx context.Context, a database.WorkspaceAgent, me database.User, token string, target codersdk.RelayTarget, remote string, e *auditEntry, authHolds bool) (*agentStream, error) {
	hdr, err := relayHeaderOf(target)
	if err != nil {
		return nil, err
	}
	type authResult struct {
		user database.User
		err  error
	}
	authed := make(chan authResult, 1)
	if !authHolds {
		go func() {
			u, _, err := api.authenticate(ctx, token)
			authed <- authResult{u, err}
		}()
	}
	if api.relay.get(a.ID) == nil {
		// Not here: where the agent is now is in its row.
		if a, err = api.db.AgentByID(ctx, a.ID); err != nil {
			return nil, err
		}
	}
	stream, dialErr := api.dialAgentStream(ctx, a, me, hdr, remote, e)
	if authHolds {
		return stream, dialErr
	}
	auth := <-authed
	switch {
	case auth.err != nil:
		err = auth.err
	case !mayConnect(auth.user, a.OwnerID):
		err = mayNotConnect(a)
	default:
		return stream, dialErr
	}
	if dialErr == nil {
		_ = stream.Close()
	}
	return nil, err
}
