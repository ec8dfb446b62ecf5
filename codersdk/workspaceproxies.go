package codersdk

import (
	"context"
	"net/http"
	"net/url"
	"time"
)

// Workspace proxies serve a region: a proxy registers with the deployment
// (the primary) by its token and heartbeats; owners create, list and delete
// them; every user lists the regions. Shapes follow Coder's API.

// ExternalProxyAuthTokenHeader carries a workspace proxy's token
// ("<id>:<secret>") on the proxy's own calls to the primary.
const ExternalProxyAuthTokenHeader = "Coder-External-Proxy-Auth-Token"

// ProxyHealthStatus is what the primary makes of a proxy's registration.
type ProxyHealthStatus string

// Proxy statuses, as Coder's.
const (
	// ProxyHealthy: it registered or heartbeat recently and its own health
	// report has no errors.
	ProxyHealthy ProxyHealthStatus = "ok"
	// ProxyUnreachable: no registration or heartbeat within three heartbeat
	// intervals, or it shut down (deregistered).
	ProxyUnreachable ProxyHealthStatus = "unreachable"
	// ProxyUnhealthy: it heartbeats, but its health report has errors.
	ProxyUnhealthy ProxyHealthStatus = "unhealthy"
	// ProxyUnregistered: created, but it never registered.
	ProxyUnregistered ProxyHealthStatus = "unregistered"
)

// ProxyHealthReport is a proxy's report on itself (its /healthz-report,
// also sent with every heartbeat). Errors make it unhealthy; warnings do
// not.
type ProxyHealthReport struct {
	Errors   []string `json:"errors"`
	Warnings []string `json:"warnings"`
}

// WorkspaceProxyStatus is a proxy's status and the report it is based on.
type WorkspaceProxyStatus struct {
	Status ProxyHealthStatus `json:"status"`
	// Report is the proxy's last health report, with the primary's reason
	// for an unreachable or unregistered status among its errors.
	Report ProxyHealthReport `json:"report"`
	// CheckedAt is when the primary computed the status.
	CheckedAt time.Time `json:"checked_at"`
}

// Region is a place workspaces are reached from: the primary, or a proxy.
type Region struct {
	ID          string `json:"id"`
	Name        string `json:"name"`
	DisplayName string `json:"display_name"`
	IconURL     string `json:"icon_url"`
	// Healthy is true for the primary and for proxies whose status is ok.
	Healthy bool `json:"healthy"`
	// PathAppURL is the region's access URL, the base of path-based dev
	// URLs ("" until a proxy registers).
	PathAppURL string `json:"path_app_url"`
	// WildcardHostname is the host pattern of the region's subdomain apps
	// (e.g. "*.eu.example.internal"); "" when it serves none.
	WildcardHostname string `json:"wildcard_hostname"`
}

// RegionsResponse answers GET /api/v2/regions.
type RegionsResponse struct {
	Regions []Region `json:"regions"`
}

// WorkspaceProxy is a proxy as owners see it (GET /api/v2/workspaceproxies).
type WorkspaceProxy struct {
	Region
	Status WorkspaceProxyStatus `json:"status"`
	// Version is the proxy's version at its last registration.
	Version string `json:"version"`
	// RegisteredAt is its first registration, LastSeenAt its last
	// registration or heartbeat; both absent while it never registered.
	RegisteredAt time.Time `json:"registered_at,omitzero"`
	LastSeenAt   time.Time `json:"last_seen_at,omitzero"`
	CreatedAt    time.Time `json:"created_at"`
	UpdatedAt    time.Time `json:"updated_at"`
	Deleted      bool      `json:"deleted"`
}

// CreateWorkspaceProxyRequest is POST /api/v2/workspaceproxies.
type CreateWorkspaceProxyRequest struct {
	Name        string `json:"name"`
	DisplayName string `json:"display_name"`
	Icon        string `json:"icon"`
}

// UpdateWorkspaceProxyResponse answers the creation of a proxy: the proxy
// and its token, which is shown this once (the primary keeps only a hash).
type UpdateWorkspaceProxyResponse struct {
	Proxy      WorkspaceProxy `json:"proxy"`
	ProxyToken string         `json:"proxy_token"`
}

// CreateWorkspaceProxy creates a proxy (owners).
func (c *Client) CreateWorkspaceProxy(ctx context.Context, req CreateWorkspaceProxyRequest) (UpdateWorkspaceProxyResponse, error) {
	return doJSON[UpdateWorkspaceProxyResponse](ctx, c, http.MethodPost, "/api/v2/workspaceproxies", req, http.StatusCreated)
}

// WorkspaceProxies lists the proxies with their status (owners).
func (c *Client) WorkspaceProxies(ctx context.Context) ([]WorkspaceProxy, error) {
	return doJSON[[]WorkspaceProxy](ctx, c, http.MethodGet, "/api/v2/workspaceproxies", nil)
}

