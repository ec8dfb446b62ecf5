-- The control plane's first schema: deployment, users, organizations, API
-- keys, files, templates, provisioner daemons and jobs, workspaces, builds,
-- their resources, agents and apps.

CREATE TABLE deployment (
    key   text PRIMARY KEY,
    value text NOT NULL
);

CREATE TABLE organizations (
    id           uuid PRIMARY KEY,
    name         text NOT NULL UNIQUE,
    display_name text NOT NULL,
    is_default   boolean NOT NULL DEFAULT false,
    created_at   timestamptz NOT NULL,
    updated_at   timestamptz NOT NULL
);
CREATE UNIQUE INDEX organizations_one_default ON organizations (is_default) WHERE is_default;

CREATE TABLE users (
    id              uuid PRIMARY KEY,
    email           text NOT NULL,
    username        text NOT NULL,
    hashed_password bytea NOT NULL,
    roles           text[] NOT NULL DEFAULT '{}',
    status          text NOT NULL DEFAULT 'active',
    created_at      timestamptz NOT NULL,
    updated_at      timestamptz NOT NULL,
    last_seen_at    timestamptz NOT NULL,
    deleted         boolean NOT NULL DEFAULT false
);
CREATE UNIQUE INDEX users_email ON users (lower(email)) WHERE NOT deleted;
CREATE UNIQUE INDEX users_username ON users (lower(username)) WHERE NOT deleted;

CREATE TABLE organization_members (
    organization_id uuid NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    user_id         uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    created_at      timestamptz NOT NULL,
    PRIMARY KEY (organization_id, user_id)
);

CREATE TABLE api_keys (
    id               text PRIMARY KEY,
    hashed_secret    bytea NOT NULL,
    user_id          uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    login_type       text NOT NULL,
    token_name       text NOT NULL DEFAULT '',
    lifetime_seconds bigint NOT NULL,
    expires_at       timestamptz NOT NULL,
    created_at       timestamptz NOT NULL,
    last_used        timestamptz NOT NULL
);
CREATE INDEX api_keys_user ON api_keys (user_id);
CREATE UNIQUE INDEX api_keys_token_name ON api_keys (user_id, token_name) WHERE token_name <> '';

CREATE TABLE files (
    id         uuid PRIMARY KEY,
    hash       text NOT NULL,
    created_by uuid NOT NULL REFERENCES users (id),
    mimetype   text NOT NULL,
    data       bytea NOT NULL,
    created_at timestamptz NOT NULL
);
CREATE INDEX files_hash ON files (hash, created_by);

CREATE TABLE provisioner_daemons (
    id              uuid PRIMARY KEY,
    organization_id uuid NOT NULL REFERENCES organizations (id),
    name            text NOT NULL,
    version         text NOT NULL,
    tags            jsonb NOT NULL,
    created_at      timestamptz NOT NULL,
    last_seen_at    timestamptz NOT NULL
);
CREATE UNIQUE INDEX provisioner_daemons_name ON provisioner_daemons (organization_id, name, tags);

CREATE TABLE provisioner_jobs (
    id              uuid PRIMARY KEY,
    created_at      timestamptz NOT NULL,
    updated_at      timestamptz NOT NULL,
    started_at      timestamptz,
    completed_at    timestamptz,
    canceled_at     timestamptz,
    error           text NOT NULL DEFAULT '',
    error_code      text NOT NULL DEFAULT '',
    organization_id uuid NOT NULL REFERENCES organizations (id),
    initiator_id    uuid NOT NULL REFERENCES users (id),
    type            text NOT NULL,
    input           jsonb NOT NULL,
    tags            jsonb NOT NULL,
    file_id         uuid NOT NULL REFERENCES files (id),
    worker_id       uuid REFERENCES provisioner_daemons (id) ON DELETE SET NULL
);
-- The queue: pending jobs in order.
CREATE INDEX provisioner_jobs_pending ON provisioner_jobs (created_at)
    WHERE started_at IS NULL AND canceled_at IS NULL AND completed_at IS NULL;
-- The heartbeat reaper: running jobs.
CREATE INDEX provisioner_jobs_running ON provisioner_jobs (updated_at)
    WHERE started_at IS NOT NULL AND completed_at IS NULL;

CREATE TABLE provisioner_job_logs (
    id         bigserial PRIMARY KEY,
    job_id     uuid NOT NULL REFERENCES provisioner_jobs (id) ON DELETE CASCADE,
    created_at timestamptz NOT NULL,
    source     text NOT NULL,
    level      text NOT NULL,
    stage      text NOT NULL,
    output     text NOT NULL
);
CREATE INDEX provisioner_job_logs_job ON provisioner_job_logs (job_id, id);

