-- Workspace agents at run time: what an agent reports about itself (version,
-- resolved directory, listening ports) and its startup script output.

ALTER TABLE workspace_agents
    ADD COLUMN version            text NOT NULL DEFAULT '',
    ADD COLUMN expanded_directory text NOT NULL DEFAULT '',
    ADD COLUMN listening_ports    jsonb NOT NULL DEFAULT '[]',
    -- Bytes of startup script output stored so far; the cap keeps a chatty
    -- script from filling the database.
    ADD COLUMN logs_length        integer NOT NULL DEFAULT 0,
    ADD COLUMN logs_overflowed    boolean NOT NULL DEFAULT false,
    ADD COLUMN lifecycle_changed_at timestamptz;

CREATE TABLE workspace_agent_logs (
    id         bigserial PRIMARY KEY,
    agent_id   uuid NOT NULL REFERENCES workspace_agents (id) ON DELETE CASCADE,
    created_at timestamptz NOT NULL,
    level      text NOT NULL,
    output     text NOT NULL
);
CREATE INDEX workspace_agent_logs_agent ON workspace_agent_logs (agent_id, id);
