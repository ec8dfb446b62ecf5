package coderd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/google/uuid"
	"github.com/hashicorp/yamux"

	"airgapcoder/coderd/database"
	"airgapcoder/codersdk"
	"airgapcoder/relayconn"
)

// The primary's side of the workspace proxy relay (docs/wsproxy.md,
// "Protocol"; the wire types are codersdk/workspaceproxyrelay.go). A proxy
// keeps one relay session to a replica: a raw relay upgrade of GET
// /api/v2/workspaceproxies/me/relay, authenticated with the proxy's token,
// on which this replica runs the yamux server.
//
//   - An agent connected to the proxy is an OpAgent stream: for as long as
//     it stays open the agent counts as connected to this replica, exactly
//     as one connected here directly (relay.go keepAgentSession), and a
//     stream to it (a user's connection on any replica, a dev URL) is an
//     OpDial stream this replica opens on the proxy's session
//     (startProxiedStream).
//   - A user's connection the proxy authorized, to an agent it does not
//     hold, is an OpDial stream the proxy opens: this replica dials the
//     agent wherever it is (dialAgent: here, another replica, another
//     proxy) and carries the bytes.
//
// The proxy authorizes users with authorize-connect (the user's session
// token, checked as the API checks it, and the same refusals as
// workspaceAgentConnect's) and reports each relayed connection when it
// ends, which this replica writes to the audit log with the proxy's name.
// A deleted proxy's session is closed at once on every replica
// (database.ChannelWorkspaceProxyDeleted); its token is refused from then
// on.

// maxProxyActiveAgents bounds the agents a proxy's heartbeat may report as
// active.
const maxProxyActiveAgents = 10_000

// proxyRelays are the workspace proxies' relay sessions on this replica,
// one per proxy (a new one replaces the old).
type proxyRelays struct {
	mu       sync.Mutex
	sessions map[string]*proxyRelay // by proxy id
}

// proxyRelay is one proxy's relay session.
type proxyRelay struct {
	proxyID, proxyName, replicaID string
	mux                           *yamux.Session
}

// proxiedAgent is an agent connected to a workspace proxy: its OpAgent
// stream on the proxy's relay session.
type proxiedAgent struct {
	stream net.Conn
	proxy  *proxyRelay
}

// add makes p its proxy's session and returns the one it replaces.
func (r *proxyRelays) add(p *proxyRelay) *proxyRelay {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.sessions == nil {
		r.sessions = map[string]*proxyRelay{}
	}
	old := r.sessions[p.proxyID]
	r.sessions[p.proxyID] = p
	return old
}

// remove forgets p unless a newer session replaced it.
func (r *proxyRelays) remove(p *proxyRelay) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.sessions[p.proxyID] == p {
		delete(r.sessions, p.proxyID)
	}
}

// close closes the session of proxy id, if this replica holds one, and
// reports whether it did.
func (r *proxyRelays) close(id string) bool {
	r.mu.Lock()
	p := r.sessions[id]
	delete(r.sessions, id)
	r.mu.Unlock()
	if p == nil {
		return false
	}
	_ = p.mux.Close()
	return true
}

// ids are the proxies whose sessions this replica holds.
func (r *proxyRelays) ids() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Collect(maps.Keys(r.sessions))
}

// workspaceProxyRelayRoutes mounts a proxy's relay session and the calls
// proxies make about user connections (codersdk/workspaceproxyrelay.go).
func (api *API) workspaceProxyRelayRoutes(v2 *gin.RouterGroup) {
	v2.GET("/workspaceproxies/me/relay", api.handle(api.workspaceProxyRelay))
	v2.POST("/workspaceproxies/me/authorize-connect", api.handle(api.proxyAuthorizeConnect))
	v2.POST("/workspaceproxies/me/connections", api.handle(api.proxyConnectionReport))
}

// watchProxyDeletions closes a deleted proxy's relay session on this
// replica when any replica announces the deletion. When the notifications'
// connection was lost (an empty payload), every session's proxy is looked
// up again, in the background.
func (api *API) watchProxyDeletions() {
	if api.ps == nil {
		return
	}
	api.ps.Subscribe(database.ChannelWorkspaceProxyDeleted, func(id string) {
		if id != "" {
			if api.proxyRelays.close(id) {
				api.log.Info("workspace proxy relay session closed: the proxy was deleted", "proxy_id", id)
			}
			return
		}
		api.hooks.Add(1)
		go func() {
			defer api.hooks.Done()
			api.closeDeletedProxyRelays(api.hooksCtx)
		}()
	})
}

