package coderd

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/gin-gonic/gin"
	"github.com/hashicorp/yamux"

	"airgapcoder/coderd/database"
	"airgapcoder/codersdk"
	"airgapcoder/relayconn"
	"airgapcoder/relaymux"
)

// The relay: every byte between a user and a workspace passes through
// coderd. An agent keeps one relay connection to coderd (GET
// /api/v2/workspaceagents/me/connect) carrying a yamux session in which
// coderd opens a stream per user connection, unless one of the agent's
// spare connections waits (relayspares.go). Either starts with a
// codersdk.RelayHeader (kind ssh, tcp or pty, target port) and the agent's
// codersdk.RelayReply; then it carries the connection's bytes. Users reach
// it through a relay connection of their own (GET
// /api/v2/workspaceagents/{agent}/connect) or a dev URL (devurls.go).
//
// Sessions live in this replica's memory: a user connection must reach the
// replica its agent is connected to (docs/relay.md).

// relay maps agent ids to this replica's agent sessions.
type relay struct {
	mu       sync.Mutex
	sessions map[string]*agentSession
	// byToken are the same sessions by their agent's token, which
	// authenticates the agent's spare connections (relayspares.go).
	byToken map[string]*agentSession

	// beat orders the replica's heartbeat (agentheartbeat.go), which holds
	// it to write, after the disconnections it did not see: a session's end
	// holds it to read while it unregisters and records the end, so that a
	// heartbeat never marks connected an agent whose end it missed.
	beat sync.RWMutex
	// connects batches the records of agents' connections (agentheartbeat.go).
	connects connectBatcher

	// transports proxy dev URLs (devurls.go), one per user: a pooled
	// connection is never reused for another user's request, so each
	// connection's audit record names one user.
	transports map[string]*http.Transport
}

func newRelay() *relay {
	return &relay{sessions: map[string]*agentSession{}, byToken: map[string]*agentSession{}, transports: map[string]*http.Transport{}}
}

// agentSession is one agent's live connection: its own relay connection
// to this replica, or its connection to a workspace proxy whose relay
// session is on this replica (workspaceproxyrelay.go).
type agentSession struct {
	agentID string // guarded by relay.mu: a new build gives the token a new row
	token   string // the agent's token, which finds its newest row
	// mux is the session streams to the agent are opened on: the agent's
	// own, or the proxy's relay session.
	mux *yamux.Session
	// proxied, for an agent connected to a workspace proxy, is the
	// agent's OpAgent stream on the proxy's relay session (closing it ends
	// the agent's connection here) and the proxy; nil for an agent
	// connected here directly.
	proxied *proxiedAgent
	// moved, when set, tells the agent's side that a new build gave its
	// token the row agentID (a proxy re-keys its agent).
	moved     func(agentID string)
	log       *slog.Logger // the session's logger, with the agent's attributes
	connected time.Time
	spares    spares // the agent's spare connections (relayspares.go)
}

// end closes the agent's connection to this replica: its session, or its
// stream on a proxy's relay session.
func (s *agentSession) end() {
	if s.proxied != nil {
		_ = s.proxied.stream.Close()
		return
	}
	_ = s.mux.Close()
}

// register makes s the session of agentID and returns the one it replaces.
func (r *relay) register(agentID string, s *agentSession) *agentSession {
	r.mu.Lock()
	defer r.mu.Unlock()
	old := r.sessions[agentID]
	s.agentID = agentID
	r.sessions[agentID] = s
	if s.token != "" {
		r.byToken[s.token] = s
	}
	return old
}

// move re-keys s under agentID (the newest row of its token); it reports
// whether s is still registered.
func (r *relay) move(s *agentSession, agentID string) (old *agentSession, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.sessions[s.agentID] != s {
		return nil, false
	}
	delete(r.sessions, s.agentID)
	old = r.sessions[agentID]
	if old != nil && r.byToken[old.token] == old {
		delete(r.byToken, old.token)
	}
	s.agentID = agentID
	r.sessions[agentID] = s
	if s.token != "" {
		r.byToken[s.token] = s
	}
	return old, true
}

// unregister removes s unless a newer session replaced it; it reports
// whether s was still registered.
func (r *relay) unregister(s *agentSession) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.sessions[s.agentID] != s {
		return false
	}
	delete(r.sessions, s.agentID)
	if r.byToken[s.token] == s {
		delete(r.byToken, s.token)
	}
	return true
}

