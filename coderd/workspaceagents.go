package coderd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"
	"golang.org/x/sync/errgroup"

	"airgapcoder/coderd/database"
	"airgapcoder/codersdk"
)

// Workspace agents: the endpoints an agent calls with its own token
// (/api/v2/workspaceagents/me/...), and the ones users call about agents.
// The relay (connections into a workspace) is in relay.go.

// maxAgentLogBytes caps the startup script output stored per agent.
const maxAgentLogBytes = 1 << 20

// maxAgentLogsPerRequest caps the lines of one logs request.
const maxAgentLogsPerRequest = 1000

// maxAgentPorts caps the ports one agent may report.
const maxAgentPorts = 1024

const ctxAgent = "coderd.agent"

// requireAgent is middleware that authenticates a workspace agent by its
// token. User session tokens are not agent tokens and get 401 here, as
// agent tokens do on every user endpoint.
func (api *API) requireAgent() gin.HandlerFunc {
	return api.handleMiddleware(func(c *gin.Context) error {
		token := c.Request.Header.Get(codersdk.SessionTokenHeader)
		if token == "" {
			return errorf(http.StatusUnauthorized, "", "Workspace agents authenticate with their token (CODER_AGENT_TOKEN) in the %s header", codersdk.SessionTokenHeader)
		}
		if api.spareBySession(c, token) { // relayspares.go: a spare is its session's
			return nil
		}
		a, err := api.db.AgentByAuthToken(c.Request.Context(), token)
		if errors.Is(err, database.ErrNotFound) {
			return errorf(http.StatusUnauthorized, "", "Invalid agent token: no workspace agent has it (user session tokens are not accepted on agent endpoints)")
		}
		if err != nil {
			return err
		}
		if a.WorkspaceDeleted {
			return errorf(http.StatusUnauthorized, "", "The workspace of this agent (%s/%s) was deleted", a.OwnerName, a.WorkspaceName)
		}
		c.Set(ctxAgent, a)
		return nil
	})
}

func agentFrom(c *gin.Context) database.WorkspaceAgent {
	return c.MustGet(ctxAgent).(database.WorkspaceAgent)
}

// mayConnect reports whether u may open connections into a workspace owned
// by ownerID: its owner and users with the owner role. Template admins may
// see every workspace but not enter them.
func mayConnect(u database.User, ownerID string) bool {
	return u.ID == ownerID || slices.Contains(u.Roles, codersdk.RoleOwner)
}

func (api *API) agentManifest(c *gin.Context) error {
	a := agentFrom(c)
	apps, err := api.db.AgentAppsByAgentID(c.Request.Context(), a.ID)
	if err != nil {
		return err
	}
	env := a.Env
	if env == nil {
		env = map[string]string{}
	}
	scripts, err := agentScripts(a.Agent)
	if err != nil {
		return err
	}
	metadata, err := agentMetadataDescriptions(a.Agent)
	if err != nil {
		return err
	}
	c.JSON(http.StatusOK, codersdk.AgentManifest{
		AgentID: a.ID, AgentName: a.Name, WorkspaceID: a.WorkspaceID, WorkspaceName: a.WorkspaceName, OwnerName: a.OwnerName,
		Directory: a.Directory, EnvironmentVariables: env, Scripts: scripts, Metadata: metadata, Apps: convertApps(apps),
		MOTDFile: a.MOTDFile, ConnectionTimeoutSeconds: a.ConnectionTimeoutSeconds,
	})
	return nil
}

// agentScripts decodes an agent's scripts.
func agentScripts(a database.Agent) ([]codersdk.AgentScript, error) {
	scripts := []codersdk.AgentScript{}
	if err := unmarshalList(a.Scripts, &scripts); err != nil {
		return nil, fmt.Errorf("decode scripts of agent %s: %w", a.ID, err)
	}
	return scripts, nil
}

