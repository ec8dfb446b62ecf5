package coderd

import (
	"net/http"

	"github.com/gin-gonic/gin"

	"airgapcoder/codersdk"
)

// setSessionCookie sets the dashboard's session cookie (maxAge < 0 clears
// it). It is always HttpOnly (scripts cannot read it) and SameSite=Lax (not
// sent with cross-site subrequests or form posts), and Secure whenever the
// deployment is reached over HTTPS: the request came over TLS, or the
// access URL is https (TLS ended by a proxy in front).
func (api *API) setSessionCookie(c *gin.Context, token string, maxAge int) {
	http.SetCookie(c.Writer, &http.Cookie{
		Name: codersdk.SessionTokenCookie, Value: token, Path: "/", MaxAge: maxAge,
		HttpOnly: true, SameSite: http.SameSiteLaxMode,
		Secure: c.Request.TLS != nil || api.opts.AccessURL.Scheme == "https",
	})
}
