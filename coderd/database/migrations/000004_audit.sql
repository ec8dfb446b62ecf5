-- The audit log: who did what to which resource, from where, and how it
-- ended. Rows are only ever inserted, and deleted by the retention loop
-- (--audit-retention); nothing updates them. They reference no other table:
-- a record outlives the user, workspace or template it names, so names are
-- stored as they were at the time.

CREATE TABLE audit_logs (
    id                uuid PRIMARY KEY,
    time              timestamptz NOT NULL,
    -- The actor: NULL and '' for anonymous requests (a failed login) and
    -- for the deployment itself.
    user_id           uuid,
    username          text NOT NULL DEFAULT '',
    -- The source address of the request (the TCP peer; no proxy header is
    -- trusted). NULL when there was no request.
    ip                inet,
    user_agent        text NOT NULL DEFAULT '',
    action            text NOT NULL,
    resource_type     text NOT NULL,
    resource_id       text NOT NULL DEFAULT '',
    -- The resource's name (a username, template or workspace name, the
    -- email a login tried).
    resource_target   text NOT NULL DEFAULT '',
    -- The workspace an action touched, for "who reached this workspace".
    workspace_owner   text NOT NULL DEFAULT '',
    workspace_name    text NOT NULL DEFAULT '',
    status_code       integer NOT NULL,
    success           boolean NOT NULL,
    additional_fields jsonb NOT NULL DEFAULT '{}',
    description       text NOT NULL DEFAULT ''
);
-- Newest first, and the retention loop's range.
CREATE INDEX audit_logs_time ON audit_logs (time DESC, id DESC);
CREATE INDEX audit_logs_user ON audit_logs (user_id, time DESC);
CREATE INDEX audit_logs_workspace ON audit_logs (lower(workspace_name), time DESC) WHERE workspace_name <> '';
