package codersdk

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/coder/websocket"
)

// The agent protocol. A workspace agent authenticates with its token in the
// Coder-Session-Token header on the /api/v2/workspaceagents/me/... endpoints
// (a user token is refused there, and an agent token everywhere else):
//
//	GET  /api/v2/workspaceagents/me/manifest   what to run: directory, env, startup script, apps
//	POST /api/v2/workspaceagents/me/startup    version, OS/arch, expanded directory
//	POST /api/v2/workspaceagents/me/lifecycle  a lifecycle state change
//	POST /api/v2/workspaceagents/me/logs       script output
//	POST /api/v2/workspaceagents/me/metadata   metadata script results
//	POST /api/v2/workspaceagents/me/ports      the TCP ports listening in the workspace
//	POST /api/v2/workspaceagents/me/app-health changes of its apps' health (PostWorkspaceAppHealthsRequest)
//	GET  /api/v2/workspaceagents/me/connect    WebSocket carrying a yamux session
//
// Over the connect WebSocket coderd is the yamux client: it opens one stream
// per user connection and starts it with a RelayHeader; the agent answers
// with a RelayReply and then the stream carries the connection's bytes. See
// docs/relay.md.
//
// Users reach a workspace with
//
//	GET /api/v2/workspaceagents/{agent}/connect?kind=ssh|tcp&port=N[&host=H]
//
// a WebSocket whose binary messages are the bytes of one relayed connection,
// and a web terminal with GET /api/v2/workspaceagents/{agent}/pty
// (reconnectingpty.go).

// Agent lifecycle states, as in Coder.
const (
	AgentLifecycleCreated      = "created"
	AgentLifecycleStarting     = "starting"
	AgentLifecycleReady        = "ready"
	AgentLifecycleStartTimeout = "start_timeout"
	AgentLifecycleStartError   = "start_error"
	AgentLifecycleShuttingDown = "shutting_down"
	AgentLifecycleOff          = "off"
)

// ValidAgentLifecycle reports whether s is a lifecycle state an agent may
// report.
func ValidAgentLifecycle(s string) bool {
	switch s {
	case AgentLifecycleCreated, AgentLifecycleStarting, AgentLifecycleReady, AgentLifecycleStartTimeout,
		AgentLifecycleStartError, AgentLifecycleShuttingDown, AgentLifecycleOff:
		return true
	}
	return false
}

// Agent connection statuses (WorkspaceAgent.Status).
const (
	AgentStatusConnecting   = "connecting"
	AgentStatusConnected    = "connected"
	AgentStatusDisconnected = "disconnected"
	AgentStatusTimeout      = "timeout"
)

// LogSourceAgent marks job log lines that came from a workspace agent (its
// startup script), appended to the build's job logs under
// StageStartupScript.
const (
	LogSourceAgent     = "agent"
	StageStartupScript = "Startup script"
)

// AgentManifest is what an agent needs to run its workspace.
type AgentManifest struct {
	AgentID       string `json:"agent_id"`
	AgentName     string `json:"agent_name"`
	WorkspaceID   string `json:"workspace_id"`
	WorkspaceName string `json:"workspace_name"`
	OwnerName     string `json:"owner_name"`
	// Directory is where shells and scripts start; it may begin with ~ and
	// may be empty (the home folder).
	Directory string `json:"directory"`
	// EnvironmentVariables are set for every script and session: the
	// agent's env merged with the coder_env resources.
	EnvironmentVariables map[string]string `json:"environment_variables"`
	// Scripts are what the agent runs (coder_script, and the agent's
	// startup and shutdown scripts converted to scripts).
	Scripts []AgentScript `json:"scripts"`
	// Metadata are the agent's metadata blocks: scripts the agent runs at
	// their interval and reports with PostAgentMetadata.
	Metadata []AgentMetadataDescription `json:"metadata"`
	Apps     []WorkspaceApp             `json:"apps"`
	MOTDFile string                     `json:"motd_file,omitempty"`
	// ConnectionTimeoutSeconds is how long the agent had to connect before
	// it counts as timed out (informational for the agent).
	ConnectionTimeoutSeconds int32 `json:"connection_timeout_seconds"`
}

