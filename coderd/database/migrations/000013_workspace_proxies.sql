-- Workspace proxies (issue 34): regions that serve workspace traffic near
-- the workspaces, registered with coderd but holding no database access.
--
-- A row is created by an owner (`coder wsproxy create`); the proxy itself
-- fills url, wildcard_hostname, version, the replica and its health report
-- when it registers, and refreshes last_heartbeat_at every heartbeat. The
-- times are coderd's clock, written by coderd, so a proxy's clock does not
-- matter.
--
-- token_hashed_secret is the SHA-256 of the secret half of the proxy's
-- token ("<id>:<secret>"), never the plaintext; coderd compares in constant
-- time. A deleted proxy keeps its row (deleted = true), so that its token is
-- refused with a message saying so, and its name can be reused.
CREATE TABLE workspace_proxies (
    id                  uuid PRIMARY KEY,
    name                text NOT NULL,
    display_name        text NOT NULL DEFAULT '',
    icon                text NOT NULL DEFAULT '',
    -- The proxy's access URL and wildcard hostname as it registered them;
    -- '' until it registers.
    url                 text NOT NULL DEFAULT '',
    wildcard_hostname   text NOT NULL DEFAULT '',
    token_hashed_secret bytea NOT NULL,
    -- The version, replica id and hostname of the last registration.
    version             text NOT NULL DEFAULT '',
    replica_id          text NOT NULL DEFAULT '',
    replica_hostname    text NOT NULL DEFAULT '',
    -- The proxy's own health report ({"errors": [...], "warnings": [...]})
    -- sent with its last registration.
    health_report       jsonb NOT NULL DEFAULT '{}',
    -- The first registration, and the last registration or heartbeat; NULL
    -- while the proxy never registered.
    registered_at       timestamptz,
    last_heartbeat_at   timestamptz,
    -- Set by a clean shutdown (deregister), cleared by the next
    -- registration.
    deregistered_at     timestamptz,
    created_at          timestamptz NOT NULL,
    updated_at          timestamptz NOT NULL,
    deleted             boolean NOT NULL DEFAULT false
);

-- Names are unique, case-insensitively, among proxies that are not deleted.
CREATE UNIQUE INDEX workspace_proxies_lower_name ON workspace_proxies (lower(name)) WHERE NOT deleted;