func (api *API) postAgentStartup(c *gin.Context) error {
	a := agentFrom(c)
	var req codersdk.PostAgentStartupRequest
	if err := decode(c, &req); err != nil {
		return err
	}
	if len(req.Version) > 128 || len(req.OperatingSystem) > 32 || len(req.Architecture) > 32 || len(req.ExpandedDirectory) > 4096 {
		return badRequest("Startup report has an over-long field")
	}
	if err := api.db.UpdateAgentStartup(c.Request.Context(), a.ID, req.Version, req.OperatingSystem, req.Architecture, req.ExpandedDirectory); err != nil {
		return err
	}
	api.log.Info("workspace agent started", "agent", a.ID, "workspace", a.OwnerName+"/"+a.WorkspaceName,
		"version", req.Version, "os", req.OperatingSystem, "arch", req.Architecture)
	c.JSON(http.StatusOK, codersdk.Response{Message: "Startup recorded"})
	return nil
}

func (api *API) postAgentLifecycle(c *gin.Context) error {
	a := agentFrom(c)
	var req codersdk.PostAgentLifecycleRequest
	if err := decode(c, &req); err != nil {
		return err
	}
	if !codersdk.ValidAgentLifecycle(req.State) {
		return validation("state", "must be one of created, starting, ready, start_timeout, start_error, shutting_down, off")
	}
	if req.ChangedAt.IsZero() {
		req.ChangedAt = api.now()
	}
	if err := api.db.UpdateAgentLifecycle(c.Request.Context(), a.ID, req.State, req.ChangedAt); err != nil {
		return err
	}
	api.log.Info("workspace agent lifecycle", "agent", a.ID, "workspace", a.OwnerName+"/"+a.WorkspaceName, "state", req.State)
	c.JSON(http.StatusOK, codersdk.Response{Message: "Lifecycle recorded"})
	return nil
}

func (api *API) postAgentLogs(c *gin.Context) error {
	a := agentFrom(c)
	var req codersdk.PostAgentLogsRequest
	if err := decode(c, &req); err != nil {
		return err
	}
	if len(req.Logs) > maxAgentLogsPerRequest {
		return validation("logs", fmt.Sprintf("at most %d lines per request", maxAgentLogsPerRequest))
	}
	scripts, err := agentScripts(a.Agent)
	if err != nil {
		return err
	}
	bySource := map[string]codersdk.AgentScript{}
	for _, s := range scripts {
		bySource[s.LogSourceID] = s
	}
	logs := make([]database.AgentLog, 0, len(req.Logs))
	var jobLogs []database.JobLog
	for _, l := range req.Logs {
		switch l.Level {
		case "":
			l.Level = codersdk.LogLevelInfo
		case codersdk.LogLevelTrace, codersdk.LogLevelDebug, codersdk.LogLevelInfo, codersdk.LogLevelWarn, codersdk.LogLevelError:
		default:
			return validation("logs.level", fmt.Sprintf("unknown level %q", l.Level))
		}
		line := database.AgentLog{CreatedAt: l.CreatedAt, Level: l.Level, Output: sanitizeText(l.Output)}
		stage, toJob := codersdk.StageStartupScript, true
		if l.Source != "" {
			s, ok := bySource[l.Source]
			if !ok {
				return validation("logs.source", fmt.Sprintf("no script of this agent has log source %q", l.Source))
			}
			line.Source = s.DisplayName
			stage, toJob = scriptStage(s), s.RunOnStart
		}
		logs = append(logs, line)
		if toJob {
			jobLogs = append(jobLogs, database.JobLog{CreatedAt: line.CreatedAt, Source: codersdk.LogSourceAgent, Level: line.Level, Stage: stage, Output: line.Output})
		}
	}
	err = api.db.InsertAgentLogs(c.Request.Context(), a.ID, a.JobID, logs, jobLogs, maxAgentLogBytes)
	if errors.Is(err, database.ErrAgentLogsFull) {
		return errorf(http.StatusRequestEntityTooLarge, "", "This agent has stored its limit of %d bytes of script output", maxAgentLogBytes)
	}
	if err != nil {
		return err
	}
	c.JSON(http.StatusOK, codersdk.Response{Message: "Logs stored"})
	return nil
}