// AgentScript is a script an agent runs: a coder_script resource, or the
// agent's startup or shutdown script.
type AgentScript struct {
	// LogSourceID names the script's output in the agent's logs.
	LogSourceID string `json:"log_source_id"`
	DisplayName string `json:"display_name"`
	Icon        string `json:"icon,omitempty"`
	Script      string `json:"script"`
	// Cron is a six-field schedule (seconds first), as the provider
	// validates it; empty for none.
	Cron             string `json:"cron,omitempty"`
	RunOnStart       bool   `json:"run_on_start"`
	RunOnStop        bool   `json:"run_on_stop"`
	StartBlocksLogin bool   `json:"start_blocks_login"`
	// TimeoutSeconds stops the script after that long; 0 means no limit.
	TimeoutSeconds int32 `json:"timeout_seconds"`
	// LogPath is a file the agent also writes the script's output to;
	// relative paths are under the agent's log folder.
	LogPath string `json:"log_path,omitempty"`
}

// Log sources of the scripts Coder converts from agent attributes.
const (
	ScriptStartupDisplayName  = "Startup Script"
	ScriptShutdownDisplayName = "Shutdown Script"
)

// AgentMetadataDescription is a metadata block of a coder_agent.
type AgentMetadataDescription struct {
	Key             string `json:"key"`
	DisplayName     string `json:"display_name"`
	Script          string `json:"script"`
	IntervalSeconds int64  `json:"interval"`
	TimeoutSeconds  int64  `json:"timeout"`
	Order           int32  `json:"order,omitempty"`
}

// AgentMetadataResult is one run of a metadata script.
type AgentMetadataResult struct {
	CollectedAt time.Time `json:"collected_at"`
	// Age is how many seconds ago the value was collected, when read.
	Age   int64  `json:"age"`
	Value string `json:"value"`
	Error string `json:"error"`
}

// AgentMetadata is a metadata block with its latest result.
type AgentMetadata struct {
	Description AgentMetadataDescription `json:"description"`
	Result      AgentMetadataResult      `json:"result"`
}

// AgentMetadataUpdate reports one key's new result.
type AgentMetadataUpdate struct {
	Key    string              `json:"key"`
	Result AgentMetadataResult `json:"result"`
}

// PostAgentMetadataRequest reports metadata results.
type PostAgentMetadataRequest struct {
	Metadata []AgentMetadataUpdate `json:"metadata"`
}

// PostAgentStartupRequest reports the agent's build and platform.
type PostAgentStartupRequest struct {
	Version           string `json:"version"`
	OperatingSystem   string `json:"operating_system"`
	Architecture      string `json:"architecture"`
	ExpandedDirectory string `json:"expanded_directory"`
}

// PostAgentLifecycleRequest reports a lifecycle state change.
type PostAgentLifecycleRequest struct {
	State     string    `json:"state"`
	ChangedAt time.Time `json:"changed_at"`
}

// AgentLogInput is one line of a script's output.
type AgentLogInput struct {
	CreatedAt time.Time `json:"created_at"`
	Level     string    `json:"level"`
	Output    string    `json:"output"`
	// Source is the script's LogSourceID; empty means the agent itself.
	Source string `json:"source,omitempty"`
}

// PostAgentLogsRequest appends output lines.
type PostAgentLogsRequest struct {
	Logs []AgentLogInput `json:"logs"`
}

// AgentLog is a stored line of an agent's script output.
type AgentLog struct {
	ID        int64     `json:"id"`
	CreatedAt time.Time `json:"created_at"`
	Level     string    `json:"level"`
	Output    string    `json:"output"`
	// Source is the display name of the script that wrote the line.
	Source string `json:"source,omitempty"`
}

// AgentListeningPort is a TCP port some process in the workspace listens on.
type AgentListeningPort struct {
	Network string `json:"network"` // "tcp"
	Port    uint16 `json:"port"`
}