// withToken returns the session of the agent with token, nil when it has
// none on this replica.
func (r *relay) withToken(token string) *agentSession {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.byToken[token]
}

// all returns this replica's sessions.
func (r *relay) all() []*agentSession {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]*agentSession, 0, len(r.sessions))
	for _, s := range r.sessions {
		out = append(out, s)
	}
	return out
}

// idOf returns the agent id s is registered under.
func (r *relay) idOf(s *agentSession) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return s.agentID
}

func (r *relay) get(agentID string) *agentSession {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sessions[agentID]
}

// connected returns the number of agents connected to this replica.
func (r *relay) connected() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.sessions)
}

// relayYamuxConfig tunes coderd's side of an agent session.
func (api *API) relayYamuxConfig() *yamux.Config {
	return relaymux.Config(api.log, api.opts.AgentKeepAliveInterval)
}

// agentConnect serves an agent's relay connection for as long as it stays
// up (keepAgentSession).
func (api *API) agentConnect(c *gin.Context) error {
	if c.Query("spare") != "" {
		return api.agentSpare(c)
	}
	a := agentFrom(c)
	token := c.Request.Header.Get(codersdk.SessionTokenHeader)
	ctx, cancel := context.WithCancel(c.Request.Context())
	defer cancel()
	nc, err := acceptRelayConn(ctx, c)
	if err != nil {
		api.log.Info("agent connection not accepted", "agent", a.ID, "err", err)
		return nil // the client has its answer, or no connection left
	}
	mux, err := yamux.Client(relayconn.CoalescedYamuxConn(nc), api.relayYamuxConfig())
	if err != nil {
		_ = nc.Close()
		return fmt.Errorf("start relay session: %w", err)
	}
	defer mux.Close()
	s := &agentSession{mux: mux, connected: api.now()}
	defer s.spares.close()
	log := api.log.With("agent", a.ID, "agent_name", a.Name, "workspace", a.OwnerName+"/"+a.WorkspaceName, "remote", c.Request.RemoteAddr)
	api.keepAgentSession(ctx, s, a.ID, token, mux.CloseChan(), log)
	return nil
}

// keepAgentSession makes s agent agentID's session on this replica (a
// session it replaces is ended) and keeps it until gone is closed or coderd
// shuts down, recording liveness: first/last_connected_at and this replica
// when it is up (recordAgentConnected) and then every
// AgentHeartbeatInterval (the replica's heartbeat, agentheartbeat.go,
// which also moves it to the row a newer build gave its token),
// disconnected_at when it ends. The connection and its end are announced
// on database.ChannelAgentConnection. It ends s before it returns.
func (api *API) keepAgentSession(ctx context.Context, s *agentSession, agentID, token string, gone <-chan struct{}, log *slog.Logger) {
	s.token, s.log = token, log
	if old := api.relay.register(agentID, s); old != nil {
		// The agent reconnected before the old connection was seen dead.
		old.end()
	}
	if err := api.recordAgentConnected(ctx, agentID); err != nil {
		log.Warn("record agent connection", "err", err)
	}
	log.Info("workspace agent connected", "agents_on_replica", api.relay.connected())

	reason := "connection closed"
	select {
	case <-gone:
	case <-api.closing:
		reason = "coderd is shutting down"
	}
	s.end()
	api.relay.beat.RLock()
	if api.relay.unregister(s) {
		dctx, dcancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		if err := api.db.MarkAgentDisconnected(dctx, api.relay.idOf(s), api.now(), api.ReplicaID()); err != nil {
			log.Warn("record agent disconnection", "err", err)
		}
		_ = api.db.Notify(dctx, database.ChannelAgentConnection, api.relay.idOf(s))
		dcancel()
	}
	api.relay.beat.RUnlock()
	log.Info("workspace agent disconnected", "reason", reason, "connected_for", api.now().Sub(s.connected).Round(time.Millisecond))
}

// ofRunningBuild reports whether agent a belongs to its workspace's latest
// build and that build started the workspace.
func ofRunningBuild(a database.WorkspaceAgent) bool {
	return a.LatestBuild && a.Transition == string(codersdk.WorkspaceTransitionStart)
}

