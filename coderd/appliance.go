package coderd

import (
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"

	"airgapcoder/coderd/database"
	"airgapcoder/codersdk"
)

// appliance answers GET /api/v2/appliance (owners): what Options.Appliance
// says about the installed appliance, and how its newest upgrade ended
// according to the audit log (the appliance's journal, copied in at
// start). A plain `coder server` is no appliance: 404.
func (api *API) appliance(c *gin.Context) error {
	if err := authorize(c, resAppliance, actRead, ""); err != nil {
		return err
	}
	if api.opts.Appliance == nil {
		return notFound("Appliance information (this deployment is a plain coder server, not an appliance)")
	}
	ctx := c.Request.Context()
	a, err := api.opts.Appliance(ctx)
	if err != nil {
		return err
	}
	a.Manifest = nil // GET /api/v2/debug/appliance carries it
	if a.LastUpgrade, err = api.lastUpgrade(c); err != nil {
		return err
	}
	c.JSON(http.StatusOK, a)
	return nil
}

// lastUpgrade is the newest upgrade record and, when a rollback came after
// it, that rollback.
func (api *API) lastUpgrade(c *gin.Context) (*codersdk.ApplianceUpgrade, error) {
	// The appliance's own record (user agent "coder appliance …") says
	// from which release to which; the server's version record at start is
	// the fallback.
	newest := func(action codersdk.AuditAction) (*database.AuditLog, error) {
		rows, _, err := api.db.AuditLogs(c.Request.Context(), database.AuditLogFilter{
			Action: string(action), ResourceType: string(codersdk.AuditResourceDeployment), Limit: 10,
		})
		if err != nil || len(rows) == 0 {
			return nil, err
		}
		for i := range rows {
			if strings.HasPrefix(rows[i].UserAgent, "coder appliance") {
				return &rows[i], nil
			}
		}
		return &rows[0], nil
	}
	up, err := newest(codersdk.AuditActionUpgrade)
	if err != nil || up == nil {
		return nil, err
	}
	out := &codersdk.ApplianceUpgrade{Time: up.Time, Outcome: "succeeded", Description: up.Description}
	if !up.Success {
		out.Outcome = "failed"
	}
	rb, err := newest(codersdk.AuditActionRollback)
	if err != nil {
		return nil, err
	}
	if rb != nil && !rb.Time.Before(up.Time) {
		out.Outcome, out.Description = "rolled back", up.Description+"; "+rb.Description
	}
	return out, nil
}