// PostAgentPortsRequest replaces the agent's list of listening ports.
type PostAgentPortsRequest struct {
	Ports []AgentListeningPort `json:"ports"`
}

// PostWorkspaceAppHealthsRequest reports the health of some of the calling
// agent's apps, as in Coder: Healths maps an app's ID to its new health
// (initializing, healthy or unhealthy). coderd refuses the whole request
// (404) when an ID is not an app of the calling agent, and (400) when the
// app has no healthcheck or the value is not one of those three.
type PostWorkspaceAppHealthsRequest struct {
	Healths map[string]string `json:"healths"`
}

// Relay stream kinds.
const (
	// RelayKindSSH hands the stream to the agent's SSH server.
	RelayKindSSH = "ssh"
	// RelayKindTCP connects the stream to host:port inside the workspace.
	RelayKindTCP = "tcp"
	// RelayKindPTY attaches the stream to the agent's reconnecting PTY
	// with the header's Reconnect id (reconnectingpty.go).
	RelayKindPTY = "pty"
)

// RelayHeader opens every stream coderd relays to an agent.
type RelayHeader struct {
	Kind string `json:"kind"`
	// Host and Port are the TCP target for RelayKindTCP; an empty Host means
	// the workspace's loopback.
	Host string `json:"host,omitempty"`
	Port uint16 `json:"port,omitempty"`
	// ConnID identifies the connection in coderd's and the agent's logs.
	ConnID string `json:"conn_id"`
	// User is who opened the connection (for the agent's logs).
	User string `json:"user,omitempty"`
	// PTY is the terminal a RelayKindPTY stream attaches to; nil for the
	// other kinds.
	PTY *RelayPTY `json:"pty,omitempty"`
}

// RelayReply is the agent's answer to a RelayHeader: Error is empty when the
// stream is connected.
type RelayReply struct {
	Error string `json:"error,omitempty"`
}

// AgentManifest fetches the calling agent's manifest.
func (c *Client) AgentManifest(ctx context.Context) (AgentManifest, error) {
	return doJSON[AgentManifest](ctx, c, http.MethodGet, "/api/v2/workspaceagents/me/manifest", nil)
}

// PostAgentStartup reports the calling agent's version and platform.
func (c *Client) PostAgentStartup(ctx context.Context, req PostAgentStartupRequest) error {
	return c.do(ctx, http.MethodPost, "/api/v2/workspaceagents/me/startup", req, nil)
}

// PostAgentLifecycle reports the calling agent's lifecycle state.
func (c *Client) PostAgentLifecycle(ctx context.Context, req PostAgentLifecycleRequest) error {
	return c.do(ctx, http.MethodPost, "/api/v2/workspaceagents/me/lifecycle", req, nil)
}

// PostAgentLogs appends startup script output.
func (c *Client) PostAgentLogs(ctx context.Context, req PostAgentLogsRequest) error {
	return c.do(ctx, http.MethodPost, "/api/v2/workspaceagents/me/logs", req, nil)
}

// PostAgentMetadata reports metadata results.
func (c *Client) PostAgentMetadata(ctx context.Context, req PostAgentMetadataRequest) error {
	return c.do(ctx, http.MethodPost, "/api/v2/workspaceagents/me/metadata", req, nil)
}

// PostAgentPorts reports the ports listening in the workspace.
func (c *Client) PostAgentPorts(ctx context.Context, req PostAgentPortsRequest) error {
	return c.do(ctx, http.MethodPost, "/api/v2/workspaceagents/me/ports", req, nil)
}

// PostWorkspaceAppHealth reports changes of the calling agent's app health.
func (c *Client) PostWorkspaceAppHealth(ctx context.Context, req PostWorkspaceAppHealthsRequest) error {
	return c.do(ctx, http.MethodPost, "/api/v2/workspaceagents/me/app-health", req, nil)
}

// ConnectAgent opens the calling agent's relay connection to coderd (see
// relayconn.Protocol). ctx bounds only the handshake.
func (c *Client) ConnectAgent(ctx context.Context) (net.Conn, error) {
	return c.dialRelay(ctx, "/api/v2/workspaceagents/me/connect")
}

