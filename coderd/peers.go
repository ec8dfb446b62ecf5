package coderd

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/hashicorp/yamux"

	"airgapcoder/coderd/database"
	"airgapcoder/codersdk"
	"airgapcoder/relayconn"
)

// Relaying across replicas. A user's connection may reach any replica,
// while an agent's relay connection is on one (its row's
// connected_replica_id). When they differ, this replica carries the stream
// to the agent's replica over one long-lived yamux session per peer: a raw
// relay upgrade (relayconn.Protocol) of GET /api/v2/replicas/relay at
// the peer's relay address, which is its own listener, not the load
// balancer. The peer opens the stream to its agent and answers with a
// codersdk.ProxyRelayReply frame; then the stream carries the
// connection's bytes.
//
// Trust: a replica proves it belongs to the deployment with the replica
// secret, a random value created in the database on first start that only
// replicas read (whoever reads the database controls the deployment
// anyway), sent in ReplicaSecretHeader; the peer's certificate is checked
// with Options.PeerHTTPClient's trust when the relay address is https (the
// appliance: its CA). Over plain HTTP the secret crosses the network in
// the clear: run replicas with TLS (docs/decisions.md).

// ReplicaSecretHeader carries the deployment's replica secret on peer
// connections.
const ReplicaSecretHeader = "Coder-Replica-Secret"

// replicaSecretKey is the deployment setting that holds the secret.
const replicaSecretKey = "replica_relay_secret"

// peerRequest opens a stream to an agent on the peer. It is answered with
// a codersdk.ProxyRelayReply (Status 0: the stream is open), as a
// workspace proxy's dial is: serveRequested serves both.
type peerRequest struct {
	AgentID string               `json:"agent_id"`
	Header  codersdk.RelayHeader `json:"header"`
}

// peers holds this replica's sessions to the others, by replica id. Each
// peer has its own lock, so that dialing a dead peer holds up no other.
type peers struct {
	mu       sync.Mutex
	sessions map[string]*peerSession
}

type peerSession struct {
	mu  sync.Mutex
	mux *yamux.Session
}

// loadReplicaSecret reads the deployment's replica secret, creating it on
// the first start.
func loadReplicaSecret(ctx context.Context, db *database.DB) (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	secret, err := db.DeploymentValue(ctx, replicaSecretKey, hex.EncodeToString(b))
	if err != nil {
		return "", fmt.Errorf("read the replica secret: %w", err)
	}
	return secret, nil
}

// servePeer serves another replica's session: every stream it opens is a
// peerRequest for an agent connected here.
func (api *API) servePeer(c *gin.Context) error {
	if subtle.ConstantTimeCompare([]byte(c.GetHeader(ReplicaSecretHeader)), []byte(api.replicaSecret)) != 1 {
		return errorf(http.StatusUnauthorized, "", "Only replicas of this deployment may open a replica relay session")
	}
	if !relayconn.IsUpgrade(c.Request) {
		return errorf(http.StatusUpgradeRequired, "", "A replica relay session is an upgrade to %s", relayconn.Protocol)
	}
	conn, err := relayconn.AcceptUpgrade(c.Writer)
	if err != nil {
		api.log.Info("replica relay session not accepted", "remote", c.Request.RemoteAddr, "err", err)
		return nil
	}
	mux, err := yamux.Server(relayconn.CoalescedYamuxConn(conn), api.relayYamuxConfig())
	if err != nil {
		_ = conn.Close()
		return nil
	}
	defer mux.Close()
	log := api.log.With("peer", c.Request.RemoteAddr)
	log.Info("replica relay session opened")
	stop := context.AfterFunc(c.Request.Context(), func() { _ = mux.Close() })
	defer stop()
	go func() {
		select {
		case <-api.closing:
			_ = mux.Close()
		case <-mux.CloseChan():
		}
	}()
	for {
		stream, err := mux.AcceptStream()
		if err != nil {
			log.Info("replica relay session closed", "err", err)
			return nil
		}
		go api.servePeerStream(stream)
	}
}

