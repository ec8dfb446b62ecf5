package coderd

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/google/uuid"

	"airgapcoder/coderd/appurl"
	"airgapcoder/coderd/database"
	"airgapcoder/codersdk"
)

// Workspace proxies (docs/wsproxy.md). Owners create a proxy and get its
// token once ("<id>:<secret>"; the database keeps the secret's SHA-256);
// the proxy (package wsproxy) registers with that token in the
// Coder-External-Proxy-Auth-Token header and registers again every
// heartbeat interval, sending its own health report each time. A proxy's
// status is computed from its row on this replica's clock (api.now), so
// every replica answers the same:
//
//   - unregistered: it never registered;
//   - unreachable: it deregistered (a clean shutdown), or its last
//     registration is more than proxyUnreachableAfter intervals old;
//   - unhealthy: its report has errors;
//   - ok: otherwise.
//
// Deleting a proxy keeps its row marked deleted, so its token is refused
// at once, with a message that says it was deleted.

// DefaultWorkspaceProxyHeartbeatInterval is how often a proxy registers
// again when Options.WorkspaceProxyHeartbeatInterval is zero.
const DefaultWorkspaceProxyHeartbeatInterval = 10 * time.Second

// DefaultWorkspaceProxyAuthTTL is how long a proxy may reuse an answer
// about a user's token when Options.WorkspaceProxyAuthTTL is zero.
const DefaultWorkspaceProxyAuthTTL = 10 * time.Second

// proxyUnreachableAfter is how many heartbeat intervals a proxy may stay
// silent before it counts as unreachable.
const proxyUnreachableAfter = 3

// primaryRegionName is the primary's name among the regions, which no
// proxy may take.
const primaryRegionName = "primary"

// proxyNameRe is a proxy name: a DNS label, as Coder's.
var proxyNameRe = regexp.MustCompile(`^[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,30}[a-zA-Z0-9])?$`)

const (
	proxySecretLength = 32
	ctxWorkspaceProxy = "coderd.workspaceproxy"
)

func (api *API) proxyHeartbeatInterval() time.Duration {
	if api.opts.WorkspaceProxyHeartbeatInterval > 0 {
		return api.opts.WorkspaceProxyHeartbeatInterval
	}
	return DefaultWorkspaceProxyHeartbeatInterval
}

// workspaceProxyRoutes adds the owners' endpoints to signedIn (a group
// behind requireAuth) and the proxies' own to v2, where they authenticate
// with the proxy's token.
func (api *API) workspaceProxyRoutes(v2, signedIn *gin.RouterGroup) {
	v2.POST("/workspaceproxies/me/register", api.handle(api.registerWorkspaceProxy))
	v2.POST("/workspaceproxies/me/deregister", api.handle(api.deregisterWorkspaceProxy))
	signedIn.POST("/workspaceproxies", api.handle(api.postWorkspaceProxy))
	signedIn.GET("/workspaceproxies", api.handle(api.workspaceProxies))
	signedIn.GET("/workspaceproxies/:proxy", api.handle(api.workspaceProxy))
	signedIn.DELETE("/workspaceproxies/:proxy", api.handle(api.deleteWorkspaceProxy))
	signedIn.GET("/regions", api.handle(api.regions))
	api.workspaceProxyRelayRoutes(v2) // workspaceproxyrelay.go
	api.workspaceProxyAppRoutes(v2)   // workspaceproxyapps.go
}

func (api *API) postWorkspaceProxy(c *gin.Context) error {
	e := api.audit(c, codersdk.AuditActionCreate, codersdk.AuditResourceWorkspaceProxy)
	if err := authorize(c, resWorkspaceProxy, actCreate, ""); err != nil {
		return err
	}
	var req codersdk.CreateWorkspaceProxyRequest
	if err := decode(c, &req); err != nil {
		return err
	}
	e.resource("", req.Name)
	switch {
	case !proxyNameRe.MatchString(req.Name):
		return validation("name", "must be 1-32 letters, digits or dashes, starting and ending with a letter or digit")
	case strings.EqualFold(req.Name, primaryRegionName):
		return validation("name", `"primary" is the primary region's name`)
	case len(req.DisplayName) > 64:
		return validation("display_name", "must be at most 64 characters")
	case len(req.Icon) > 256:
		return validation("icon", "must be at most 256 characters")
	}
	if req.DisplayName == "" {
		req.DisplayName = req.Name
	}
	secret := randomString(proxySecretLength)
	var p database.WorkspaceProxy
	err := e.inTx(c.Request.Context(), http.StatusCreated, func(tx *database.DB) error {
		var err error
		p, err = tx.InsertWorkspaceProxy(c.Request.Context(), database.WorkspaceProxy{
			Name: req.Name, DisplayName: req.DisplayName, Icon: req.Icon, TokenHashedSecret: hashSecret(secret),
		})
		e.resource(p.ID, p.Name)
		return err
	})
	if errors.Is(err, database.ErrConflict) {
		return conflict("A workspace proxy named %q already exists", req.Name)
	}
	if err != nil {
		return err
	}
	c.JSON(http.StatusCreated, codersdk.UpdateWorkspaceProxyResponse{
		Proxy: api.convertWorkspaceProxy(p, api.now()), ProxyToken: p.ID + ":" + secret,
	})
	return nil
}