// WorkspaceProxyByName returns a proxy by name or id (owners).
func (c *Client) WorkspaceProxyByName(ctx context.Context, nameOrID string) (WorkspaceProxy, error) {
	return doJSON[WorkspaceProxy](ctx, c, http.MethodGet, "/api/v2/workspaceproxies/"+url.PathEscape(nameOrID), nil)
}

// DeleteWorkspaceProxy deletes a proxy by name or id (owners); its token
// is refused from then on.
func (c *Client) DeleteWorkspaceProxy(ctx context.Context, nameOrID string) error {
	return c.do(ctx, http.MethodDelete, "/api/v2/workspaceproxies/"+url.PathEscape(nameOrID), nil, nil)
}

// Regions lists the primary and the healthy proxies (any signed-in user).
func (c *Client) Regions(ctx context.Context) ([]Region, error) {
	var out RegionsResponse
	return out.Regions, c.do(ctx, http.MethodGet, "/api/v2/regions", nil, &out)
}

// RegisterWorkspaceProxyRequest is what a proxy says of itself when it
// registers, and again with every heartbeat.
type RegisterWorkspaceProxyRequest struct {
	// AccessURL is where users reach the proxy.
	AccessURL string `json:"access_url"`
	// WildcardHostname is the host pattern of its subdomain apps, if any.
	WildcardHostname string `json:"wildcard_hostname"`
	Version          string `json:"version"`
	// ReplicaID identifies this run of the proxy (new at every start);
	// ReplicaHostname is the host it runs on.
	ReplicaID       string `json:"replica_id"`
	ReplicaHostname string `json:"hostname"`
	// HealthReport is the proxy's own health report.
	HealthReport ProxyHealthReport `json:"health_report"`
	// ActiveAgentIDs are the agents with at least one user connection open
	// through the proxy now: their workspaces' deadlines are bumped as for
	// connections through the primary (docs/schedules.md).
	ActiveAgentIDs []string `json:"active_agent_ids,omitempty"`
}

// RegisterWorkspaceProxyResponse is what the primary tells a registering
// proxy.
type RegisterWorkspaceProxyResponse struct {
	ProxyID   string `json:"proxy_id"`
	ProxyName string `json:"proxy_name"`
	// HeartbeatIntervalMillis is how often the proxy must register again:
	// the primary counts it unreachable after three silent intervals.
	HeartbeatIntervalMillis int64 `json:"heartbeat_interval_ms"`
}

// HeartbeatInterval is HeartbeatIntervalMillis as a duration.
func (r RegisterWorkspaceProxyResponse) HeartbeatInterval() time.Duration {
	return time.Duration(r.HeartbeatIntervalMillis) * time.Millisecond
}

// DeregisterWorkspaceProxyRequest is a proxy's clean shutdown.
type DeregisterWorkspaceProxyRequest struct {
	ReplicaID string `json:"replica_id"`
}

// ProxyBuildInfo is what a workspace proxy answers at /api/v2/buildinfo:
// its own version and access URL, and where the dashboard is.
type ProxyBuildInfo struct {
	BuildInfo
	WorkspaceProxy bool   `json:"workspace_proxy"`
	DashboardURL   string `json:"dashboard_url"`
}

// ProxyClient is a workspace proxy's client of the primary: its calls
// authenticate with the proxy's token in ExternalProxyAuthTokenHeader.
type ProxyClient struct {
	// Client holds the primary's URL and the HTTP client; its session
	// token, if any, is sent too but is not needed.
	Client *Client
	// Token is the proxy's token, "<id>:<secret>".
	Token string
}

// call POSTs body to path as the proxy and decodes a JSON answer into out
// (when out is non-nil), which must come with the status want.
func (c *ProxyClient) call(ctx context.Context, path string, body, out any, want int) error {
	return c.Client.doWithHeader(ctx, http.MethodPost, path, body, out, func(r *http.Request) {
		r.Header.Set(ExternalProxyAuthTokenHeader, c.Token)
	}, want)
}

// RegisterWorkspaceProxy registers the proxy, or heartbeats.
func (c *ProxyClient) RegisterWorkspaceProxy(ctx context.Context, req RegisterWorkspaceProxyRequest) (RegisterWorkspaceProxyResponse, error) {
	var out RegisterWorkspaceProxyResponse
	return out, c.call(ctx, "/api/v2/workspaceproxies/me/register", req, &out, http.StatusCreated)
}

// DeregisterWorkspaceProxy tells the primary the proxy is shutting down.
func (c *ProxyClient) DeregisterWorkspaceProxy(ctx context.Context, req DeregisterWorkspaceProxyRequest) error {
	return c.call(ctx, "/api/v2/workspaceproxies/me/deregister", req, nil, http.StatusNoContent)
}

// Audit records of workspace proxies: owners create and delete them; a
// proxy's start (registration) and clean shutdown (deregistration) are
// recorded with the proxy as the resource, heartbeats are not.
const (
	AuditResourceWorkspaceProxy AuditResourceType = "workspace_proxy"
	AuditActionRegister         AuditAction       = "register"
	AuditActionDeregister       AuditAction       = "deregister"
)