// servePeerStream opens the stream a peer asked for and carries it.
func (api *API) servePeerStream(stream net.Conn) {
	_ = stream.SetDeadline(time.Now().Add(15 * time.Second))
	var req peerRequest
	if err := relayconn.ReadFrame(stream, &req); err != nil {
		_ = stream.Close()
		return
	}
	_, _, _ = api.serveRequested(stream, func() (net.Conn, error) {
		s := api.relay.get(req.AgentID)
		if s == nil {
			return nil, errorf(http.StatusServiceUnavailable, "", "the agent is no longer connected to that replica; try again")
		}
		return api.openStream(s, req.Header)
	})
}

// serveRequested serves a stream that asked for a connection to an agent
// (a peer's, or a workspace proxy's dial): it opens the connection with
// open, answers on stream with a codersdk.ProxyRelayReply (Status 0, or the
// refusal's HTTP status and message) and carries the connection's bytes
// both ways until either side ends. The stream's deadline, set by the
// caller, bounds the answer. It returns the bytes carried each way, or
// why the connection did not open.
func (api *API) serveRequested(stream net.Conn, open func() (net.Conn, error)) (toAgent, fromAgent int64, err error) {
	agentConn, err := open()
	if err != nil {
		status, message := http.StatusBadGateway, err.Error()
		var ae *apiError
		if errors.As(err, &ae) {
			status, message = ae.status, ae.Message
		}
		_ = relayconn.WriteFrame(stream, codersdk.ProxyRelayReply{Status: status, Message: message})
		_ = stream.Close()
		return 0, 0, err
	}
	if err := relayconn.WriteFrame(stream, codersdk.ProxyRelayReply{}); err != nil {
		_ = stream.Close()
		_ = agentConn.Close()
		return 0, 0, fmt.Errorf("answer the connection request: %w", err)
	}
	_ = stream.SetDeadline(time.Time{})
	toAgent, fromAgent = splice(stream, agentConn)
	return toAgent, fromAgent, nil
}

// openPeerStream opens a stream to agentID through replica r, dialing r
// when this replica has no session to it.
func (api *API) openPeerStream(ctx context.Context, r database.Replica, agentID string, hdr codersdk.RelayHeader) (net.Conn, *yamux.Session, error) {
	mux, err := api.peerSession(ctx, r)
	if err != nil {
		return nil, nil, errorf(http.StatusServiceUnavailable, err.Error(), "The agent is connected to replica %s (%s), which this replica cannot reach", r.Hostname, r.RelayAddress)
	}
	stream, err := mux.Open()
	if err != nil {
		return nil, nil, errorf(http.StatusServiceUnavailable, err.Error(), "The session to replica %s is closing; try again in a moment", r.Hostname)
	}
	_ = stream.SetDeadline(time.Now().Add(20 * time.Second))
	if err := relayconn.WriteFrame(stream, peerRequest{AgentID: agentID, Header: hdr}); err != nil {
		_ = stream.Close()
		return nil, nil, errorf(http.StatusBadGateway, err.Error(), "Send the connection request to replica %s", r.Hostname)
	}
	var reply codersdk.ProxyRelayReply
	if err := relayconn.ReadFrame(stream, &reply); err != nil {
		_ = stream.Close()
		return nil, nil, errorf(http.StatusBadGateway, err.Error(), "Replica %s did not answer the connection request", r.Hostname)
	}
	if reply.Status != 0 {
		_ = stream.Close()
		return nil, nil, errorf(reply.Status, "", "%s", reply.Message)
	}
	_ = stream.SetDeadline(time.Time{})
	return stream, mux, nil
}

// peerSession returns this replica's session to r, dialing one when there
// is none or the last one closed.
func (api *API) peerSession(ctx context.Context, r database.Replica) (*yamux.Session, error) {
	api.peers.mu.Lock()
	if api.peers.sessions == nil {
		api.peers.sessions = map[string]*peerSession{}
	}
	p := api.peers.sessions[r.ID]
	if p == nil {
		p = &peerSession{}
		api.peers.sessions[r.ID] = p
	}
	api.peers.mu.Unlock()

	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mux != nil && !p.mux.IsClosed() {
		return p.mux, nil
	}
	u, err := url.Parse(r.RelayAddress)
	if err != nil {
		return nil, fmt.Errorf("replica %s relay address %q: %w", r.ID, r.RelayAddress, err)
	}
	u = u.JoinPath("/api/v2/replicas/relay")
	client := api.opts.PeerHTTPClient
	if client == nil {
		client = http.DefaultClient
	}
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := relayconn.DialUpgrade(dctx, client, u, http.Header{ReplicaSecretHeader: {api.replicaSecret}}, codersdk.ReadBodyAsError)
	if err != nil {
		return nil, err
	}
	mux, err := yamux.Client(relayconn.CoalescedYamuxConn(conn), api.relayYamuxConfig())
	if err != nil {
		_ = conn.Close()
		return nil, err
	}
	p.mux = mux
	api.log.Info("replica relay session dialed", "replica", r.ID, "hostname", r.Hostname, "relay_address", r.RelayAddress)
	return mux, nil
}