CREATE TABLE templates (
    id                uuid PRIMARY KEY,
    organization_id   uuid NOT NULL REFERENCES organizations (id),
    name              text NOT NULL,
    display_name      text NOT NULL DEFAULT '',
    description       text NOT NULL DEFAULT '',
    active_version_id uuid NOT NULL,
    created_by        uuid NOT NULL REFERENCES users (id),
    created_at        timestamptz NOT NULL,
    updated_at        timestamptz NOT NULL,
    deleted           boolean NOT NULL DEFAULT false
);
CREATE UNIQUE INDEX templates_name ON templates (organization_id, lower(name)) WHERE NOT deleted;

CREATE TABLE template_versions (
    id              uuid PRIMARY KEY,
    template_id     uuid REFERENCES templates (id),
    organization_id uuid NOT NULL REFERENCES organizations (id),
    name            text NOT NULL,
    message         text NOT NULL DEFAULT '',
    job_id          uuid NOT NULL UNIQUE REFERENCES provisioner_jobs (id),
    created_by      uuid NOT NULL REFERENCES users (id),
    parameters      jsonb NOT NULL DEFAULT '[]',
    created_at      timestamptz NOT NULL,
    updated_at      timestamptz NOT NULL
);
CREATE INDEX template_versions_template ON template_versions (template_id, created_at);

CREATE TABLE workspaces (
    id              uuid PRIMARY KEY,
    organization_id uuid NOT NULL REFERENCES organizations (id),
    owner_id        uuid NOT NULL REFERENCES users (id),
    template_id     uuid NOT NULL REFERENCES templates (id),
    name            text NOT NULL,
    created_at      timestamptz NOT NULL,
    updated_at      timestamptz NOT NULL,
    deleted         boolean NOT NULL DEFAULT false
);
CREATE UNIQUE INDEX workspaces_owner_name ON workspaces (owner_id, lower(name)) WHERE NOT deleted;
CREATE INDEX workspaces_template ON workspaces (template_id) WHERE NOT deleted;

CREATE TABLE workspace_builds (
    id                    uuid PRIMARY KEY,
    workspace_id          uuid NOT NULL REFERENCES workspaces (id),
    template_version_id   uuid NOT NULL REFERENCES template_versions (id),
    build_number          integer NOT NULL,
    transition            text NOT NULL,
    initiator_id          uuid NOT NULL REFERENCES users (id),
    job_id                uuid NOT NULL UNIQUE REFERENCES provisioner_jobs (id),
    provisioner_state     bytea,
    rich_parameter_values jsonb NOT NULL DEFAULT '[]',
    reason                text NOT NULL DEFAULT 'initiator',
    created_at            timestamptz NOT NULL,
    updated_at            timestamptz NOT NULL,
    UNIQUE (workspace_id, build_number)
);

CREATE TABLE workspace_resources (
    id         uuid PRIMARY KEY,
    job_id     uuid NOT NULL REFERENCES provisioner_jobs (id) ON DELETE CASCADE,
    transition text NOT NULL,
    type       text NOT NULL,
    name       text NOT NULL,
    created_at timestamptz NOT NULL
);
CREATE INDEX workspace_resources_job ON workspace_resources (job_id);

CREATE TABLE workspace_agents (
    id               uuid PRIMARY KEY,
    resource_id      uuid NOT NULL REFERENCES workspace_resources (id) ON DELETE CASCADE,
    name             text NOT NULL,
    auth_token       uuid NOT NULL,
    operating_system text NOT NULL,
    architecture     text NOT NULL,
    directory        text NOT NULL DEFAULT '',
    startup_script   text NOT NULL DEFAULT '',
    env              jsonb NOT NULL DEFAULT '{}',
    lifecycle_state  text NOT NULL DEFAULT 'created',
    connection_timeout_seconds integer NOT NULL DEFAULT 120,
    created_at       timestamptz NOT NULL,
    first_connected_at timestamptz,
    last_connected_at  timestamptz,
    disconnected_at    timestamptz
);
CREATE INDEX workspace_agents_resource ON workspace_agents (resource_id);
-- A template's agent keeps its token across builds: look up the newest.
CREATE INDEX workspace_agents_token ON workspace_agents (auth_token, created_at DESC);

CREATE TABLE workspace_apps (
    id           uuid PRIMARY KEY,
    agent_id     uuid NOT NULL REFERENCES workspace_agents (id) ON DELETE CASCADE,
    slug         text NOT NULL,
    display_name text NOT NULL DEFAULT '',
    url          text NOT NULL DEFAULT '',
    port         integer NOT NULL DEFAULT 0,
    share        text NOT NULL DEFAULT 'owner',
    created_at   timestamptz NOT NULL,
    UNIQUE (agent_id, slug)
);