func (api *API) workspaceProxies(c *gin.Context) error {
	if err := authorize(c, resWorkspaceProxy, actRead, ""); err != nil {
		return err
	}
	ps, err := api.db.WorkspaceProxies(c.Request.Context())
	if err != nil {
		return err
	}
	now := api.now()
	out := make([]codersdk.WorkspaceProxy, 0, len(ps))
	for _, p := range ps {
		out = append(out, api.convertWorkspaceProxy(p, now))
	}
	c.JSON(http.StatusOK, out)
	return nil
}

// proxyByParam is the proxy the :proxy parameter names, by id or name.
func (api *API) proxyByParam(c *gin.Context) (database.WorkspaceProxy, error) {
	ref := c.Param("proxy")
	p, err := api.db.WorkspaceProxyByID(c.Request.Context(), ref)
	if err == nil && p.Deleted {
		err = database.ErrNotFound
	}
	if errors.Is(err, database.ErrNotFound) {
		p, err = api.db.WorkspaceProxyByName(c.Request.Context(), ref)
	}
	return p, notFoundAs(fmt.Sprintf("Workspace proxy %q", ref), err)
}

func (api *API) workspaceProxy(c *gin.Context) error {
	if err := authorize(c, resWorkspaceProxy, actRead, ""); err != nil {
		return err
	}
	p, err := api.proxyByParam(c)
	if err != nil {
		return err
	}
	c.JSON(http.StatusOK, api.convertWorkspaceProxy(p, api.now()))
	return nil
}

func (api *API) deleteWorkspaceProxy(c *gin.Context) error {
	e := api.audit(c, codersdk.AuditActionDelete, codersdk.AuditResourceWorkspaceProxy).resource("", c.Param("proxy"))
	if err := authorize(c, resWorkspaceProxy, actDelete, ""); err != nil {
		return err
	}
	p, err := api.proxyByParam(c)
	if err != nil {
		return err
	}
	e.resource(p.ID, p.Name)
	err = e.inTx(c.Request.Context(), http.StatusOK, func(tx *database.DB) error {
		if _, err := tx.DeleteWorkspaceProxy(c.Request.Context(), p.ID); err != nil {
			return err
		}
		// Every replica closes the proxy's relay session when this commits.
		return tx.Notify(c.Request.Context(), database.ChannelWorkspaceProxyDeleted, p.ID)
	})
	if err != nil {
		return notFoundAs(fmt.Sprintf("Workspace proxy %q", c.Param("proxy")), err)
	}
	if api.proxyRelays.close(p.ID) { // at once here, without waiting for the notification
		api.log.Info("workspace proxy relay session closed: the proxy was deleted", "proxy", p.Name)
	}
	c.JSON(http.StatusOK, codersdk.Response{Message: fmt.Sprintf("Workspace proxy %s has been deleted; its token is refused from now on", p.Name)})
	return nil
}

// regions lists the primary and the healthy proxies, for any signed-in
// user.
func (api *API) regions(c *gin.Context) error {
	ps, err := api.db.WorkspaceProxies(c.Request.Context())
	if err != nil {
		return err
	}
	out := []codersdk.Region{{
		ID: api.org.ID, Name: primaryRegionName, DisplayName: "Default", Healthy: true,
		PathAppURL: api.opts.AccessURL.String(), WildcardHostname: api.opts.WildcardAccessURL.HostPattern(api.opts.AccessURL),
	}}
	now := api.now()
	for _, p := range ps {
		// Every proxy, with healthy false when its status is not ok, as
		// Coder answers: a client can tell a proxy that is down from a name
		// that is none.
		out = append(out, api.convertWorkspaceProxy(p, now).Region)
	}
	c.JSON(http.StatusOK, codersdk.RegionsResponse{Regions: out})
	return nil
}

