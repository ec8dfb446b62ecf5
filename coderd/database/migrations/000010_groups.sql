-- Groups and template access by group (issue 32), in Coder's shapes.
--
-- A group belongs to the organization; its source says who made it: 'user'
-- (an owner, through the API or CLI) or 'oidc' (created by the group sync
-- of an OIDC sign-in). The implicit "Everyone" group is not stored: its id
-- is the organization's and its members are every user (coderd/groups.go).
CREATE TABLE groups (
    id              uuid PRIMARY KEY,
    organization_id uuid NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    name            text NOT NULL,
    display_name    text NOT NULL DEFAULT '',
    source          text NOT NULL DEFAULT 'user' CHECK (source IN ('user', 'oidc')),
    created_at      timestamptz NOT NULL,
    updated_at      timestamptz NOT NULL
);
CREATE UNIQUE INDEX groups_name ON groups (organization_id, lower(name));

-- A membership's source says who added it: 'user' (PATCH add_users) or
-- 'oidc' (the group sync). The sync removes only its own memberships.
CREATE TABLE group_members (
    group_id   uuid NOT NULL REFERENCES groups (id) ON DELETE CASCADE,
    user_id    uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    source     text NOT NULL DEFAULT 'user' CHECK (source IN ('user', 'oidc')),
    created_at timestamptz NOT NULL,
    PRIMARY KEY (group_id, user_id)
);
CREATE INDEX group_members_user ON group_members (user_id);

-- Template ACLs as Coder keeps them: user id or group id -> role ('use' or
-- 'admin'). Every template so far was usable by everyone, and stays so:
-- the Everyone group (the organization's id) gets 'use'.
ALTER TABLE templates
    ADD COLUMN user_acl  jsonb NOT NULL DEFAULT '{}',
    ADD COLUMN group_acl jsonb NOT NULL DEFAULT '{}';
UPDATE templates SET group_acl = jsonb_build_object(organization_id::text, 'use');
