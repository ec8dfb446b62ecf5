-- Template schedule defaults and dormancy (issue 35, as Coder's template
-- fields; 0 means off).
--
-- default_ttl_ms is the TTL a workspace created without one gets;
-- activity_bump_ms is how far activity moves a running workspace's
-- deadline (0: by its TTL); time_til_dormant_ms is how long a stopped
-- workspace may go unused before it is marked dormant;
-- time_til_dormant_autodelete_ms is how long a dormant workspace lives
-- before coderd deletes it.
ALTER TABLE templates
    ADD COLUMN default_ttl_ms                 bigint NOT NULL DEFAULT 0,
    ADD COLUMN activity_bump_ms               bigint NOT NULL DEFAULT 0,
    ADD COLUMN time_til_dormant_ms            bigint NOT NULL DEFAULT 0,
    ADD COLUMN time_til_dormant_autodelete_ms bigint NOT NULL DEFAULT 0;

-- dormant_at is when the workspace was marked dormant (NULL: not dormant);
-- deleting_at is when coderd deletes it (NULL: never), kept in step with
-- the template's time_til_dormant_autodelete_ms.
ALTER TABLE workspaces
    ADD COLUMN dormant_at  timestamptz,
    ADD COLUMN deleting_at timestamptz;

CREATE INDEX workspaces_dormant ON workspaces (deleting_at) WHERE dormant_at IS NOT NULL AND NOT deleted;