// convertWorkspaceProxy is a proxy as the API answers it, with its status
// at now.
func (api *API) convertWorkspaceProxy(p database.WorkspaceProxy, now time.Time) codersdk.WorkspaceProxy {
	status := api.proxyStatus(p, now)
	return codersdk.WorkspaceProxy{
		Region: codersdk.Region{
			ID: p.ID, Name: p.Name, DisplayName: p.DisplayName, IconURL: p.Icon, Healthy: status.Status == codersdk.ProxyHealthy,
			PathAppURL: p.URL, WildcardHostname: p.WildcardHostname,
		},
		Status: status, Version: p.Version, RegisteredAt: p.RegisteredAt, LastSeenAt: p.LastHeartbeatAt,
		CreatedAt: p.CreatedAt, UpdatedAt: p.UpdatedAt, Deleted: p.Deleted,
	}
}

// proxyStatus applies the status rules (see the top of this file).
func (api *API) proxyStatus(p database.WorkspaceProxy, now time.Time) codersdk.WorkspaceProxyStatus {
	var report codersdk.ProxyHealthReport
	_ = json.Unmarshal(p.HealthReport, &report) // written by us from the same type
	st := codersdk.WorkspaceProxyStatus{CheckedAt: now, Report: report}
	bound := proxyUnreachableAfter * api.proxyHeartbeatInterval()
	switch {
	case p.LastHeartbeatAt.IsZero():
		st.Status = codersdk.ProxyUnregistered
		st.Report.Errors = append(st.Report.Errors, "The proxy has never registered: start it with coder wsproxy server and its token")
	case !p.DeregisteredAt.IsZero():
		st.Status = codersdk.ProxyUnreachable
		st.Report.Errors = append(st.Report.Errors, fmt.Sprintf("The proxy shut down (deregistered) at %s", p.DeregisteredAt.Format(time.RFC3339)))
	case now.Sub(p.LastHeartbeatAt) > bound:
		st.Status = codersdk.ProxyUnreachable
		st.Report.Errors = append(st.Report.Errors, fmt.Sprintf("No heartbeat since %s (%s ago); a proxy silent for %s counts as unreachable",
			p.LastHeartbeatAt.Format(time.RFC3339), now.Sub(p.LastHeartbeatAt).Round(time.Second), bound))
	case len(report.Errors) > 0:
		st.Status = codersdk.ProxyUnhealthy
	default:
		st.Status = codersdk.ProxyHealthy
	}
	return st
}

// authenticateProxy resolves the proxy's token to its row. A missing,
// malformed, unknown or wrong token, and the token of a deleted proxy, is
// 401 with a message that says which.
func (api *API) authenticateProxy(c *gin.Context) (database.WorkspaceProxy, error) {
	unauthorized := func(format string, args ...any) error {
		return errorf(http.StatusUnauthorized, "", format, args...)
	}
	token := c.GetHeader(codersdk.ExternalProxyAuthTokenHeader)
	if token == "" {
		return database.WorkspaceProxy{}, unauthorized("Send the workspace proxy's token in the %s header", codersdk.ExternalProxyAuthTokenHeader)
	}
	id, secret, ok := strings.Cut(token, ":")
	if !ok || uuid.Validate(id) != nil || len(secret) != proxySecretLength {
		return database.WorkspaceProxy{}, unauthorized("Invalid workspace proxy token: it must look like <proxy id>:<%d characters>, as coder wsproxy create printed it", proxySecretLength)
	}
	p, err := api.db.WorkspaceProxyByID(c.Request.Context(), id)
	if errors.Is(err, database.ErrNotFound) {
		return p, unauthorized("Invalid workspace proxy token: no workspace proxy has the id %s", id)
	}
	if err != nil {
		return p, err
	}
	if subtle.ConstantTimeCompare(hashSecret(secret), p.TokenHashedSecret) != 1 {
		return p, unauthorized("Invalid workspace proxy token: the secret does not match workspace proxy %s", p.Name)
	}
	if p.Deleted {
		return p, proxyDeleted(p)
	}
	return p, nil
}

func proxyDeleted(p database.WorkspaceProxy) error {
	return errorf(http.StatusUnauthorized, "", "Workspace proxy %s was deleted at %s: its token is no longer valid (create a new proxy with coder wsproxy create)",
		p.Name, p.UpdatedAt.Format(time.RFC3339))
}

