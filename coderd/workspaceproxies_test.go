package coderd_test

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"airgapcoder/coderd"
	"airgapcoder/coderd/coderdtest"
	"airgapcoder/codersdk"
)

func proxyClient(d *coderdtest.Deployment, token string) *codersdk.ProxyClient {
	return &codersdk.ProxyClient{Client: d.Client(), Token: token}
}

func registerReq(replica string, errs ...string) codersdk.RegisterWorkspaceProxyRequest {
	return codersdk.RegisterWorkspaceProxyRequest{
		AccessURL: "https://eu.example.internal", WildcardHostname: "*.eu.example.internal", Version: "v9.9.9",
		ReplicaID: replica, ReplicaHostname: "eu-host", HealthReport: codersdk.ProxyHealthReport{Errors: errs},
	}
}

func proxyStatus(t *testing.T, owner *codersdk.Client, name string) codersdk.WorkspaceProxy {
	t.Helper()
	p, err := owner.WorkspaceProxyByName(context.Background(), name)
	if err != nil {
		t.Fatalf("get proxy %s: %v", name, err)
	}
	return p
}

func regionNames(t *testing.T, c *codersdk.Client) []string {
	t.Helper()
	rs, err := c.Regions(context.Background())
	if err != nil {
		t.Fatalf("regions: %v", err)
	}
	var names []string
	for _, r := range rs {
		name := r.Name
		if !r.Healthy {
			name += " (unhealthy)"
		}
		names = append(names, name)
	}
	return names
}

