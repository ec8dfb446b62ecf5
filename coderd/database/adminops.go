package database

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// DeleteUser soft-deletes a user (its username and email become free) and
// deletes its API keys, so that its sessions and tokens end at once.
func (db *DB) DeleteUser(ctx context.Context, id string) error {
	if err := db.execOne(ctx, `UPDATE users SET deleted = true, updated_at = $2 WHERE id = $1 AND NOT deleted`, id, db.now()); err != nil {
		return err
	}
	_, err := db.q().Exec(ctx, `DELETE FROM api_keys WHERE user_id = $1`, id)
	return mapErr(err)
}

// CountWorkspacesByOwner counts the workspaces a user owns that are not
// deleted.
func (db *DB) CountWorkspacesByOwner(ctx context.Context, ownerID string) (int64, error) {
	var n int64
	err := db.q().QueryRow(ctx, `SELECT count(*) FROM workspaces WHERE owner_id = $1 AND NOT deleted`, ownerID).Scan(&n)
	return n, mapErr(err)
}

// TemplateVersionsInUse returns the versions of a template that the latest
// build of one of its workspaces (not deleted) was built with.
func (db *DB) TemplateVersionsInUse(ctx context.Context, templateID string) (map[string]bool, error) {
	rows, err := db.q().Query(ctx, `SELECT DISTINCT b.template_version_id FROM workspaces w
		JOIN LATERAL (SELECT template_version_id FROM workspace_builds WHERE workspace_id = w.id ORDER BY build_number DESC LIMIT 1) b ON true
		WHERE w.template_id = $1 AND NOT w.deleted`, templateID)
	if err != nil {
		return nil, mapErr(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	out := map[string]bool{}
	for _, id := range ids {
		out[id] = true
	}
	return out, err
}

// SetTemplateVersionArchived archives (or unarchives) a template version.
func (db *DB) SetTemplateVersionArchived(ctx context.Context, versionID string, archived bool) error {
	return db.execOne(ctx, `UPDATE template_versions SET archived = $2, updated_at = $3 WHERE id = $1`, versionID, archived, db.now())
}
