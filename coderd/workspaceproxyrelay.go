package coderd

import "github.com/gin-gonic/gin"

// workspaceProxyRelayRoutes mounts a proxy's relay session and the calls
// proxies make about user connections (codersdk/workspaceproxyrelay.go).
func (api *API) workspaceProxyRelayRoutes(v2 *gin.RouterGroup) {}
