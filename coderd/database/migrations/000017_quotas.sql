-- Workspace quotas (issue 35), in Coder's model: a group grants its members
-- a quota allowance of credits a day; a user's budget is the sum of the
-- allowances of their groups, Everyone included. The Everyone group is not
-- stored (000010), so its allowance lives on the organization.
--
-- What a build costs is not a column of workspace_builds: it is the sum of
-- the daily_cost of its template version's resources (workspace_resources,
-- 000003), known once the version is imported, before any build starts.
ALTER TABLE groups ADD COLUMN quota_allowance integer NOT NULL DEFAULT 0 CHECK (quota_allowance >= 0);
ALTER TABLE organizations ADD COLUMN everyone_quota_allowance integer NOT NULL DEFAULT 0 CHECK (everyone_quota_allowance >= 0);
