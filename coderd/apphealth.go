package coderd

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"

	"github.com/gin-gonic/gin"

	"airgapcoder/coderd/database"
	"airgapcoder/codersdk"
)

// App health: a coder_app with a healthcheck starts "initializing" (set
// when the build's resources are stored); its agent checks it from inside
// the workspace and posts each change here (POST
// /workspaceagents/me/app-health, keyed by app ID, as in Coder). Users read
// the health with the app (WorkspaceApp.Health) in the workspace, its
// build and the agent, and so in `coder show` and the dashboard.
//
// Only the agent's own token reaches this endpoint (requireAgent), and it
// may set only its own apps: an ID that is not an app of the calling agent
// (another agent's, another workspace's, or none) refuses the whole request
// with 404, an app without a healthcheck or a value other than
// initializing, healthy or unhealthy with 400, and nothing is stored.

func (api *API) postAgentAppHealth(c *gin.Context) error {
	a := agentFrom(c)
	var req codersdk.PostWorkspaceAppHealthsRequest
	if err := decode(c, &req); err != nil {
		return err
	}
	if len(req.Healths) == 0 {
		return validation("healths", "name at least one app by its id")
	}
	ctx := c.Request.Context()
	apps, err := api.db.AgentAppsByAgentID(ctx, a.ID)
	if err != nil {
		return err
	}
	byID := make(map[string]database.App, len(apps))
	for _, app := range apps {
		byID[app.ID] = app
	}
	// Sorted, so that a refusal names the same app whatever the map's order.
	ids := make([]string, 0, len(req.Healths))
	for id := range req.Healths {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	changed := map[string]string{}
	for _, id := range ids {
		health := req.Healths[id]
		app, ok := byID[id]
		if !ok {
			return errorf(http.StatusNotFound, "", "App %q is not an app of this agent", id)
		}
		switch health {
		case codersdk.WorkspaceAppHealthInitializing, codersdk.WorkspaceAppHealthHealthy, codersdk.WorkspaceAppHealthUnhealthy:
		default:
			return validation("healths", fmt.Sprintf("app %s: health %q is not one of initializing, healthy, unhealthy", app.Slug, health))
		}
		if !appHealthcheckEnabled(app) {
			return validation("healths", fmt.Sprintf("app %s has no healthcheck", app.Slug))
		}
		if app.Health != health {
			changed[id] = health
		}
	}
	if len(changed) > 0 {
		if err := api.db.UpdateAppHealths(ctx, a.ID, changed); err != nil {
			if errors.Is(err, database.ErrNotFound) {
				// The agent's build was replaced while we looked.
				return errorf(http.StatusNotFound, "", "An app of this agent is gone")
			}
			return err
		}
		for id, health := range changed {
			api.log.Info("workspace app health", "agent", a.ID, "workspace", a.OwnerName+"/"+a.WorkspaceName,
				"app", byID[id].Slug, "from", byID[id].Health, "to", health)
		}
	}
	c.JSON(http.StatusOK, codersdk.Response{Message: "App health recorded"})
	return nil
}

// appHealthcheckEnabled reports whether a stored app has a healthcheck its
// agent runs.
func appHealthcheckEnabled(app database.App) bool {
	if len(app.Healthcheck) == 0 {
		return false
	}
	var hc codersdk.AppHealthcheck
	return json.Unmarshal(app.Healthcheck, &hc) == nil && hc.Enabled()
}
