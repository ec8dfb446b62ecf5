package coderd

import (
	"net/http"

	"github.com/gin-gonic/gin"

	"airgapcoder/coderd/replicasync"
	"airgapcoder/codersdk"
)

// replicas lists the live replicas of this deployment (owners only), read
// from the database so that every replica answers the same.
func (api *API) replicas(c *gin.Context) error {
	if err := authorize(c, resReplica, actRead, ""); err != nil {
		return err
	}
	maxAge := replicasync.DefaultMaxAge
	if api.opts.Replicas != nil {
		maxAge = api.opts.Replicas.MaxAge()
	}
	rs, err := api.db.LiveReplicas(c.Request.Context(), maxAge)
	if err != nil {
		return err
	}
	out := make([]codersdk.Replica, 0, len(rs))
	for _, r := range rs {
		out = append(out, codersdk.Replica{
			ID: r.ID, Hostname: r.Hostname, RelayAddress: r.RelayAddress, Version: r.Version,
			CreatedAt: r.StartedAt, LastHeartbeatAt: r.UpdatedAt,
		})
	}
	c.JSON(http.StatusOK, out)
	return nil
}
