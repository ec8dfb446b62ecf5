-- Workspace schedules (issue 35): autostop after a TTL, extended by
-- activity, and a weekly autostart schedule, as in Coder.
--
-- ttl_ms is how long a start build runs before coderd stops it (NULL:
-- until stopped by hand). autostart_schedule is a Coder cron line
-- ("CRON_TZ=Europe/Berlin 30 9 * * 1-5"; '' for none);
-- autostart_schedule_set_at is when it last changed, so that an occurrence
-- from before it was set never starts the workspace. last_used_at is the
-- last activity the relay saw (zero: never).
ALTER TABLE workspaces
    ADD COLUMN ttl_ms                    bigint,
    ADD COLUMN autostart_schedule        text NOT NULL DEFAULT '',
    ADD COLUMN autostart_schedule_set_at timestamptz NOT NULL DEFAULT '0001-01-01 00:00:00+00',
    ADD COLUMN last_used_at              timestamptz NOT NULL DEFAULT '0001-01-01 00:00:00+00';

-- deadline is when the lifecycle scheduler stops a start build; the zero
-- time means none (a stop or delete build, or a workspace without a TTL).
ALTER TABLE workspace_builds
    ADD COLUMN deadline timestamptz NOT NULL DEFAULT '0001-01-01 00:00:00+00';

-- The scheduler's candidates: running workspaces with a deadline, and
-- workspaces with an autostart schedule.
CREATE INDEX workspace_builds_deadline ON workspace_builds (deadline) WHERE deadline > '0001-01-01 00:00:00+00';
CREATE INDEX workspaces_autostart ON workspaces (id) WHERE autostart_schedule <> '' AND NOT deleted;
