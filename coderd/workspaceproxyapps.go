package coderd

import "github.com/gin-gonic/gin"

// workspaceProxyAppRoutes mounts the calls a proxy makes to serve dev URLs.
func (api *API) workspaceProxyAppRoutes(v2 *gin.RouterGroup) {}
