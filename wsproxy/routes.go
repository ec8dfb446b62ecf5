package wsproxy

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"airgapcoder/codersdk"
)

// routes is the proxy's HTTP surface. What it serves itself:
//
//	GET /healthz             200 "OK" once registered with the primary and while
//	                         the relay session is up, else 503
//	GET /healthz-report      the proxy's health report (codersdk.ProxyHealthReport)
//	GET /api/v2/buildinfo    the proxy's version, access URL and the dashboard's URL
//
// The relay (relay.go): agents' connections
// (/api/v2/workspaceagents/me/connect), users' connections
// (/api/v2/workspaceagents/{agent}/connect), and the agent API calls
// forwarded to the primary (forward.go). Dev URLs
// (/@{owner}/{workspace}/apps|ports/…) and subdomain apps (hosts under
// Options.WildcardAccessURL) are apps.go's.
//
// Every other /api/v2 path is a 404 naming the primary: the proxy serves no
// other API calls and no dashboard. Every other path is the dashboard's,
// which is redirected (307) to the same path on the primary.
func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", s.healthz)
	mux.HandleFunc("GET /healthz-report", s.healthzReport)
	mux.HandleFunc("GET /api/v2/buildinfo", s.buildInfo)
	s.relayRoutes(mux) // relay.go
	s.appRoutes(mux)   // apps.go
	mux.HandleFunc("/api/v2/", s.apiNotServed)
	mux.HandleFunc("/", s.redirectToPrimary)
	return s.byHost(mux)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) {
	if _, ok := s.registration(); !ok {
		http.Error(w, "not registered with the primary yet", http.StatusServiceUnavailable)
		return
	}
	if s.session() == nil {
		http.Error(w, "no relay session to the primary: connections through this proxy cannot reach agents elsewhere; use the primary", http.StatusServiceUnavailable)
		return
	}
	_, _ = w.Write([]byte("OK"))
}

func (s *Server) healthzReport(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, s.healthReport())
}

func (s *Server) buildInfo(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, codersdk.ProxyBuildInfo{
		BuildInfo:      codersdk.BuildInfo{Version: s.opts.Version, ExternalURL: s.opts.AccessURL.String()},
		WorkspaceProxy: true, DashboardURL: s.opts.PrimaryAccessURL.String(),
	})
}

func (s *Server) apiNotServed(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusNotFound, codersdk.Response{
		Message: fmt.Sprintf("Route %s is not served by a workspace proxy", r.URL.Path),
		Detail:  "Send API calls to the primary at " + s.opts.PrimaryAccessURL.String(),
	})
}

// redirectToPrimary sends the dashboard's paths to the primary. The
// target's host is always the primary's, whatever the path holds.
func (s *Server) redirectToPrimary(w http.ResponseWriter, r *http.Request) {
	u := *s.opts.PrimaryAccessURL
	u.Path = strings.TrimSuffix(u.Path, "/") + "/" + strings.TrimPrefix(r.URL.Path, "/")
	u.RawPath = ""
	u.RawQuery = r.URL.RawQuery
	http.Redirect(w, r, u.String(), http.StatusTemporaryRedirect)
}