// agentUnavailable says why an agent has no session on this replica.
func (api *API) agentUnavailable(a database.WorkspaceAgent) error {
	if !ofRunningBuild(a) {
		return errorf(http.StatusConflict, "", "Agent %s belongs to an old build of workspace %s/%s; connect to the workspace's current agent (is the workspace stopped? run `coder start %s`)",
			a.Name, a.OwnerName, a.WorkspaceName, a.WorkspaceName)
	}
	status := api.agentStatusOf(a.Agent)
	if status == codersdk.AgentStatusConnected {
		return errorf(http.StatusServiceUnavailable, "",
			"Agent %s of workspace %s/%s is connected to a coderd replica that is not alive; it will reconnect to a live one", a.Name, a.OwnerName, a.WorkspaceName)
	}
	return errorf(http.StatusServiceUnavailable, "", "Agent %s of workspace %s/%s is not connected (status %s, lifecycle %s)",
		a.Name, a.OwnerName, a.WorkspaceName, status, a.LifecycleState)
}

// openStream opens a relayed connection to the agent's target and waits
// for the agent's answer. A refusal by the agent (nothing listens on the
// port) is a 502 with the agent's reason.
func (api *API) openStream(s *agentSession, hdr codersdk.RelayHeader) (net.Conn, error) {
	stream, err := api.startStream(s, hdr)
	if err != nil {
		return nil, err
	}
	if err := stream.await(); err != nil {
		return nil, err
	}
	return stream, nil
}

// startStream opens a connection to the agent (a spare or a stream,
// relayspares.go, or a stream through the workspace proxy the agent is
// connected to) and sends it hdr, without waiting for the agent's answer
// (pendingStream).
func (api *API) startStream(s *agentSession, hdr codersdk.RelayHeader) (*pendingStream, error) {
	if s.proxied != nil {
		return api.startProxiedStream(s, hdr) // workspaceproxyrelay.go
	}
	stream, err := api.openAgentConn(s, hdr)
	if err != nil {
		return nil, errorf(http.StatusServiceUnavailable, err.Error(), "The agent's connection is closing; try again in a moment")
	}
	_ = stream.SetDeadline(time.Now().Add(15 * time.Second))
	if err := relayconn.WriteFrame(stream, hdr); err != nil {
		_ = stream.Close()
		return nil, errorf(http.StatusBadGateway, err.Error(), "Send the connection request to the agent")
	}
	return &pendingStream{Conn: stream, answer: func() error {
		var reply codersdk.RelayReply
		if err := relayconn.ReadFrame(stream, &reply); err != nil {
			_ = stream.Close()
			return errorf(http.StatusBadGateway, err.Error(), "The agent did not answer the connection request")
		}
		if reply.Error != "" {
			_ = stream.Close()
			return errorf(http.StatusBadGateway, "", "The agent could not connect: %s", reply.Error)
		}
		_ = stream.SetDeadline(time.Time{})
		return nil
	}}, nil
}

// pendingStream is a stream to an agent whose answer to the connection
// request is read when first needed: bytes written before it go out at
// once behind the request (the agent drops them if it refuses), and reads
// begin after it. A write that fails before the answer waits for it, so
// that whoever acts on the failure knows the answer.
type pendingStream struct {
	net.Conn
	answer func() error // reads and checks the answer; nil when there is none to wait for
	// onAnswer, when set before the first read or write, is called once
	// with the answer before anything else happens on the stream.
	onAnswer func(error)

	once sync.Once
	err  error
}

// await waits for the agent's answer: nil when the target is connected.
func (s *pendingStream) await() error {
	s.once.Do(func() {
		if s.answer != nil {
			s.err = s.answer()
		}
		if s.onAnswer != nil {
			s.onAnswer(s.err)
		}
	})
	return s.err
}

func (s *pendingStream) Read(b []byte) (int, error) {
	if err := s.await(); err != nil {
		return 0, err
	}
	return s.Conn.Read(b)
}

func (s *pendingStream) Write(b []byte) (int, error) {
	n, err := s.Conn.Write(b)
	if err != nil {
		if aerr := s.await(); aerr != nil {
			return n, aerr
		}
	}
	return n, err
}

