-- External auth (issue 33): each user's link to a deployment's external
-- auth provider (an OAuth2 application on the site's Git server, say), and
-- the providers a template version declares.
--
-- The access and refresh tokens are sealed by coderd with AES-GCM under a
-- key derived from a deployment secret (never the plaintext; '' when the
-- provider gave no refresh token). provider_id names a provider of the
-- configuration, not a row: a provider removed from the configuration
-- leaves its links unused.
CREATE TABLE external_auth_links (
    user_id             uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    provider_id         text NOT NULL,
    oauth_access_token  text NOT NULL,
    oauth_refresh_token text NOT NULL DEFAULT '',
    -- When the access token expires; zero when the provider did not say
    -- (the token is then used until the provider refuses it).
    oauth_expiry        timestamptz NOT NULL DEFAULT '0001-01-01 00:00:00+00',
    -- The token response's fields the provider's EXTRA_TOKEN_KEYS name.
    oauth_extra         jsonb NOT NULL DEFAULT '{}',
    created_at          timestamptz NOT NULL,
    updated_at          timestamptz NOT NULL,
    PRIMARY KEY (user_id, provider_id)
);

-- The template's data "coder_external_auth" blocks, as its import found
-- them: a JSON array of {id, optional}.
ALTER TABLE template_versions ADD COLUMN external_auth_providers jsonb NOT NULL DEFAULT '[]';