// closeDeletedProxyRelays closes the sessions of proxies deleted since
// they opened.
func (api *API) closeDeletedProxyRelays(ctx context.Context) {
	for _, id := range api.proxyRelays.ids() {
		p, err := api.db.WorkspaceProxyByID(ctx, id)
		if err != nil && !errors.Is(err, database.ErrNotFound) {
			if ctx.Err() == nil {
				api.log.Warn("check a workspace proxy's relay session", "proxy_id", id, "err", err)
			}
			continue
		}
		if (err != nil || p.Deleted) && api.proxyRelays.close(id) {
			api.log.Info("workspace proxy relay session closed: the proxy was deleted", "proxy_id", id)
		}
	}
}

// workspaceProxyRelay serves a proxy's relay session until it ends, coderd
// shuts down, the proxy is deleted or a newer session of the same proxy
// replaces it. Agents registered through it are disconnected when it ends.
func (api *API) workspaceProxyRelay(c *gin.Context) error {
	p, err := api.authenticateProxy(c)
	if err != nil {
		return err
	}
	replicaID := c.Query("replica_id")
	if replicaID == "" || len(replicaID) > 64 {
		return validation("replica_id", "must be the proxy's replica id (1-64 characters), as it registered")
	}
	if !relayconn.IsUpgrade(c.Request) {
		return errorf(http.StatusUpgradeRequired, "", "A workspace proxy's relay session is an upgrade to %s", relayconn.Protocol)
	}
	log := api.log.With("proxy", p.Name, "proxy_replica", replicaID, "remote", c.Request.RemoteAddr)
	conn, err := relayconn.AcceptUpgrade(c.Writer)
	if err != nil {
		log.Info("workspace proxy relay session not accepted", "err", err)
		return nil
	}
	mux, err := yamux.Server(relayconn.CoalescedYamuxConn(conn), api.relayYamuxConfig())
	if err != nil {
		_ = conn.Close()
		log.Warn("start workspace proxy relay session", "err", err)
		return nil
	}
	s := &proxyRelay{proxyID: p.ID, proxyName: p.Name, replicaID: replicaID, mux: mux}
	if old := api.proxyRelays.add(s); old != nil {
		_ = old.mux.Close()
		log.Info("workspace proxy relay session replaces the proxy's previous one", "previous_replica", old.replicaID)
	}
	ctx, cancel := context.WithCancel(c.Request.Context())
	defer cancel()
	var wg sync.WaitGroup
	defer func() {
		_ = mux.Close()
		cancel() // dials still waiting for their agent give up
		api.proxyRelays.remove(s)
		wg.Wait() // every agent registered through the session is disconnected
	}()
	wg.Go(func() {
		select {
		case <-api.closing:
		case <-ctx.Done():
		case <-mux.CloseChan():
		}
		_ = mux.Close()
	})
	log.Info("workspace proxy relay session opened")
	for {
		stream, err := mux.AcceptStream()
		if err != nil {
			log.Info("workspace proxy relay session closed", "err", err)
			return nil
		}
		wg.Go(func() { api.serveProxyStream(ctx, s, stream, log) })
	}
}

// serveProxyStream serves one stream a proxy opened.
func (api *API) serveProxyStream(ctx context.Context, p *proxyRelay, stream *yamux.Stream, log *slog.Logger) {
	_ = stream.SetDeadline(time.Now().Add(15 * time.Second))
	var req codersdk.ProxyRelayRequest
	if err := relayconn.ReadFrame(stream, &req); err != nil {
		log.Info("workspace proxy relay stream without a request", "err", err)
		_ = stream.Close()
		return
	}
	switch req.Op {
	case codersdk.ProxyRelayOpAgent:
		api.serveProxiedAgent(ctx, p, stream, req, log)
	case codersdk.ProxyRelayOpDial:
		api.serveProxyDial(ctx, stream, req, log)
	default:
		_ = relayconn.WriteFrame(stream, codersdk.ProxyRelayReply{Status: http.StatusBadRequest,
			Message: fmt.Sprintf("Unknown relay stream operation %q: this coderd knows %q and %q (is the proxy newer than the primary?)",
				req.Op, codersdk.ProxyRelayOpAgent, codersdk.ProxyRelayOpDial)})
		_ = stream.Close()
	}
}