// AgentSpareConns is how many spare connections an agent keeps dialed
// ahead of user connections (ConnectAgentSpare).
const AgentSpareConns = 2

// ConnectAgentSpare opens one of the agent's spare connections: a raw
// relay connection on which coderd later writes the RelayHeader of one
// user connection (docs/relay.md). The agent's session (ConnectAgent) must
// be up on the replica it reaches, or coderd answers 409. Spares never
// fall back to a WebSocket: without the raw upgrade, every connection is a
// stream of the session.
func (c *Client) ConnectAgentSpare(ctx context.Context) (net.Conn, error) {
	return c.dialUpgrade(ctx, "/api/v2/workspaceagents/me/connect?spare=1")
}

// WorkspaceAgent returns an agent by id.
func (c *Client) WorkspaceAgent(ctx context.Context, id string) (WorkspaceAgent, error) {
	return doJSON[WorkspaceAgent](ctx, c, http.MethodGet, "/api/v2/workspaceagents/"+id, nil)
}

// WorkspaceAgentLogs returns an agent's startup script output after the
// line with id after.
func (c *Client) WorkspaceAgentLogs(ctx context.Context, id string, after int64) ([]AgentLog, error) {
	return doJSON[[]AgentLog](ctx, c, http.MethodGet, fmt.Sprintf("/api/v2/workspaceagents/%s/logs?after=%d", id, after), nil)
}

// DialOptions say what DialWorkspaceAgent connects to.
type DialOptions struct {
	// Kind is RelayKindSSH (the agent's SSH server) or RelayKindTCP.
	Kind string
	// Host and Port are the target inside the workspace for RelayKindTCP;
	// an empty Host is the workspace's loopback.
	Host string
	Port uint16
}

// DialWorkspaceAgent opens a connection to an agent through coderd's relay
// and returns it as a net.Conn. ctx bounds only the dial. Only the
// workspace's owner and users with the owner role may dial.
func (c *Client) DialWorkspaceAgent(ctx context.Context, agentID string, opts DialOptions) (net.Conn, error) {
	if opts.Kind == "" {
		opts.Kind = RelayKindSSH
	}
	q := url.Values{"kind": {opts.Kind}}
	if opts.Kind == RelayKindTCP {
		q.Set("port", strconv.Itoa(int(opts.Port)))
		if opts.Host != "" {
			q.Set("host", opts.Host)
		}
	}
	return c.dialRelay(ctx, "/api/v2/workspaceagents/"+url.PathEscape(agentID)+"/connect?"+q.Encode())
}

// openWebSocket opens a WebSocket to path, authenticated with the client's
// token. A refused handshake becomes an *Error with coderd's message.
func (c *Client) openWebSocket(ctx context.Context, path string) (*websocket.Conn, error) {
	u, err := c.URL.Parse(path)
	if err != nil {
		return nil, fmt.Errorf("parse path %q: %w", path, err)
	}
	switch u.Scheme {
	case "https":
		u.Scheme = "wss"
	default:
		u.Scheme = "ws"
	}
	h := http.Header{}
	if c.SessionToken != "" {
		h.Set(SessionTokenHeader, c.SessionToken)
	}
	conn, resp, err := websocket.Dial(ctx, u.String(), &websocket.DialOptions{
		HTTPClient: c.httpClient(), HTTPHeader: h, CompressionMode: websocket.CompressionDisabled,
	})
	if err != nil {
		if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols {
			if resp.Request == nil {
				resp.Request, _ = http.NewRequest(http.MethodGet, u.Redacted(), nil)
			}
			return nil, ReadBodyAsError(resp)
		}
		return nil, fmt.Errorf("dial %s: %w", u.Redacted(), err)
	}
	return conn, nil
}

// IsAgentUnavailable reports whether err says the agent is not connected to
// this coderd (yet), so that a caller may wait and retry.
func IsAgentUnavailable(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.StatusCode == http.StatusServiceUnavailable
}
