-- Templates on the official coder/coder Terraform provider: template
-- variables and workspace tags of a version, coder_metadata of resources,
-- the agent's scripts, metadata, display apps and the rest of its block,
-- every coder_app field, latest agent metadata results, the script a log
-- line came from, users' full names and SSH key pairs.

-- Users: a full name (coder_workspace_owner.full_name), empty by default.
ALTER TABLE users ADD COLUMN name text NOT NULL DEFAULT '';

-- One ed25519 key pair per user (coder_workspace_owner.ssh_public_key and
-- ssh_private_key), generated on first need as Coder's gitsshkey is.
CREATE TABLE user_ssh_keys (
    user_id     uuid PRIMARY KEY REFERENCES users (id) ON DELETE CASCADE,
    -- An authorized_keys line.
    public_key  text NOT NULL,
    -- PEM, OpenSSH format.
    private_key text NOT NULL,
    created_at  timestamptz NOT NULL,
    updated_at  timestamptz NOT NULL
);

-- Template versions: the variable values given at creation (sent to every
-- job of the version), the variables the import found (with the value each
-- build uses) and the coder_workspace_tags entries as HCL source text.
-- Each column is a JSON array of the codersdk type named.
ALTER TABLE template_versions
    ADD COLUMN user_variable_values jsonb NOT NULL DEFAULT '[]', -- VariableValue
    ADD COLUMN variables            jsonb NOT NULL DEFAULT '[]', -- TemplateVersionVariable
    ADD COLUMN workspace_tags       jsonb NOT NULL DEFAULT '[]'; -- WorkspaceTagExpression

-- Resources: what a coder_metadata says about them. metadata is a JSON
-- array of codersdk.WorkspaceResourceMetadata; sensitive values are stored
-- but never returned by the API.
ALTER TABLE workspace_resources
    ADD COLUMN hide       boolean NOT NULL DEFAULT false,
    ADD COLUMN icon       text    NOT NULL DEFAULT '',
    ADD COLUMN daily_cost integer NOT NULL DEFAULT 0,
    ADD COLUMN metadata   jsonb   NOT NULL DEFAULT '[]';

-- Agents: scripts (JSON array of codersdk.AgentScript) replace the startup
-- script, which becomes the script Coder calls "Startup Script"; metadata
-- holds the descriptions (JSON array of codersdk.AgentMetadataDescription),
-- their latest results live in workspace_agent_metadata.
ALTER TABLE workspace_agents
    ADD COLUMN scripts             jsonb   NOT NULL DEFAULT '[]',
    ADD COLUMN metadata            jsonb   NOT NULL DEFAULT '[]',
    ADD COLUMN display_apps        jsonb,  -- codersdk.DisplayApps; NULL when the template sets none
    ADD COLUMN troubleshooting_url text    NOT NULL DEFAULT '',
    ADD COLUMN motd_file           text    NOT NULL DEFAULT '',
    ADD COLUMN display_order       integer NOT NULL DEFAULT 0;

UPDATE workspace_agents SET scripts = jsonb_build_array(jsonb_build_object(
        'log_source_id', gen_random_uuid()::text,
        'display_name', 'Startup Script',
        'script', startup_script,
        'run_on_start', true,
        'run_on_stop', false,
        'start_blocks_login', false,
        'timeout_seconds', 0))
    WHERE startup_script <> '';
ALTER TABLE workspace_agents DROP COLUMN startup_script;

-- Apps: every field of a coder_app.
ALTER TABLE workspace_apps
    ADD COLUMN command       text    NOT NULL DEFAULT '',
    ADD COLUMN icon          text    NOT NULL DEFAULT '',
    ADD COLUMN subdomain     boolean NOT NULL DEFAULT false,
    ADD COLUMN external      boolean NOT NULL DEFAULT false,
    ADD COLUMN healthcheck   jsonb,  -- codersdk.AppHealthcheck; NULL for none
    ADD COLUMN app_group     text    NOT NULL DEFAULT '',
    ADD COLUMN display_order integer NOT NULL DEFAULT 0,
    ADD COLUMN hidden        boolean NOT NULL DEFAULT false,
    ADD COLUMN open_in       text    NOT NULL DEFAULT '',
    ADD COLUMN tooltip       text    NOT NULL DEFAULT '';

-- The latest result of each metadata key an agent reported.
CREATE TABLE workspace_agent_metadata (
    agent_id     uuid NOT NULL REFERENCES workspace_agents (id) ON DELETE CASCADE,
    key          text NOT NULL,
    value        text NOT NULL DEFAULT '',
    error        text NOT NULL DEFAULT '',
    collected_at timestamptz NOT NULL,
    PRIMARY KEY (agent_id, key)
);

-- The display name of the script that wrote a line ('' for the agent).
ALTER TABLE workspace_agent_logs ADD COLUMN source text NOT NULL DEFAULT '';
