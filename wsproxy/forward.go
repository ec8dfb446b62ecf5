package wsproxy

import (
	"net/http"
	"net/http/httputil"

	"airgapcoder/codersdk"
)

// Agent API forwarding. An agent whose CODER_AGENT_URL is the proxy's
// access URL sends all its calls here, not only its relay connection; the
// proxy passes these, and nothing else, to the primary unchanged (the
// agent's token included: the primary authenticates it), adding
// X-Forwarded-For/-Host/-Proto. The agent binary the init script
// downloads (${ACCESS_URL}bin/coder-<os>-<arch>, provisionerd/agentscript.go)
// comes the same way. Every other API path is answered by routes.go (404
// naming the primary).

// forwardedAgentCalls are the agent API calls forwarded to the primary,
// as the agent's client makes them (codersdk/agents.go,
// codersdk/externalauth.go) and coderd serves them (docs/relay.md, "The
// agent's side").
var forwardedAgentCalls = []string{
	"GET /api/v2/workspaceagents/me/manifest",
	"POST /api/v2/workspaceagents/me/startup",
	"POST /api/v2/workspaceagents/me/lifecycle",
	"POST /api/v2/workspaceagents/me/logs",
	"POST /api/v2/workspaceagents/me/metadata",
	"POST /api/v2/workspaceagents/me/ports",
	"POST /api/v2/workspaceagents/me/app-health",
	"GET /api/v2/workspaceagents/me/external-auth",
	// The agent binary of the init script (GET; HEAD is matched by GET).
	"GET /bin/{name}",
}

// forwardRoutes mounts forwardedAgentCalls.
func (s *Server) forwardRoutes(mux *http.ServeMux) {
	transport := s.opts.HTTPClient.Transport
	if transport == nil {
		transport = http.DefaultTransport
	}
	primary := s.opts.PrimaryAccessURL
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(primary)
			pr.SetXForwarded()
		},
		Transport: transport,
		// Streamed answers (a long-polled external auth token, a binary)
		// go on as they come.
		FlushInterval: -1,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			s.log.Warn("forward an agent API call to the primary failed", "method", r.Method, "path", r.URL.Path, "remote", r.RemoteAddr, "err", err)
			writeJSON(w, http.StatusBadGateway, codersdk.Response{
				Message: "This workspace proxy could not reach the primary to forward the call; the agent retries",
				Detail:  err.Error(),
			})
		},
	}
	for _, pattern := range forwardedAgentCalls {
		mux.Handle(pattern, rp)
	}
}
