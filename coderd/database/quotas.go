package database

import (
	"context"
)

// Workspace quotas (000017): a group's quota_allowance, the Everyone
// group's on its organization (whose id is Everyone's), a user's budget and
// what their workspaces consume, all in credits a day.

// QuotaAllowances returns the quota allowance of every group of the
// organization with one, keyed by group id; the Everyone group's is keyed
// by the organization's id.
func (db *DB) QuotaAllowances(ctx context.Context, organizationID string) (map[string]int32, error) {
	type allowance struct {
		ID        string `db:"id"`
		Allowance int32  `db:"quota_allowance"`
	}
	list, err := collectAll[allowance](db.q().Query(ctx, `SELECT id, quota_allowance FROM groups WHERE organization_id = $1 AND quota_allowance > 0
		UNION ALL SELECT id, everyone_quota_allowance FROM organizations WHERE id = $1 AND everyone_quota_allowance > 0`, organizationID))
	if err != nil {
		return nil, err
	}
	out := map[string]int32{}
	for _, a := range list {
		out[a.ID] = a.Allowance
	}
	return out, nil
}

// SetQuotaAllowance sets a group's quota allowance; groupID equal to
// organizationID sets the Everyone group's. A group that does not exist is
// ErrNotFound.
func (db *DB) SetQuotaAllowance(ctx context.Context, organizationID, groupID string, allowance int32) error {
	query := `UPDATE groups SET quota_allowance = $3, updated_at = now() WHERE organization_id = $1 AND id = $2`
	if groupID == organizationID {
		query = `UPDATE organizations SET everyone_quota_allowance = $3 WHERE id = $1 AND id = $2`
	}
	return db.execOne(ctx, query, organizationID, groupID, allowance)
}

// Quota is a user's workspace quota in credits a day.
type Quota struct {
	// Budget is the sum of the quota allowances of the user's groups,
	// Everyone included.
	Budget int64 `db:"budget"`
	// Consumed is what the user's workspaces cost whose latest build starts
	// them (queued, running or done): the daily_cost of the build's
	// template version's resources.
	Consumed int64 `db:"consumed"`
	// Enforced reports whether any group of the organization has an
	// allowance; quotas are off (unlimited) until one has.
	Enforced bool `db:"enforced"`
}

// WorkspaceQuota returns a user's quota; the workspace excludeWorkspaceID
// (empty for none) is left out of Consumed. Inside a transaction, it first
// takes a lock on the user for the rest of the transaction, so that two
// builds of one user are checked one after the other.
func (db *DB) WorkspaceQuota(ctx context.Context, organizationID, userID, excludeWorkspaceID string) (Quota, error) {
	if db.tx != nil {
		if _, err := db.q().Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('workspace-quota:' || $1::text))`, userID); err != nil {
			return Quota{}, err
		}
	}
	return collectOne[Quota](db.q().Query(ctx, `SELECT
		(SELECT everyone_quota_allowance FROM organizations WHERE id = $1)
			+ COALESCE((SELECT sum(g.quota_allowance) FROM groups g JOIN group_members m ON m.group_id = g.id
				WHERE g.organization_id = $1 AND m.user_id = $2), 0) AS budget,
		COALESCE((SELECT sum(r.daily_cost)
			FROM workspaces w
			JOIN LATERAL (SELECT b.template_version_id, b.transition FROM workspace_builds b
				WHERE b.workspace_id = w.id ORDER BY b.build_number DESC LIMIT 1) lb ON lb.transition = 'start'
			JOIN template_versions v ON v.id = lb.template_version_id
			JOIN workspace_resources r ON r.job_id = v.job_id AND r.transition = 'start'
			WHERE w.organization_id = $1 AND w.owner_id = $2 AND NOT w.deleted AND w.id::text <> $3), 0) AS consumed,
		(SELECT everyone_quota_allowance > 0 FROM organizations WHERE id = $1)
			OR EXISTS (SELECT 1 FROM groups WHERE organization_id = $1 AND quota_allowance > 0) AS enforced`,
		organizationID, userID, excludeWorkspaceID))
}

// TemplateVersionDailyCost is what a workspace built from the version costs
// a day: the sum of the daily_cost of the resources its import found.
func (db *DB) TemplateVersionDailyCost(ctx context.Context, versionID string) (int64, error) {
	var cost int64
	err := db.q().QueryRow(ctx, `SELECT COALESCE(sum(r.daily_cost), 0) FROM template_versions v
		JOIN workspace_resources r ON r.job_id = v.job_id AND r.transition = 'start' WHERE v.id = $1`, versionID).Scan(&cost)
	return cost, mapErr(err)
}
