package coderd

import (
	"context"
	"net/http"

	"github.com/gin-gonic/gin"

	"airgapcoder/coderd/database"
	"airgapcoder/codersdk"
)

// Workspace quotas, Coder's model: a group grants its members a quota
// allowance (credits a day), a user's budget is the sum over their groups
// (Everyone included), and a workspace whose latest build starts it costs
// the daily_cost of its template version's resources (coder_metadata).
// Quotas are off, every user unlimited, until some group has an allowance.
//
// Unlike Coder, which commits the cost when the provisioner applies, a
// start build over the budget is refused when it is asked for, before it
// is queued (docs/decisions.md).

// workspaceQuota serves GET /workspace-quota/:user.
func (api *API) workspaceQuota(c *gin.Context) error {
	u, err := api.userParam(c)
	if err != nil {
		return err
	}
	q, err := api.db.WorkspaceQuota(c.Request.Context(), api.org.ID, u.ID, "")
	if err != nil {
		return err
	}
	c.JSON(http.StatusOK, codersdk.WorkspaceQuota{CreditsConsumed: int(q.Consumed), Budget: int(q.Budget), Enabled: q.Enforced})
	return nil
}

// checkQuota refuses a start build of a workspace of ownerID on the
// template version versionID when it would take the owner over their
// budget. The workspace's own current cost is not counted twice. Called
// inside the transaction that queues the build: the owner stays locked
// until it commits.
func (api *API) checkQuota(ctx context.Context, tx *database.DB, ownerID, workspaceID, versionID string) error {
	q, err := tx.WorkspaceQuota(ctx, api.org.ID, ownerID, workspaceID)
	if err != nil || !q.Enforced {
		return err
	}
	cost, err := tx.TemplateVersionDailyCost(ctx, versionID)
	if err != nil || cost == 0 {
		return err
	}
	if q.Consumed+cost <= q.Budget {
		return nil
	}
	return errorf(http.StatusForbidden, "",
		"workspace quota exceeded: this build costs %d credits a day, you use %d of your budget %d (the sum of your groups' quota allowances); stop or delete a workspace or ask an owner to raise an allowance",
		cost, q.Consumed, q.Budget)
}

// maxQuotaAllowance bounds a group's quota allowance.
const maxQuotaAllowance = 1_000_000

// patchQuotaAllowance sets a group's quota allowance alone: the only change
// the Everyone group takes.
func (api *API) patchQuotaAllowance(c *gin.Context, e *auditEntry, g database.Group, allowance int) error {
	ctx := c.Request.Context()
	err := e.inTx(ctx, http.StatusOK, func(tx *database.DB) error {
		e.field("quota_allowance", allowance)
		return tx.SetQuotaAllowance(ctx, api.org.ID, g.ID, int32(allowance))
	})
	if err != nil {
		return err
	}
	return api.writeGroup(c, http.StatusOK, g)
}