// serveProxiedAgent serves an OpAgent stream: it authenticates the agent's
// token and keeps the agent connected to this replica, through the proxy,
// until the stream or the session ends.
func (api *API) serveProxiedAgent(ctx context.Context, p *proxyRelay, stream net.Conn, req codersdk.ProxyRelayRequest, log *slog.Logger) {
	a, err := api.agentByToken(ctx, req.AgentToken)
	if err != nil {
		ae := api.apiErrorOf(err, "proxy", p.proxyName, "op", req.Op)
		log.Info("workspace agent through the proxy refused", "remote_agent", req.Remote, "err", ae.Message)
		_ = relayconn.WriteFrame(stream, codersdk.ProxyRelayReply{Status: ae.status, Message: ae.Message})
		_ = stream.Close()
		return
	}
	if err := relayconn.WriteFrame(stream, codersdk.ProxyRelayReply{AgentID: a.ID}); err != nil {
		log.Info("answer a workspace agent through the proxy", "agent", a.ID, "err", err)
		_ = stream.Close()
		return
	}
	_ = stream.SetDeadline(time.Time{})
	log = log.With("agent", a.ID, "agent_name", a.Name, "workspace", a.OwnerName+"/"+a.WorkspaceName, "remote_agent", req.Remote)
	s := &agentSession{mux: p.mux, proxied: &proxiedAgent{stream: stream, proxy: p}, connected: api.now()}
	s.spares.close() // spare connections are the agent's to a replica, which it does not have
	s.moved = func(agentID string) {
		// The heartbeat's goroutine is the stream's only writer from now on.
		_ = stream.SetWriteDeadline(time.Now().Add(10 * time.Second))
		if err := relayconn.WriteFrame(stream, codersdk.ProxyRelayReply{AgentID: agentID}); err != nil {
			log.Info("tell the workspace proxy its agent moved to a new build", "err", err)
			_ = stream.Close()
		}
		_ = stream.SetWriteDeadline(time.Time{})
	}
	// The proxy sends nothing more: the stream's end (the agent's
	// connection ended, the session closed) is a read that returns.
	gone := make(chan struct{})
	go func() {
		defer close(gone)
		_, _ = io.Copy(io.Discard, stream)
	}()
	api.keepAgentSession(ctx, s, a.ID, req.AgentToken, gone, log)
	<-gone
}

// agentByToken is the newest agent row of an agent token; an unknown token,
// and the agent of a deleted workspace, is 401 (as requireAgent refuses).
func (api *API) agentByToken(ctx context.Context, token string) (database.WorkspaceAgent, error) {
	if token == "" {
		return database.WorkspaceAgent{}, errorf(http.StatusUnauthorized, "", "Send the workspace agent's token (CODER_AGENT_TOKEN) in the agent stream's request")
	}
	a, err := api.db.AgentByAuthToken(ctx, token)
	if errors.Is(err, database.ErrNotFound) {
		return a, errorf(http.StatusUnauthorized, "", "Invalid agent token: no workspace agent has it")
	}
	if err != nil {
		return a, fmt.Errorf("look up the agent token: %w", err)
	}
	if a.WorkspaceDeleted {
		return a, errorf(http.StatusUnauthorized, "", "The workspace of this agent (%s/%s) was deleted", a.OwnerName, a.WorkspaceName)
	}
	return a, nil
}

// proxyDialTimeout bounds how long a proxy's dial waits for the agent: a
// reconnecting agent (agentReconnectWait) and its answer.
const proxyDialTimeout = 30 * time.Second