func (api *API) postAgentPorts(c *gin.Context) error {
	a := agentFrom(c)
	var req codersdk.PostAgentPortsRequest
	if err := decode(c, &req); err != nil {
		return err
	}
	if len(req.Ports) > maxAgentPorts {
		return validation("ports", fmt.Sprintf("at most %d ports", maxAgentPorts))
	}
	ports := make([]database.ListeningPort, 0, len(req.Ports))
	for _, p := range req.Ports {
		if p.Network != "tcp" || p.Port == 0 {
			return validation("ports", fmt.Sprintf("want tcp ports above 0, got %s/%d", p.Network, p.Port))
		}
		ports = append(ports, database.ListeningPort{Network: p.Network, Port: p.Port})
	}
	if err := api.db.UpdateAgentPorts(c.Request.Context(), a.ID, ports); err != nil {
		return err
	}
	c.JSON(http.StatusOK, codersdk.Response{Message: "Ports recorded"})
	return nil
}

// agentParam loads the :agent parameter. An agent of a workspace the caller
// may not read is reported as missing.
func (api *API) agentParam(c *gin.Context) (database.WorkspaceAgent, error) {
	a, err := api.db.AgentByID(c.Request.Context(), c.Param("agent"))
	if errors.Is(err, database.ErrNotFound) || (err == nil && !can(actor(c), resWorkspace, actRead, a.OwnerID)) {
		return a, notFound("Workspace agent")
	}
	return a, err
}

func (api *API) workspaceAgent(c *gin.Context) error {
	a, err := api.agentParam(c)
	if err != nil {
		return err
	}
	ctx := c.Request.Context()
	apps, err := api.db.AgentAppsByAgentID(ctx, a.ID)
	if err != nil {
		return err
	}
	a.Apps = apps
	results, err := api.db.AgentMetadataResults(ctx, []string{a.ID})
	if err != nil {
		return err
	}
	out, err := api.convertAgent(a.Agent, a.ResourceID, agentLive{runtime: a.AgentRuntime, metadata: results[a.ID]})
	if err != nil {
		return err
	}
	api.setSubdomainNames([]codersdk.WorkspaceAgent{out}, a.OwnerName, a.WorkspaceName)
	c.JSON(http.StatusOK, out)
	return nil
}

func (api *API) workspaceAgentLogs(c *gin.Context) error {
	a, err := api.agentParam(c)
	if err != nil {
		return err
	}
	after, _ := strconv.ParseInt(c.Query("after"), 10, 64)
	logs, err := api.db.AgentLogsAfter(c.Request.Context(), a.ID, after)
	if err != nil {
		return err
	}
	out := make([]codersdk.AgentLog, 0, len(logs))
	for _, l := range logs {
		out = append(out, codersdk.AgentLog{ID: l.ID, CreatedAt: l.CreatedAt, Level: l.Level, Output: l.Output, Source: l.Source})
	}
	c.JSON(http.StatusOK, out)
	return nil
}

// agentInactiveAfter is how long after its last heartbeat a connected agent
// counts as disconnected: three missed heartbeats.
func (api *API) agentInactiveAfter() time.Duration {
	return 3 * api.opts.AgentHeartbeatInterval
}

// agentStatusOf derives an agent's connection status from its timestamps.
func (api *API) agentStatusOf(a database.Agent) string {
	now := api.now()
	switch {
	case a.FirstConnectedAt == nil && a.ConnectionTimeoutSeconds > 0 &&
		now.Sub(a.CreatedAt) > time.Duration(a.ConnectionTimeoutSeconds)*time.Second:
		return codersdk.AgentStatusTimeout
	case a.FirstConnectedAt == nil:
		return codersdk.AgentStatusConnecting
	case a.DisconnectedAt != nil && (a.LastConnectedAt == nil || !a.DisconnectedAt.Before(*a.LastConnectedAt)):
		return codersdk.AgentStatusDisconnected
	case a.LastConnectedAt != nil && now.Sub(*a.LastConnectedAt) > api.agentInactiveAfter():
		return codersdk.AgentStatusDisconnected
	}
	return codersdk.AgentStatusConnected
}