// ReplicaID is this replica's id ("" when it has no registration).
func (api *API) ReplicaID() string {
	if api.opts.Replicas == nil {
		return ""
	}
	return api.opts.Replicas.Self().ID
}

// newConnID names a relayed connection in logs.
func newConnID() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// relayHeaderFromQuery reads ?kind=ssh|tcp&port=N&host=H.
func relayHeaderFromQuery(c *gin.Context) (codersdk.RelayHeader, error) {
	t := codersdk.RelayTarget{Kind: c.DefaultQuery("kind", codersdk.RelayKindSSH), Host: c.Query("host")}
	if t.Kind == codersdk.RelayKindTCP {
		port, err := strconv.ParseUint(c.Query("port"), 10, 16)
		if err != nil {
			return codersdk.RelayHeader{}, validation("port", "must be a TCP port (1-65535)")
		}
		t.Port = uint16(port)
	}
	return relayHeaderOf(t)
}

// relayHeaderOf checks a user's connection target and makes it the header
// of a new relayed connection.
func relayHeaderOf(t codersdk.RelayTarget) (codersdk.RelayHeader, error) {
	hdr := codersdk.RelayHeader{Kind: t.Kind, ConnID: newConnID()}
	switch hdr.Kind {
	case codersdk.RelayKindSSH:
	case codersdk.RelayKindTCP:
		if t.Port == 0 {
			return hdr, validation("port", "must be a TCP port (1-65535)")
		}
		if len(t.Host) > 253 || strings.ContainsAny(t.Host, "/ \t\r\n") {
			return hdr, validation("host", "must be a host name or IP address")
		}
		hdr.Port, hdr.Host = t.Port, t.Host
	default:
		return hdr, validation("kind", "must be ssh or tcp")
	}
	return hdr, nil
}

// agentStream is a relay stream to an agent, opened for a user's request.
type agentStream struct {
	*pendingStream
	hdr codersdk.RelayHeader
	mux *yamux.Session
	log *slog.Logger
}

// openAgentStream checks that the caller may connect to the agent the path
// names (its workspace's owner, or the owner role), builds the stream's
// header from the request with header, and opens the stream. e, the
// connection's audit record, learns the agent and the header.
func (api *API) openAgentStream(c *gin.Context, e *auditEntry, header func(*gin.Context) (codersdk.RelayHeader, error)) (*agentStream, error) {
	a, err := api.connectableAgent(c, e)
	if err != nil {
		return nil, err
	}
	hdr, err := header(c)
	if err != nil {
		return nil, err
	}
	stream, err := api.dialAgentStream(c.Request.Context(), a, actor(c), hdr, c.Request.RemoteAddr, e)
	if err == nil {
		if err = stream.await(); err != nil {
			stream.log.Info("relay connection refused", "err", err)
		}
	}
	return stream, err
}

// connectableAgent is the agent the path names, when the caller may
// connect to it; e learns the agent.
func (api *API) connectableAgent(c *gin.Context, e *auditEntry) (database.WorkspaceAgent, error) {
	a, err := api.agentParam(c)
	e.agent(a)
	if err != nil {
		return a, err
	}
	if !mayConnect(actor(c), a.OwnerID) {
		return a, mayNotConnect(a)
	}
	return a, nil
}

func mayNotConnect(a database.WorkspaceAgent) error {
	return errorf(http.StatusForbidden, "", "Only the workspace's owner and users with the owner role may connect to workspace %s/%s", a.OwnerName, a.WorkspaceName)
}

// dialAgentStream opens user me's stream with header hdr to agent a, for a
// client at remote. The agent's answer may still be on its way
// (pendingStream).
func (api *API) dialAgentStream(ctx context.Context, a database.WorkspaceAgent, me database.User, hdr codersdk.RelayHeader, remote string, e *auditEntry) (*agentStream, error) {
	hdr.User = me.Username
	attrs := []any{"conn", hdr.ConnID, "user", me.Username, "workspace", a.OwnerName + "/" + a.WorkspaceName, "agent", a.Name,
		"kind", hdr.Kind, "remote", remote}
	if hdr.Port != 0 {
		attrs = append(attrs, "port", hdr.Port, "host", hdr.Host)
	}
	if hdr.PTY != nil {
		attrs = append(attrs, "reconnect", hdr.PTY.Reconnect)
		e.field("reconnect", hdr.PTY.Reconnect)
	}
	log := api.log.With(attrs...)
	stream, mux, err := api.dialAgent(ctx, a, hdr)
	if err != nil {
		log.Info("relay connection refused", "err", err)
		return nil, err
	}
	return &agentStream{pendingStream: stream, hdr: hdr, mux: mux, log: log}, nil
}