// serveProxyDial serves an OpDial stream: a user's connection the proxy
// authorized, to an agent wherever it is connected.
func (api *API) serveProxyDial(ctx context.Context, stream net.Conn, req codersdk.ProxyRelayRequest, log *slog.Logger) {
	hdr := req.Header
	if hdr.ConnID == "" {
		hdr.ConnID = newConnID()
	}
	log = log.With("conn", hdr.ConnID, "user", hdr.User, "agent", req.AgentID, "kind", hdr.Kind, "remote_user", req.Remote)
	if hdr.Port != 0 {
		log = log.With("port", hdr.Port, "host", hdr.Host)
	}
	_ = stream.SetDeadline(time.Now().Add(proxyDialTimeout))
	began := time.Now()
	var done func()
	up, down, err := api.serveRequested(stream, func() (net.Conn, error) {
		if err := checkProxiedHeader(hdr); err != nil {
			return nil, err
		}
		a, err := api.db.AgentByID(ctx, req.AgentID)
		if errors.Is(err, database.ErrNotFound) {
			return nil, notFound("Workspace agent " + req.AgentID)
		}
		if err != nil {
			return nil, fmt.Errorf("look up agent %s: %w", req.AgentID, err)
		}
		dctx, cancel := context.WithTimeout(ctx, proxyDialTimeout)
		defer cancel()
		conn, _, err := api.dialAgent(dctx, a, hdr)
		if err != nil {
			return nil, err
		}
		if err := conn.await(); err != nil {
			return nil, err
		}
		log.Info("relay connection through the workspace proxy opened")
		done = api.trackSession(a.ID) // activity moves the deadline (schedules_activity.go)
		return conn, nil
	})
	if done != nil {
		done()
	}
	if err != nil {
		log.Info("relay connection through the workspace proxy refused", "err", err)
		return
	}
	log.Info("relay connection through the workspace proxy closed", "bytes_to_agent", up, "bytes_from_agent", down,
		"duration", time.Since(began).Round(time.Millisecond))
}

// checkProxiedHeader checks the header of a connection a proxy dials: a
// kind the agent serves, a port for tcp, and the user it is for.
func checkProxiedHeader(hdr codersdk.RelayHeader) error {
	switch {
	case hdr.Kind != codersdk.RelayKindSSH && hdr.Kind != codersdk.RelayKindTCP && hdr.Kind != codersdk.RelayKindPTY:
		return badRequest("The dial's header has kind %q: it must be ssh, tcp or pty", hdr.Kind)
	case hdr.Kind == codersdk.RelayKindTCP && hdr.Port == 0:
		return badRequest("The dial's header has kind tcp and no port")
	case hdr.Kind == codersdk.RelayKindPTY && hdr.PTY == nil:
		return badRequest("The dial's header has kind pty and no pty")
	case hdr.User == "":
		return badRequest("The dial's header names no user: set it to the user the proxy authorized")
	}
	return nil
}

// startProxiedStream opens a stream to an agent connected to a workspace
// proxy: an OpDial stream on the proxy's relay session, whose header
// carries hdr. The proxy's answer is the agent's (pendingStream).
func (api *API) startProxiedStream(s *agentSession, hdr codersdk.RelayHeader) (*pendingStream, error) {
	p := s.proxied.proxy
	stream, err := s.mux.Open()
	if err != nil {
		return nil, errorf(http.StatusServiceUnavailable, err.Error(), "The relay session of workspace proxy %s, which the agent is connected to, is closing; try again in a moment", p.proxyName)
	}
	api.metrics.relayConns.WithLabelValues("proxy").Inc()
	_ = stream.SetDeadline(time.Now().Add(15 * time.Second))
	req := codersdk.ProxyRelayRequest{Op: codersdk.ProxyRelayOpDial, AgentID: api.relay.idOf(s), Header: hdr}
	if err := relayconn.WriteFrame(stream, req); err != nil {
		_ = stream.Close()
		return nil, errorf(http.StatusBadGateway, err.Error(), "Send the connection request to workspace proxy %s", p.proxyName)
	}
	return &pendingStream{Conn: stream, answer: func() error {
		var reply codersdk.ProxyRelayReply
		if err := relayconn.ReadFrame(stream, &reply); err != nil {
			_ = stream.Close()
			return errorf(http.StatusBadGateway, err.Error(), "Workspace proxy %s did not answer the connection request", p.proxyName)
		}
		if reply.Status != 0 {
			_ = stream.Close()
			return proxyRefusal(p.proxyName, reply)
		}
		_ = stream.SetDeadline(time.Time{})
		return nil
	}}, nil
}

