-- The health of each coder_app, as its agent last reported it (POST
-- /workspaceagents/me/app-health), with Coder's values: 'disabled' for an
-- app without a healthcheck, 'initializing' until its agent has decided,
-- then 'healthy' or 'unhealthy'. Apps stored before this migration that
-- carry a usable healthcheck start as 'initializing'.
ALTER TABLE workspace_apps
    ADD COLUMN health text NOT NULL DEFAULT 'disabled'
        CHECK (health IN ('disabled', 'initializing', 'healthy', 'unhealthy'));
UPDATE workspace_apps SET health = 'initializing'
    WHERE healthcheck IS NOT NULL
      AND coalesce(healthcheck->>'url', '') <> ''
      AND coalesce((healthcheck->>'interval')::integer, 0) > 0
      AND coalesce((healthcheck->>'threshold')::integer, 0) > 0;