func TestWorkspaceProxies(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := newTestClock() // ratelimit_test.go
	d := coderdtest.New(t, coderdtest.Options{Now: clock.now})
	owner, _ := d.CreateFirstUser(t)
	member, _ := d.CreateUser(t, owner, "member")
	tadmin, _ := d.CreateUser(t, owner, "tadmin", codersdk.RoleTemplateAdmin)

	// Only owners create, list, read and delete proxies.
	for name, c := range map[string]*codersdk.Client{"member": member, "template admin": tadmin} {
		if _, err := c.CreateWorkspaceProxy(ctx, codersdk.CreateWorkspaceProxyRequest{Name: "nope"}); !codersdk.IsStatus(err, http.StatusForbidden) {
			t.Errorf("%s creates a proxy: got %v, want 403", name, err)
		}
		if _, err := c.WorkspaceProxies(ctx); !codersdk.IsStatus(err, http.StatusForbidden) {
			t.Errorf("%s lists proxies: got %v, want 403", name, err)
		}
	}

	created, err := owner.CreateWorkspaceProxy(ctx, codersdk.CreateWorkspaceProxyRequest{Name: "eu", DisplayName: "Europe", Icon: "/icon/eu.svg"})
	if err != nil {
		t.Fatal(err)
	}
	id, secret, ok := strings.Cut(created.ProxyToken, ":")
	if !ok || id != created.Proxy.ID || len(secret) < 32 {
		t.Fatalf("proxy token: got %q, want <proxy id %s>:<secret>", created.ProxyToken, created.Proxy.ID)
	}
	if created.Proxy.Status.Status != codersdk.ProxyUnregistered || created.Proxy.DisplayName != "Europe" || created.Proxy.IconURL != "/icon/eu.svg" {
		t.Errorf("created proxy: got %+v, want unregistered Europe with its icon", created.Proxy)
	}
	for _, tc := range []struct {
		name   string
		status int
	}{{"EU", http.StatusConflict}, {"primary", http.StatusBadRequest}, {"bad name!", http.StatusBadRequest}, {"", http.StatusBadRequest}} {
		if _, err := owner.CreateWorkspaceProxy(ctx, codersdk.CreateWorkspaceProxyRequest{Name: tc.name}); !codersdk.IsStatus(err, tc.status) {
			t.Errorf("create proxy %q: got %v, want %d", tc.name, err, tc.status)
		}
	}
	for name, c := range map[string]*codersdk.Client{"member": member, "template admin": tadmin} {
		if _, err := c.WorkspaceProxyByName(ctx, "eu"); !codersdk.IsStatus(err, http.StatusForbidden) {
			t.Errorf("%s reads a proxy: got %v, want 403", name, err)
		}
		if err := c.DeleteWorkspaceProxy(ctx, "eu"); !codersdk.IsStatus(err, http.StatusForbidden) {
			t.Errorf("%s deletes a proxy: got %v, want 403", name, err)
		}
	}
	if _, err := owner.CreateWorkspaceProxy(ctx, codersdk.CreateWorkspaceProxyRequest{Name: "us"}); err != nil {
		t.Fatal(err)
	}
	ps, err := owner.WorkspaceProxies(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 2 || ps[0].Name != "eu" || ps[1].Name != "us" || ps[1].Status.Status != codersdk.ProxyUnregistered || ps[1].DisplayName != "us" {
		t.Fatalf("list: got %+v, want eu and us, unregistered, us displayed by its name", ps)
	}
	// Members see the regions: the primary, and every proxy with its
	// health (as Coder answers).
	if got, want := regionNames(t, member), []string{"primary", "eu (unhealthy)", "us (unhealthy)"}; !slices.Equal(got, want) {
		t.Errorf("regions before any proxy registered: got %v, want %v", got, want)
	}

	// The proxy registers: ok, seen now, and a region for everyone.
	proxy := proxyClient(d, created.ProxyToken)
	res, err := proxy.RegisterWorkspaceProxy(ctx, registerReq("replica-1"))
	if err != nil {
		t.Fatal(err)
	}
	interval := res.HeartbeatInterval()
	if res.ProxyID != id || res.ProxyName != "eu" || interval != coderd.DefaultWorkspaceProxyHeartbeatInterval {
		t.Errorf("register answer: got %+v, want proxy eu and the default interval", res)
	}
	p := proxyStatus(t, owner, id) // by id
	if p.Status.Status != codersdk.ProxyHealthy || p.LastSeenAt.Sub(clock.now()).Abs() > time.Millisecond || p.Version != "v9.9.9" ||
		p.PathAppURL != "https://eu.example.internal" || p.WildcardHostname != "*.eu.example.internal" {
		t.Errorf("after registration: got %+v, want ok, seen now, with its URLs and version", p)
	}
	if got, want := regionNames(t, member), []string{"primary", "eu", "us (unhealthy)"}; !slices.Equal(got, want) {
		t.Errorf("regions: got %v, want %v", got, want)
	}

	// A report with errors: unhealthy, and a region not to use.
	if _, err := proxy.RegisterWorkspaceProxy(ctx, registerReq("replica-1", "certificate expired")); err != nil {
		t.Fatal(err)
	}
	if p := proxyStatus(t, owner, "eu"); p.Status.Status != codersdk.ProxyUnhealthy || !slices.Equal(p.Status.Report.Errors, []string{"certificate expired"}) {
		t.Errorf("after an unhealthy report: got %+v, want unhealthy with the report's error", p.Status)
	}
	if got, want := regionNames(t, member), []string{"primary", "eu (unhealthy)", "us (unhealthy)"}; !slices.Equal(got, want) {
		t.Errorf("regions with eu unhealthy: got %v, want %v", got, want)
	}

	// Silent for just under three intervals: still ok; a second more:
	// unreachable; a heartbeat makes it ok again.
	if _, err := proxy.RegisterWorkspaceProxy(ctx, registerReq("replica-1")); err != nil {
		t.Fatal(err)
	}
	clock.advance(3*interval - time.Millisecond)
	if p := proxyStatus(t, owner, "eu"); p.Status.Status != codersdk.ProxyHealthy {
		t.Errorf("silent for just under three intervals: got %s, want ok", p.Status.Status)
	}
	clock.advance(time.Second)
	if p := proxyStatus(t, owner, "eu"); p.Status.Status != codersdk.ProxyUnreachable || !strings.Contains(strings.Join(p.Status.Report.Errors, ";"), "No heartbeat since") {
		t.Errorf("silent for three intervals and a second: got %+v, want unreachable saying since when", p.Status)
	}
	if _, err := proxy.RegisterWorkspaceProxy(ctx, registerReq("replica-1")); err != nil {
		t.Fatal(err)
	}
	if p := proxyStatus(t, owner, "eu"); p.Status.Status != codersdk.ProxyHealthy {
		t.Errorf("after a heartbeat: got %s, want ok", p.Status.Status)
	}

	// Bad tokens are refused, saying why.
	for _, tc := range []struct{ token, want string }{
		{"", "Coder-External-Proxy-Auth-Token"},
		{"garbage", "must look like"},
		{id + ":" + strings.Repeat("x", len(secret)), "secret does not match"},
		{"00000000-0000-0000-0000-000000000000:" + secret, "no workspace proxy"},
		{created.ProxyToken, ""}, // sanity: the real one passes
	} {
		_, err := proxyClient(d, tc.token).RegisterWorkspaceProxy(ctx, registerReq("replica-1"))
		if tc.want == "" {
			if err != nil {
				t.Errorf("real token: %v", err)
			}
			continue
		}
		if !codersdk.IsStatus(err, http.StatusUnauthorized) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("token %q: got %v, want 401 saying %q", tc.token, err, tc.want)
		}
	}
	// A bad registration is a validation error.
	bad := registerReq("replica-1")
	bad.AccessURL = "eu.example.internal"
	if _, err := proxy.RegisterWorkspaceProxy(ctx, bad); !codersdk.IsStatus(err, http.StatusBadRequest) {
		t.Errorf("register without a scheme: got %v, want 400", err)
	}

	// A clean shutdown: unreachable at once. Another replica's
	// deregistration changes nothing.
	if err := proxy.DeregisterWorkspaceProxy(ctx, codersdk.DeregisterWorkspaceProxyRequest{ReplicaID: "replica-other"}); err != nil {
		t.Fatal(err)
	}
	if p := proxyStatus(t, owner, "eu"); p.Status.Status != codersdk.ProxyHealthy {
		t.Errorf("after another replica deregistered: got %s, want ok", p.Status.Status)
	}
	if err := proxy.DeregisterWorkspaceProxy(ctx, codersdk.DeregisterWorkspaceProxyRequest{ReplicaID: "replica-1"}); err != nil {
		t.Fatal(err)
	}
	if p := proxyStatus(t, owner, "eu"); p.Status.Status != codersdk.ProxyUnreachable || !strings.Contains(strings.Join(p.Status.Report.Errors, ";"), "shut down") {
		t.Errorf("after deregistering: got %+v, want unreachable saying it shut down", p.Status)
	}
	// Restarted (a new replica): ok.
	if _, err := proxy.RegisterWorkspaceProxy(ctx, registerReq("replica-2")); err != nil {
		t.Fatal(err)
	}
	if p := proxyStatus(t, owner, "eu"); p.Status.Status != codersdk.ProxyHealthy {
		t.Errorf("after a restart: got %s, want ok", p.Status.Status)
	}

	// Deleted: its token is refused at once, saying so.
	if err := owner.DeleteWorkspaceProxy(ctx, "eu"); err != nil {
		t.Fatal(err)
	}
	_, err = proxy.RegisterWorkspaceProxy(ctx, registerReq("replica-2"))
	if !codersdk.IsStatus(err, http.StatusUnauthorized) || !strings.Contains(err.Error(), "eu was deleted") {
		t.Errorf("heartbeat after delete: got %v, want 401 saying eu was deleted", err)
	}
	if err := proxy.DeregisterWorkspaceProxy(ctx, codersdk.DeregisterWorkspaceProxyRequest{ReplicaID: "replica-2"}); !codersdk.IsStatus(err, http.StatusUnauthorized) {
		t.Errorf("deregister after delete: got %v, want 401", err)
	}
	if _, err := owner.WorkspaceProxyByName(ctx, "eu"); !codersdk.IsStatus(err, http.StatusNotFound) {
		t.Errorf("get after delete: got %v, want 404", err)
	}
	if err := owner.DeleteWorkspaceProxy(ctx, id); !codersdk.IsStatus(err, http.StatusNotFound) {
		t.Errorf("delete twice: got %v, want 404", err)
	}
	if got, want := regionNames(t, member), []string{"primary", "us (unhealthy)"}; !slices.Equal(got, want) {
		t.Errorf("regions after delete: got %v, want %v", got, want)
	}

	// The audit log has the creations, deletion, the starts and the clean
	// shutdown, not the heartbeats.
	logs, err := owner.AuditLogs(ctx, codersdk.AuditLogsRequest{SearchQuery: "resource_type:workspace_proxy", Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for _, l := range logs.AuditLogs {
		count[string(l.Action)+" "+l.Outcome]++
		if l.Action == codersdk.AuditActionRegister && l.Outcome == codersdk.AuditOutcomeSuccess && l.ResourceTarget != "eu" {
			t.Errorf("register record: got target %q, want eu", l.ResourceTarget)
		}
	}
	// Registrations recorded: the first and the restart (replica-2); none
	// of the heartbeats, even the one that ended an unreachable spell.
	want := map[string]int{
		"create success": 2, "create failure": 6, // 2 by non-owners, 4 invalid or taken
		"register success": 2, "register failure": 6, // 4 bad tokens, 1 bad request, 1 after delete
		"deregister success": 2, "deregister failure": 1,
		"delete success": 1, "delete failure": 3, // 2 by non-owners, 1 twice
	}
	for k, v := range want {
		if count[k] != v {
			t.Errorf("audit records %q: got %d, want %d (all: %v)", k, count[k], v, count)
		}
	}
}