// proxyRefusal is a proxy's refusal of a dial as the user gets it: the
// agent's own refusal (502) as a directly connected agent's reads.
func proxyRefusal(proxy string, reply codersdk.ProxyRelayReply) error {
	switch {
	case reply.Status == http.StatusBadGateway:
		return errorf(http.StatusBadGateway, "", "The agent could not connect: %s", reply.Message)
	case reply.Status < 400 || reply.Status > 599:
		return errorf(http.StatusBadGateway, "", "Workspace proxy %s answered the connection request with status %d: %s", proxy, reply.Status, reply.Message)
	}
	return errorf(reply.Status, "", "%s", reply.Message)
}

func (api *API) proxyAuthTTL() time.Duration {
	if api.opts.WorkspaceProxyAuthTTL > 0 {
		return api.opts.WorkspaceProxyAuthTTL
	}
	return DefaultWorkspaceProxyAuthTTL
}

// proxyAuthorizeConnect answers whether the session token a user gave a
// proxy may open a connection to an agent. The token is checked as every
// API request's is; the agent as workspaceAgentConnect checks it. A
// refusal of an authenticated user is audited (a connect record naming the
// proxy), as a refusal through the primary is; a yes is not (the proxy
// reports the connection when it ends).
func (api *API) proxyAuthorizeConnect(c *gin.Context) error {
	p, err := api.authenticateProxy(c)
	if err != nil {
		return err
	}
	var req codersdk.ProxyAuthorizeConnectRequest
	if err := decode(c, &req); err != nil {
		return err
	}
	hdr, err := proxiedTarget(req)
	if err != nil {
		return err
	}
	ctx := c.Request.Context()
	user, _, err := api.authenticate(ctx, req.SessionToken)
	if err != nil {
		return err
	}
	// From here on a refusal is recorded, with the user's address at the
	// proxy.
	e := api.audit(c, codersdk.AuditActionConnect, codersdk.AuditResourceWorkspaceAgent).
		actor(user).resource(req.AgentID, "").field("proxy", p.Name).field("kind", hdr.Kind)
	if ip := addrIP(req.Remote); ip != "" {
		e.row.IP = ip
	}
	if hdr.Port != 0 {
		e.field("port", hdr.Port)
	}
	a, err := api.db.AgentByID(ctx, req.AgentID)
	if errors.Is(err, database.ErrNotFound) || (err == nil && !can(user, resWorkspace, actRead, a.OwnerID)) {
		return notFound("Workspace agent")
	}
	if err != nil {
		return err
	}
	e.agent(a)
	if !mayConnect(user, a.OwnerID) {
		return mayNotConnect(a)
	}
	if !reconnecting(a) && !api.agentReachable(a) {
		return api.agentUnavailable(a)
	}
	e.skip(c)
	c.JSON(http.StatusOK, codersdk.ProxyAuthorizeConnectResponse{
		UserID: user.ID, Username: user.Username, AgentID: a.ID, AgentName: a.Name,
		WorkspaceID: a.WorkspaceID, WorkspaceName: a.WorkspaceName, OwnerName: a.OwnerName,
		ValidForMillis: api.proxyAuthTTL().Milliseconds(),
	})
	return nil
}

// proxiedTarget checks the target of a connection a proxy asks about.
func proxiedTarget(req codersdk.ProxyAuthorizeConnectRequest) (codersdk.RelayHeader, error) {
	if req.Kind == codersdk.RelayKindPTY {
		return codersdk.RelayHeader{Kind: req.Kind}, nil
	}
	return relayHeaderOf(codersdk.RelayTarget{Kind: req.Kind, Host: req.Host, Port: req.Port})
}

