package wsproxy

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"airgapcoder/codersdk"
	"airgapcoder/relayconn"
)

// Users connecting through the proxy:
//
//	GET /api/v2/workspaceagents/{agent}/connect?kind=ssh
//	GET /api/v2/workspaceagents/{agent}/connect?kind=tcp&port=8080[&host=H]
//	GET /api/v2/workspaceagents/{agent}/connect?prepare=1
//
// the same requests, upgrades and answers as coderd's (docs/relay.md,
// "The user's side"), with the session token in the Coder-Session-Token
// header or the coder_session_token cookie. The proxy asks the primary
// (AuthorizeConnect) whether the token may connect to the agent and keeps
// a yes for the answer's ValidFor (the primary's WorkspaceProxyAuthTTL),
// keyed by the token's SHA-256, the agent and the kind: a token revoked or
// a permission removed at the primary stops working here within that
// bound. A no is not kept, and is passed on with the primary's status and
// message. Then it opens the stream (dialAgent), upgrades and splices.
// When the connection ends it sends the primary the connection's record
// (ReportConnection) in the background, so that the primary's audit log
// has it with the proxy's name; a connection the agent refused is recorded
// too, with its error.

// authKey keys the cache of the primary's yes-answers.
type authKey struct {
	token [sha256.Size]byte
	agent string
	kind  string
}

// sessionToken is the request's session token: the header, else the
// dashboard's cookie (as coderd reads it).
func sessionToken(r *http.Request) string {
	if t := r.Header.Get(codersdk.SessionTokenHeader); t != "" {
		return t
	}
	if c, err := r.Cookie(codersdk.SessionTokenCookie); err == nil {
		return c.Value
	}
	return ""
}

// authorize asks the primary whether token may open a connection to
// target on agentID, or answers from the cache. A refusal is a
// *codersdk.Error with the primary's status and message.
func (s *Server) authorize(ctx context.Context, token, agentID string, target codersdk.RelayTarget, remote string) (codersdk.ProxyAuthorizeConnectResponse, error) {
	if token == "" {
		return codersdk.ProxyAuthorizeConnectResponse{}, apiError(http.StatusUnauthorized,
			"You are not signed in: send a session token in the "+codersdk.SessionTokenHeader+" header (run `coder login`)", "")
	}
	key := authKey{token: sha256.Sum256([]byte(token)), agent: agentID, kind: target.Kind}
	now := s.clock.Now()
	if resp, ok := s.authCache.get(key, now); ok {
		return resp, nil
	}
	actx, cancel := context.WithTimeout(ctx, attemptTimeout)
	defer cancel()
	resp, err := s.client.AuthorizeConnect(actx, codersdk.ProxyAuthorizeConnectRequest{
		SessionToken: token, AgentID: agentID, Kind: target.Kind, Host: target.Host, Port: target.Port, Remote: remote,
	})
	if err != nil {
		var apiErr *codersdk.Error
		if errors.As(err, &apiErr) && apiErr.StatusCode != 0 {
			return resp, apiErr
		}
		return resp, apiError(http.StatusBadGateway, "This workspace proxy could not ask the primary whether you may connect; try again, or connect through the primary", err.Error())
	}
	s.authCache.put(key, resp, now, resp.ValidFor())
	return resp, nil
}

// targetFromQuery reads ?kind=ssh|tcp&port=N&host=H and checks it.
func targetFromQuery(r *http.Request) (codersdk.RelayTarget, error) {
	q := r.URL.Query()
	t := codersdk.RelayTarget{Kind: q.Get("kind"), Host: q.Get("host")}
	if t.Kind == "" {
		t.Kind = codersdk.RelayKindSSH
	}
	if t.Kind == codersdk.RelayKindTCP {
		port, err := strconv.ParseUint(q.Get("port"), 10, 16)
		if err != nil {
			return t, validation("port", "must be a TCP port (1-65535)")
		}
		t.Port = uint16(port)
	}
	return t, checkTarget(t)
}

// checkTarget checks a user's connection target as coderd does.
func checkTarget(t codersdk.RelayTarget) error {
	switch t.Kind {
	case codersdk.RelayKindSSH:
		return nil
	case codersdk.RelayKindTCP:
		if t.Port == 0 {
			return validation("port", "must be a TCP port (1-65535)")
		}
		if len(t.Host) > 253 || strings.ContainsAny(t.Host, "/ \t\r\n") {
			return validation("host", "must be a host name or IP address")
		}
		return nil
	default:
		return validation("kind", "must be ssh or tcp")
	}
}