// agentLive is what an agent reported at run time, for its API shape.
type agentLive struct {
	runtime  database.AgentRuntime
	metadata map[string]database.AgentMetadataResult
}

// convertAgent is an agent's API shape.
func (api *API) convertAgent(a database.Agent, resourceID string, live agentLive) (codersdk.WorkspaceAgent, error) {
	ports := make([]codersdk.AgentListeningPort, 0, len(live.runtime.ListeningPorts))
	for _, p := range live.runtime.ListeningPorts {
		ports = append(ports, codersdk.AgentListeningPort{Network: p.Network, Port: p.Port})
	}
	scripts, err := agentScripts(a)
	if err != nil {
		return codersdk.WorkspaceAgent{}, err
	}
	metadata, err := api.agentMetadata(a, live.metadata)
	if err != nil {
		return codersdk.WorkspaceAgent{}, err
	}
	var displayApps *codersdk.DisplayApps
	if len(a.DisplayApps) > 0 {
		displayApps = &codersdk.DisplayApps{}
		if err := json.Unmarshal(a.DisplayApps, displayApps); err != nil {
			return codersdk.WorkspaceAgent{}, fmt.Errorf("decode display apps of agent %s: %w", a.ID, err)
		}
	}
	return codersdk.WorkspaceAgent{
		ID: a.ID, CreatedAt: a.CreatedAt, Name: a.Name, ResourceID: resourceID, Status: api.agentStatusOf(a),
		LifecycleState: a.LifecycleState, OperatingSystem: a.OperatingSystem, Architecture: a.Architecture, Directory: a.Directory,
		Apps: convertApps(a.Apps), Version: live.runtime.Version, ExpandedDirectory: live.runtime.ExpandedDirectory, ListeningPorts: ports,
		FirstConnectedAt: a.FirstConnectedAt, LastConnectedAt: a.LastConnectedAt, DisconnectedAt: a.DisconnectedAt,
		ConnectionTimeoutSeconds: a.ConnectionTimeoutSeconds, TroubleshootingURL: a.TroubleshootingURL,
		Env: a.Env, Scripts: scripts, DisplayApps: displayApps, Order: a.Order, Metadata: metadata,
	}, nil
}

func convertApps(apps []database.App) []codersdk.WorkspaceApp {
	out := make([]codersdk.WorkspaceApp, 0, len(apps))
	for _, app := range apps {
		wa := codersdk.WorkspaceApp{
			ID: app.ID, Slug: app.Slug, DisplayName: app.DisplayName, URL: app.URL, Port: app.Port, Command: app.Command, Icon: app.Icon,
			Subdomain: app.Subdomain, Share: app.Share, External: app.External, Group: app.Group, Order: app.Order, Hidden: app.Hidden,
			OpenIn: app.OpenIn, Tooltip: app.Tooltip, Health: app.Health,
		}
		if len(app.Healthcheck) > 0 {
			var hc codersdk.AppHealthcheck
			if json.Unmarshal(app.Healthcheck, &hc) == nil {
				wa.Healthcheck = &hc
			}
		}
		out = append(out, wa)
	}
	return out
}

// agentLiveState loads what the agents of resources reported: runtime and
// latest metadata results, keyed by agent id.
func (api *API) agentLiveState(ctx context.Context, resources map[string][]database.Resource) (map[string]agentLive, error) {
	var ids []string
	for _, rs := range resources {
		for _, r := range rs {
			for _, a := range r.Agents {
				ids = append(ids, a.ID)
			}
		}
	}
	var runtimes map[string]database.AgentRuntime
	var results map[string]map[string]database.AgentMetadataResult
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() (err error) {
		runtimes, err = api.db.AgentRuntimes(gctx, ids)
		return err
	})
	g.Go(func() (err error) {
		results, err = api.db.AgentMetadataResults(gctx, ids)
		return err
	})
	if err := g.Wait(); err != nil {
		return nil, err
	}
	out := make(map[string]agentLive, len(ids))
	for _, id := range ids {
		out[id] = agentLive{runtime: runtimes[id], metadata: results[id]}
	}
	return out, nil
}