// proxyConnectionReport writes the audit record of a connection a proxy
// relayed, as auditRelayed writes one relayed here, naming the proxy.
func (api *API) proxyConnectionReport(c *gin.Context) error {
	p, err := api.authenticateProxy(c)
	if err != nil {
		return err
	}
	var r codersdk.ProxyConnectionReport
	if err := decode(c, &r); err != nil {
		return err
	}
	if err := checkConnectionReport(r); err != nil {
		return err
	}
	ctx := c.Request.Context()
	user, err := api.db.UserByID(ctx, r.UserID)
	if errors.Is(err, database.ErrNotFound) {
		return validation("user_id", "no user has this id")
	}
	if err != nil {
		return err
	}
	a, err := api.db.AgentByID(ctx, r.AgentID)
	if errors.Is(err, database.ErrNotFound) {
		return validation("agent_id", "no workspace agent has this id")
	}
	if err != nil {
		return err
	}
	e := &auditEntry{api: api, fields: map[string]any{}, row: database.AuditLog{
		IP: addrIP(r.Remote), UserAgent: c.Request.UserAgent(),
		Action: string(codersdk.AuditActionConnect), ResourceType: string(codersdk.AuditResourceWorkspaceAgent),
	}}
	e.actor(user).agent(a)
	maps.Copy(e.fields, connFields(r.Kind, r.Host, r.Port, r.ConnID, r.StartedAt, r.BytesUp, r.BytesDown))
	e.field("duration_ms", r.EndedAt.Sub(r.StartedAt).Milliseconds()).field("proxy", p.Name)
	if r.Remote != "" {
		e.field("remote", r.Remote)
	}
	status := http.StatusSwitchingProtocols
	if r.Error != "" {
		status = http.StatusBadGateway
		e.field("error", r.Error)
	}
	e.write(ctx, status)
	c.Status(http.StatusNoContent)
	return nil
}

// checkConnectionReport checks what a proxy says of a connection.
func checkConnectionReport(r codersdk.ProxyConnectionReport) error {
	switch {
	case uuid.Validate(r.UserID) != nil:
		return validation("user_id", "must be the id of the user the connection was for")
	case uuid.Validate(r.AgentID) != nil:
		return validation("agent_id", "must be the id of the agent the connection went to")
	case r.Kind == "" || len(r.Kind) > 32:
		return validation("kind", "must be the connection's kind (ssh, tcp, pty, dev-url), at most 32 characters")
	case len(r.ConnID) > 64 || len(r.Host) > 253 || len(r.Remote) > 256 || len(r.Error) > 4096:
		return validation("conn_id", "conn_id may have at most 64, host 253, remote 256 and error 4096 characters")
	case r.StartedAt.IsZero() || r.EndedAt.Before(r.StartedAt):
		return validation("ended_at", "started_at must be set and ended_at must not be before it")
	case r.BytesUp < 0 || r.BytesDown < 0:
		return validation("bytes_up", "byte counts must not be negative")
	}
	return nil
}

// addrIP is the IP address of host:port (or of a bare address); "" when
// it is none.
func addrIP(addr string) string {
	if ap, err := netip.ParseAddrPort(addr); err == nil {
		return ap.Addr().WithZone("").Unmap().String()
	}
	if a, err := netip.ParseAddr(addr); err == nil {
		return a.WithZone("").Unmap().String()
	}
	return ""
}

// checkActiveAgentIDs checks the agents a proxy's heartbeat reports as
// active and returns them without repeats.
func checkActiveAgentIDs(ids []string) ([]string, error) {
	if len(ids) > maxProxyActiveAgents {
		return nil, validation("active_agent_ids", fmt.Sprintf("at most %d agents per heartbeat; got %d", maxProxyActiveAgents, len(ids)))
	}
	seen := make(map[string]bool, len(ids))
	unique := make([]string, 0, len(ids))
	for _, id := range ids {
		if uuid.Validate(id) != nil {
			return nil, validation("active_agent_ids", fmt.Sprintf("%q is not an agent id", id))
		}
		if !seen[id] {
			seen[id] = true
			unique = append(unique, id)
		}
	}
	return unique, nil
}

// noteProxyActivity bumps the workspaces of the agents a proxy's heartbeat
// reports with open user connections (checkActiveAgentIDs), as the
// primary's own connections bump theirs (schedules_activity.go). Unknown
// agents are left out. A failure is logged: the heartbeat itself was
// recorded, and the next one reports the agents again.
func (api *API) noteProxyActivity(ctx context.Context, proxy string, ids []string) {
	if len(ids) == 0 {
		return
	}
	known, err := api.db.AgentRuntimes(ctx, ids)
	if err != nil {
		if ctx.Err() == nil {
			api.log.Warn("activity bump: look up the agents a workspace proxy reports active", "proxy", proxy, "err", err)
		}
		return
	}
	for _, id := range ids {
		if _, ok := known[id]; ok {
			api.noteActivity(id)
		}
	}
}