func validation(field, detail string) *codersdk.Error {
	e := apiError(http.StatusBadRequest, "Validation failed", "")
	e.Validations = []codersdk.ValidationError{{Field: field, Detail: detail}}
	return e
}

// headerOf is the stream header of the connection rec records, by user.
func headerOf(rec codersdk.ProxyConnectionReport, user string) codersdk.RelayHeader {
	hdr := codersdk.RelayHeader{Kind: rec.Kind, ConnID: rec.ConnID, User: user}
	if rec.Kind == codersdk.RelayKindTCP {
		hdr.Host, hdr.Port = rec.Host, rec.Port
	}
	return hdr
}

// newConnID names a relayed connection in logs (the proxy's, the agent's,
// the primary's audit record).
func newConnID() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// userConnect serves a user's connection to an agent.
func (s *Server) userConnect(w http.ResponseWriter, r *http.Request) {
	if !s.track() {
		writeJSON(w, http.StatusServiceUnavailable, codersdk.Response{Message: "This workspace proxy is shutting down; connect again (through the primary, or once it is back)"})
		return
	}
	defer s.handlers.Done()
	if r.URL.Query().Get("prepare") != "" {
		s.preparedConnect(w, r)
		return
	}
	agentID, token, remote := r.PathValue("agent"), sessionToken(r), r.RemoteAddr
	target, err := targetFromQuery(r)
	if err != nil {
		writeError(w, err)
		return
	}
	auth, err := s.authorize(r.Context(), token, agentID, target, remote)
	if err != nil {
		s.log.Info("relay connection refused", "agent", agentID, "kind", target.Kind, "remote", remote, "err", err)
		writeError(w, err)
		return
	}
	rec := s.newRecord(auth, agentID, target, remote)
	conn, err := s.dialAgent(r.Context(), rec.AgentID, headerOf(rec, auth.Username))
	if err != nil {
		s.refused(rec, err)
		writeError(w, err)
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	nc := s.acceptOrLog(ctx, w, r, conn, "relay connection", "agent", rec.AgentID, "remote", remote)
	if nc == nil {
		return
	}
	s.relayUserConn(ctx, nc, conn, rec)
}

// preparedConnect serves ?prepare=1 (codersdk.PreparedConn): the token
// and the agent are checked (as for an ssh connection), the connection is
// upgraded and waits, at most codersdk.PreparedConnIdle, for its
// RelayTarget; the target is authorized (the cached answer, or the
// primary's again once it expired), dialed, and answered with a
// RelayTargetReply before the bytes flow.
func (s *Server) preparedConnect(w http.ResponseWriter, r *http.Request) {
	agentID, token, remote := r.PathValue("agent"), sessionToken(r), r.RemoteAddr
	if _, err := s.authorize(r.Context(), token, agentID, codersdk.RelayTarget{Kind: codersdk.RelayKindSSH}, remote); err != nil {
		s.log.Info("prepared relay connection refused", "agent", agentID, "remote", remote, "err", err)
		writeError(w, err)
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	nc := s.acceptOrLog(ctx, w, r, nil, "prepared relay connection", "agent", agentID, "remote", remote)
	if nc == nil {
		return
	}
	s.closeOnStop(ctx, nc)
	_ = nc.SetReadDeadline(time.Now().Add(codersdk.PreparedConnIdle))
	var target codersdk.RelayTarget
	if err := relayconn.ReadFrame(nc, &target); err != nil {
		_ = nc.Close() // never used: nothing to record
		return
	}
	_ = nc.SetReadDeadline(time.Time{})
	refuse := func(err error) {
		status, resp := statusOf(err)
		_ = relayconn.WriteFrame(nc, codersdk.RelayTargetReply{StatusCode: status, Response: resp})
		_ = nc.Close()
	}
	if err := checkTarget(target); err != nil {
		refuse(err)
		return
	}
	auth, err := s.authorize(ctx, token, agentID, target, remote)
	if err != nil {
		s.log.Info("prepared relay connection refused", "agent", agentID, "kind", target.Kind, "remote", remote, "err", err)
		refuse(err)
		return
	}
	rec := s.newRecord(auth, agentID, target, remote)
	conn, err := s.dialAgent(ctx, rec.AgentID, headerOf(rec, auth.Username))
	if err != nil {
		s.refused(rec, err)
		refuse(err)
		return
	}
	if err := relayconn.WriteFrame(nc, codersdk.RelayTargetReply{}); err != nil {
		_ = conn.Close()
		_ = nc.Close()
		return
	}
	s.relayUserConn(ctx, nc, conn, rec)
}

// newRecord starts the record of a user's connection the primary
// authorized, to agentID (unless the answer names the agent).
func (s *Server) newRecord(auth codersdk.ProxyAuthorizeConnectResponse, agentID string, t codersdk.RelayTarget, remote string) codersdk.ProxyConnectionReport {
	if auth.AgentID != "" {
		agentID = auth.AgentID
	}
	rec := codersdk.ProxyConnectionReport{
		UserID: auth.UserID, AgentID: agentID, ConnID: newConnID(), Kind: t.Kind,
		Remote: remote, StartedAt: s.clock.Now(),
	}
	if t.Kind == codersdk.RelayKindTCP {
		rec.Host, rec.Port = t.Host, t.Port
	}
	return rec
}

// refused logs a connection that did not open, and reports it to the
// primary when the agent refused its target (a 502: nothing listens on the
// port): the primary records it as a refused connection. Other failures
// (the agent or the primary not reachable now) are the user's to retry
// and are only logged.
func (s *Server) refused(rec codersdk.ProxyConnectionReport, err error) {
	status, resp := statusOf(err)
	s.log.Info("relay connection refused", "conn", rec.ConnID, "agent", rec.AgentID, "kind", rec.Kind, "port", rec.Port, "remote", rec.Remote, "status", status, "err", err)
	if status != http.StatusBadGateway {
		return
	}
	rec.EndedAt, rec.Error = s.clock.Now(), resp.Message
	s.report(rec)
}

// relayUserConn splices user connection nc and agent connection conn
// until either ends, counting the agent active meanwhile, then reports the
// connection.
func (s *Server) relayUserConn(ctx context.Context, nc, conn net.Conn, rec codersdk.ProxyConnectionReport) {
	s.closeOnStop(ctx, nc)
	s.setActive(rec.AgentID, 1)
	defer s.setActive(rec.AgentID, -1)
	log := s.log.With("conn", rec.ConnID, "agent", rec.AgentID, "kind", rec.Kind, "remote", rec.Remote)
	if rec.Port != 0 {
		log = log.With("port", rec.Port, "host", rec.Host)
	}
	log.Info("relay connection opened")
	// nc is the user's side, as on coderd: its reads and the writes to
	// the agent's side are pipelined.
	rec.BytesUp, rec.BytesDown = relayconn.Splice(nc, conn, relayconn.SpliceOptions{Pipelined: true})
	rec.EndedAt = s.clock.Now()
	log.Info("relay connection closed", "bytes_to_agent", rec.BytesUp, "bytes_from_agent", rec.BytesDown,
		"duration", rec.EndedAt.Sub(rec.StartedAt).Round(time.Millisecond))
	s.report(rec)
}

// reportAttempts is how often a connection's record is tried.
const reportAttempts = 3

// report sends rec to the primary in the background, trying a few times;
// a record that cannot be delivered is logged (with everything it holds).
func (s *Server) report(rec codersdk.ProxyConnectionReport) {
	s.reports.Add(1)
	go func() {
		defer s.reports.Done()
		var err error
		for attempt := range reportAttempts {
			if attempt > 0 && !s.sleep(s.reportCtx, time.Duration(attempt)*500*time.Millisecond, "reportBackoff") {
				break
			}
			ctx, cancel := context.WithTimeout(s.reportCtx, attemptTimeout)
			err = s.client.ReportConnection(ctx, rec)
			cancel()
			if err == nil {
				return
			}
		}
		s.log.Warn("report a relayed connection to the primary failed; its audit record is missing", "conn", rec.ConnID,
			"user_id", rec.UserID, "agent", rec.AgentID, "kind", rec.Kind, "port", rec.Port, "remote", rec.Remote,
			"bytes_to_agent", rec.BytesUp, "bytes_from_agent", rec.BytesDown, "started_at", rec.StartedAt, "ended_at", rec.EndedAt,
			"refusal", rec.Error, "err", err)
	}()
}

// setActive counts a user connection to agentID opening (+1) or ending
// (-1).
func (s *Server) setActive(agentID string, delta int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.active == nil {
		s.active = map[string]int{}
	}
	s.active[agentID] += delta
	if s.active[agentID] <= 0 {
		delete(s.active, agentID)
	}
}

// activeAgentIDs are the agents with a user connection open through the
// proxy now (sent with every heartbeat).
func (s *Server) activeAgentIDs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := make([]string, 0, len(s.active))
	for id := range s.active {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}