// registerWorkspaceProxy is a proxy's registration and heartbeat. A start
// (a new replica, the first registration, or one after a clean shutdown)
// is audited; a heartbeat of the same replica is not, so the audit log
// does not fill with them.
func (api *API) registerWorkspaceProxy(c *gin.Context) error {
	e := api.audit(c, codersdk.AuditActionRegister, codersdk.AuditResourceWorkspaceProxy)
	p, err := api.authenticateProxy(c)
	e.resource(p.ID, p.Name)
	if err != nil {
		return err
	}
	var req codersdk.RegisterWorkspaceProxyRequest
	if err := decode(c, &req); err != nil {
		return err
	}
	if err := checkProxyRegistration(req); err != nil {
		return err
	}
	active, err := checkActiveAgentIDs(req.ActiveAgentIDs) // workspaceproxyrelay.go
	if err != nil {
		return err
	}
	e.field("access_url", req.AccessURL).field("version", req.Version).field("hostname", req.ReplicaHostname).field("replica_id", req.ReplicaID)
	report, err := json.Marshal(req.HealthReport)
	if err != nil {
		return err
	}
	params := database.RegisterWorkspaceProxyParams{
		ID: p.ID, URL: req.AccessURL, WildcardHostname: req.WildcardHostname, Version: req.Version,
		ReplicaID: req.ReplicaID, ReplicaHostname: req.ReplicaHostname, HealthReport: report, Now: api.now(),
	}
	ctx := c.Request.Context()
	if p.LastHeartbeatAt.IsZero() || !p.DeregisteredAt.IsZero() || p.ReplicaID != req.ReplicaID || p.URL != req.AccessURL {
		err = e.inTx(ctx, http.StatusCreated, func(tx *database.DB) error {
			_, err := tx.RegisterWorkspaceProxy(ctx, params)
			return err
		})
		if err == nil {
			api.log.Info("workspace proxy registered", "proxy", p.Name, "url", req.AccessURL, "version", req.Version, "hostname", req.ReplicaHostname)
		}
	} else {
		e.skip(c)
		_, err = api.db.RegisterWorkspaceProxy(ctx, params)
	}
	if errors.Is(err, database.ErrNotFound) { // deleted meanwhile
		return proxyDeleted(p)
	}
	if err != nil {
		return err
	}
	// Connections through the proxy move their workspaces' deadlines.
	api.noteProxyActivity(ctx, p.Name, active)
	c.JSON(http.StatusCreated, codersdk.RegisterWorkspaceProxyResponse{
		ProxyID: p.ID, ProxyName: p.Name, HeartbeatIntervalMillis: api.proxyHeartbeatInterval().Milliseconds(),
	})
	return nil
}

// checkProxyRegistration checks what a proxy says of itself.
func checkProxyRegistration(req codersdk.RegisterWorkspaceProxyRequest) error {
	u, err := url.Parse(req.AccessURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return validation("access_url", "must be an absolute http or https URL, e.g. https://eu.coder.example.internal")
	}
	if req.WildcardHostname != "" {
		if _, err := appurl.ParseWildcard(req.WildcardHostname); err != nil {
			return validation("wildcard_hostname", err.Error())
		}
	}
	if req.ReplicaID == "" || len(req.ReplicaID) > 64 {
		return validation("replica_id", "must be 1-64 characters, new at every start of the proxy")
	}
	if len(req.Version) > 128 || len(req.ReplicaHostname) > 255 {
		return validation("version", "version must be at most 128 and hostname at most 255 characters")
	}
	return nil
}

// deregisterWorkspaceProxy is a proxy's clean shutdown: it shows as
// unreachable at once, rather than after the heartbeat bound.
func (api *API) deregisterWorkspaceProxy(c *gin.Context) error {
	e := api.audit(c, codersdk.AuditActionDeregister, codersdk.AuditResourceWorkspaceProxy)
	p, err := api.authenticateProxy(c)
	e.resource(p.ID, p.Name)
	if err != nil {
		return err
	}
	var req codersdk.DeregisterWorkspaceProxyRequest
	if err := decode(c, &req); err != nil {
		return err
	}
	e.field("replica_id", req.ReplicaID)
	ok, err := api.db.DeregisterWorkspaceProxy(c.Request.Context(), p.ID, req.ReplicaID, api.now())
	if err != nil {
		return err
	}
	if ok {
		api.log.Info("workspace proxy deregistered", "proxy", p.Name, "replica_id", req.ReplicaID)
	}
	c.Status(http.StatusNoContent)
	return nil
}
