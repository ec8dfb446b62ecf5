package coderd

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"airgapcoder/coderd/auditjournal"
	"airgapcoder/coderd/codersdk"
	"airgapcoder/coderd/database"
)

// Reading the audit log (owners only), its retention, and the record of a
// deployment starting on a new version.

const (
	auditDefaultLimit = 100
	auditMaxLimit     = 1000
)

func (api *API) convertAuditLog(l database.AuditLog) codersdk.AuditLog {
	out := codersdk.AuditLog{
		ID: l.ID, Time: l.Time, IP: l.IP, UserAgent: l.UserAgent, ResourceType: codersdk.AuditResourceType(l.ResourceType),
		ResourceID: l.ResourceID, ResourceTarget: l.ResourceTarget, Action: codersdk.AuditAction(l.Action), StatusCode: l.StatusCode,
		Outcome: codersdk.AuditOutcomeFailure, AdditionalFields: json.RawMessage(l.AdditionalFields), Description: l.Description,
		WorkspaceOwner: l.WorkspaceOwner, WorkspaceName: l.WorkspaceName, OrganizationID: api.org.ID,
	}
	if l.Success {
		out.Outcome = codersdk.AuditOutcomeSuccess
	}
	if l.UserID != "" {
		out.User = &codersdk.MinimalUser{ID: l.UserID, Username: l.Username}
	}
	return out
}

// auditLogs answers GET /api/v2/audit?q=...&limit=&offset=, newest first.
func (api *API) auditLogs(c *gin.Context) error {
	if err := authorize(c, resAuditLog, actRead, ""); err != nil {
		return err
	}
	f, err := parseAuditQuery(c.Query("q"))
	if err != nil {
		return err
	}
	f.Limit = auditDefaultLimit
	for _, p := range []struct {
		name string
		dst  *int
	}{{"limit", &f.Limit}, {"offset", &f.Offset}} {
		if s := c.Query(p.name); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n < 0 {
				return validation(p.name, "must be a non-negative integer")
			}
			*p.dst = n
		}
	}
	if f.Limit == 0 || f.Limit > auditMaxLimit {
		return validation("limit", fmt.Sprintf("must be between 1 and %d", auditMaxLimit))
	}
	logs, count, err := api.db.AuditLogs(c.Request.Context(), f)
	if err != nil {
		return err
	}
	out := codersdk.AuditLogResponse{AuditLogs: make([]codersdk.AuditLog, 0, len(logs)), Count: count}
	for _, l := range logs {
		out.AuditLogs = append(out.AuditLogs, api.convertAuditLog(l))
	}
	c.JSON(http.StatusOK, out)
	return nil
}

// parseAuditQuery reads q: space-separated key:value terms.
func parseAuditQuery(q string) (database.AuditLogFilter, error) {
	var f database.AuditLogFilter
	for _, term := range strings.Fields(q) {
		key, val, ok := strings.Cut(term, ":")
		if !ok || val == "" {
			return f, validation("q", fmt.Sprintf("%q is not a key:value term; keys are username, action, resource_type, workspace, outcome, since, until", term))
		}
		switch key {
		case "username", "user":
			f.Username = val
		case "action":
			f.Action = val
		case "resource_type":
			f.ResourceType = val
		case "workspace":
			if owner, name, ok := strings.Cut(val, "/"); ok {
				f.WorkspaceOwner, f.WorkspaceName = owner, name
			} else {
				f.WorkspaceName = val
			}
		case "outcome":
			switch val {
			case codersdk.AuditOutcomeSuccess, codersdk.AuditOutcomeFailure:
				ok := val == codersdk.AuditOutcomeSuccess
				f.Success = &ok
			default:
				return f, validation("q", fmt.Sprintf("outcome must be success or failure, got %q", val))
			}
		case "since", "until":
			t, err := parseAuditTime(val)
			if err != nil {
				return f, validation("q", fmt.Sprintf("%s: %v", key, err))
			}
			if key == "since" {
				f.Since = t
			} else {
				f.Until = t
			}
		default:
			return f, validation("q", fmt.Sprintf("unknown filter %q; keys are username, action, resource_type, workspace, outcome, since, until", key))
		}
	}
	return f, nil
}

// parseAuditTime reads an RFC 3339 time or a date (midnight UTC).
func parseAuditTime(s string) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	if t, err := time.Parse(time.DateOnly, s); err == nil {
		return t, nil
	}
	return time.Time{}, fmt.Errorf("%q is neither an RFC 3339 time (2006-01-02T15:04:05Z07:00) nor a date (2006-01-02)", s)
}

// deleteOldAuditLogs applies the retention (AuditRetention > 0).
func (api *API) deleteOldAuditLogs(ctx context.Context) {
	before := api.now().Add(-api.opts.AuditRetention)
	n, err := api.db.DeleteAuditLogsBefore(ctx, before)
	if err != nil {
		if ctx.Err() == nil {
			api.log.Error("apply audit retention", "err", err)
		}
		return
	}
	if n > 0 {
		api.log.Info("deleted audit records past retention", "count", n, "before", before.Format(time.RFC3339), "retention", api.opts.AuditRetention)
	}
}

// auditRetentionInterval is how often old records are deleted.
const auditRetentionInterval = time.Hour

// deploymentVersionKey holds the version the deployment last started with.
const deploymentVersionKey = "last_started_version"

// recordVersion records the deployment starting on a version other than the
// one it last ran: its install (first start), or an upgrade or rollback.
// Replicas starting together write one record.
func (api *API) recordVersion(ctx context.Context) {
	v := api.opts.Version
	if v == "" {
		return
	}
	err := api.db.InTx(ctx, func(tx *database.DB) error {
		previous, changed, err := tx.SwapDeploymentValue(ctx, deploymentVersionKey, v)
		if err != nil || !changed {
			return err
		}
		row := database.AuditLog{
			Action: string(codersdk.AuditActionUpgrade), ResourceType: string(codersdk.AuditResourceDeployment), ResourceTarget: v,
			StatusCode: http.StatusOK, Success: true, Description: fmt.Sprintf("server started version %s (previous %s)", v, previous),
		}
		if previous == "" {
			row.Action, row.Description = string(codersdk.AuditActionInstall), "server started version "+v+" (first start)"
		}
		row.AdditionalFields, _ = json.Marshal(map[string]string{"version": v, "previous_version": previous})
		_, err = tx.InsertAuditLog(ctx, row)
		return err
	})
	if err != nil && ctx.Err() == nil {
		api.log.Error("record the server version in the audit log", "version", v, "err", err)
	}
}

// ingestAuditJournal copies the audit journal's new records (what the
// appliance did while the server was down) into the audit log.
func (api *API) ingestAuditJournal(ctx context.Context) {
	if api.opts.AuditJournal == "" {
		return
	}
	n, err := auditjournal.Ingest(ctx, api.db, api.opts.AuditJournal, api.log)
	if err != nil {
		if ctx.Err() == nil {
			api.log.Error("copy the audit journal into the audit log", "err", err)
		}
		return
	}
	if n > 0 {
		api.log.Info("copied audit journal records into the audit log", "count", n, "journal", api.opts.AuditJournal)
	}
}