// closePeers ends every session to other replicas (shutdown).
func (api *API) closePeers() {
	api.peers.mu.Lock()
	defer api.peers.mu.Unlock()
	for id, p := range api.peers.sessions {
		p.mu.Lock()
		if p.mux != nil {
			_ = p.mux.Close()
		}
		p.mu.Unlock()
		delete(api.peers.sessions, id)
	}
}

// agentReplica is the live replica other than this one that agent a's
// relay connection is on, if any.
func (api *API) agentReplica(a database.WorkspaceAgent) (database.Replica, bool) {
	if api.opts.Replicas == nil || a.ConnectedReplicaID == "" || a.ConnectedReplicaID == api.opts.Replicas.Self().ID {
		return database.Replica{}, false
	}
	for _, r := range api.opts.Replicas.All() {
		if r.ID == a.ConnectedReplicaID {
			return r, true
		}
	}
	return database.Replica{}, false
}

// dialAgent opens a relay stream to agent a: through this replica's
// session when the agent is connected here, else through the replica it is
// connected to. It also returns the session the stream runs on. The
// agent's answer may still be on its way (pendingStream.await).
//
// An agent of a running workspace that is on no live replica (it is
// reconnecting, perhaps after its replica died) is waited for, up to
// agentReconnectWait: the replica it reconnects to announces it on
// database.ChannelAgentConnection, and this replica looks again then.
func (api *API) dialAgent(ctx context.Context, a database.WorkspaceAgent, hdr codersdk.RelayHeader) (*pendingStream, *yamux.Session, error) {
	var wake chan struct{}
	var deadline <-chan time.Time
	for {
		if s := api.relay.get(a.ID); s != nil {
			stream, err := api.startStream(s, hdr)
			return stream, s.mux, err
		}
		if r, ok := api.agentReplica(a); ok {
			stream, mux, err := api.openPeerStream(ctx, r, a.ID, hdr)
			if err != nil {
				return nil, nil, err
			}
			return &pendingStream{Conn: stream}, mux, nil
		}
		if !reconnecting(a) || api.ps == nil {
			return nil, nil, api.agentUnavailable(a)
		}
		if wake == nil {
			wake = make(chan struct{}, 1)
			cancel := api.ps.Subscribe(database.ChannelAgentConnection, func(id string) {
				if id == a.ID || id == "" { // "": the listener reconnected and may have missed one
					select {
					case wake <- struct{}{}:
					default:
					}
				}
			})
			defer cancel()
			t := api.opts.Clock.NewTimer(agentReconnectWait, "coderd", "agentReconnect")
			defer t.Stop()
			deadline = t.C
			// It may have connected between the look-up and the subscription.
			wake <- struct{}{}
		}
		select {
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		case <-deadline:
			return nil, nil, api.agentUnavailable(a)
		case <-wake:
		}
		fresh, err := api.db.AgentByID(ctx, a.ID)
		if err != nil {
			return nil, nil, err
		}
		a = fresh
	}
}

// agentReconnectWait is how long a connection waits for an agent of a
// running workspace that is reconnecting (on api.opts.Clock, a timer
// tagged "coderd", "agentReconnect").
const agentReconnectWait = 10 * time.Second

// reconnecting reports whether agent a belongs to a running workspace and
// has not shut down: it will connect again.
func reconnecting(a database.WorkspaceAgent) bool {
	return ofRunningBuild(a) && a.LifecycleState != codersdk.AgentLifecycleShuttingDown && a.LifecycleState != codersdk.AgentLifecycleOff
}

// agentReachable reports whether dialAgent can reach agent a (here or on a
// live peer).
func (api *API) agentReachable(a database.WorkspaceAgent) bool {
	if api.relay.get(a.ID) != nil {
		return true
	}
	_, ok := api.agentReplica(a)
	return ok
}
