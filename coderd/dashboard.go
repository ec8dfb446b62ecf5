package coderd

import (
	"net/http"

	"github.com/gin-gonic/gin"

	"airgapcoder/coderd/site"
)

// dashboard is middleware that serves the web dashboard (package site) for
// the paths it owns and passes every other request on. The site reads and
// writes only through the API handler, in process.
func (api *API) dashboard() gin.HandlerFunc {
	h, err := site.New(site.Options{
		API:    http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { api.router.ServeHTTP(w, r) }),
		Logger: api.log, AppHosts: api.appHostsCSP(), ProxyHosts: api.proxyHostsCSP, // workspaceproxyapps.go
	})
	if err != nil {
		// The templates are embedded: this is a build defect, caught by tests.
		panic(err)
	}
	return func(c *gin.Context) {
		if !site.Owns(c.Request.URL.Path) {
			c.Next()
			return
		}
		h.ServeHTTP(c.Writer, c.Request)
		c.Abort()
	}
}