// workspaceAgentConnect relays a user's connection (a raw upgrade or a
// WebSocket) to a new stream to the agent. Only the workspace's owner and
// users with the owner role may. With ?prepare=1 the connection waits for
// its target (relayprepared.go).
func (api *API) workspaceAgentConnect(c *gin.Context) error {
	if c.Query("prepare") != "" {
		return api.workspaceAgentPrepared(c)
	}
	e := api.audit(c, codersdk.AuditActionConnect, codersdk.AuditResourceWorkspaceAgent).resource(c.Param("agent"), "").
		field("kind", c.DefaultQuery("kind", codersdk.RelayKindSSH))
	stream, err := api.openAgentStream(c, e, relayHeaderFromQuery)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(c.Request.Context())
	defer cancel()
	nc, err := acceptRelayConn(ctx, c)
	if err != nil {
		_ = stream.Close()
		stream.log.Info("relay connection not accepted", "err", err)
		return nil
	}
	api.closeOnShutdown(ctx, nc)
	api.relayUserConn(ctx, nc, stream, e)
	return nil
}

// closeOnShutdown closes c when coderd begins to shut down, unless ctx
// ends first: a shutting-down coderd ends the user connections it relays
// (the HTTP server no longer tracks them once taken over).
func (api *API) closeOnShutdown(ctx context.Context, c io.Closer) {
	go func() {
		select {
		case <-api.closing:
			_ = c.Close()
		case <-ctx.Done():
		}
	}()
}

// relayUserConn relays user connection nc and agent stream until either
// ends, then writes the connection's record e.
func (api *API) relayUserConn(ctx context.Context, nc net.Conn, stream *agentStream, e *auditEntry) {
	stream.log.Info("relay connection opened")
	defer api.trackSession(e.row.ResourceID)() // the agent's id: activity moves the deadline (schedules_activity.go)
	began := time.Now()
	up, down := splice(nc, stream)
	if err := stream.await(); err != nil {
		// Refused after the client's bytes were on their way (a prepared
		// connection's): recorded as any refusal.
		ae := api.apiErrorOf(err, "conn", stream.hdr.ConnID)
		stream.log.Info("relay connection refused", "err", err)
		e.field("error", ae.Message).write(ctx, ae.status)
		return
	}
	stream.log.Info("relay connection closed", "bytes_to_agent", up, "bytes_from_agent", down, "duration", time.Since(began).Round(time.Millisecond))
	api.auditRelayed(ctx, e, stream.hdr, began, up, down)
}

// acceptRelayConn takes over a relay request's connection: raw bytes after
// an upgrade to relayconn.Protocol (the CLI and agents), or a binary
// WebSocket (browsers, and clients behind a proxy that passes only
// WebSockets), which ctx ends.
func acceptRelayConn(ctx context.Context, c *gin.Context) (net.Conn, error) {
	if relayconn.IsUpgrade(c.Request) {
		return relayconn.AcceptUpgrade(c.Writer)
	}
	ws, err := websocket.Accept(c.Writer, c.Request, &websocket.AcceptOptions{CompressionMode: websocket.CompressionDisabled})
	if err != nil {
		return nil, err // Accept has answered the client
	}
	return websocket.NetConn(ctx, ws, websocket.MessageBinary), nil
}

// splice relays user connection a and agent connection b until either
// ends, then closes both; it returns the bytes copied a→b and b→a. a is the
// user's side: a relay connection over TLS reads what its socket already
// holds and batches its records (relayconn.AcceptUpgrade), and the upload
// is pipelined so that reading a and writing b use two cores.
func splice(a, b net.Conn) (ab, ba int64) {
	return relayconn.Splice(a, b, relayconn.SpliceOptions{Pipelined: true})
}

// errAgentGone is returned by relay dials when the agent has no session.
var errAgentGone = errors.New("the workspace agent is not connected to this coderd")
