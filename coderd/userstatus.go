package coderd

import (
	"net/http"

	"github.com/gin-gonic/gin"

	"airgapcoder/coderd/database"
	"airgapcoder/codersdk"
)

// Suspending and activating users, as Coder does: PUT
// /api/v2/users/{user}/status/suspend and …/activate, owners only. A
// suspended user's keys stay in the database: authenticate refuses them on
// every request while the user is suspended, and they work again (until
// they expire) once the user is activated. Logins are refused after the
// password checked out (postLogin), so a wrong password never learns the
// account is suspended.

// putUserStatus sets the :user's status to status (database.UserStatus…).
// An owner cannot suspend themselves: someone must be left to activate
// users again.
func (api *API) putUserStatus(status string) handler {
	return func(c *gin.Context) error {
		e, u, err := api.auditUser(c, codersdk.AuditActionWrite)
		e.field("status", status)
		if err != nil {
			return err
		}
		e.field("previous_status", u.Status)
		if err := authorize(c, resUser, actUpdate, ""); err != nil {
			return err
		}
		if status == database.UserStatusSuspended && u.ID == actor(c).ID {
			return badRequest("You cannot suspend yourself; another owner can")
		}
		err = e.inTx(c.Request.Context(), http.StatusOK, func(tx *database.DB) error {
			u, err = tx.UpdateUserStatus(c.Request.Context(), u.ID, status)
			return err
		})
		api.authChanged() // here at once; other replicas hear the trigger's notification
		if err != nil {
			return notFoundAs("User "+c.Param("user"), err)
		}
		api.log.Info("user status changed", "username", u.Username, "status", u.Status, "by", actor(c).Username)
		c.JSON(http.StatusOK, api.convertUser(u))
		return nil
	}
}
