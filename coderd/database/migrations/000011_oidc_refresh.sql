-- OIDC sessions end with the identity provider's (issue 32): the IdP's
-- refresh token, sealed with AES-GCM under a key derived from the
-- deployment's OIDC secret (never the plaintext; '' when the IdP gave
-- none), and the expiry of the IdP's access token (zero when unknown).
ALTER TABLE user_links ADD COLUMN oauth_refresh_token text NOT NULL DEFAULT '';
ALTER TABLE user_links ADD COLUMN oauth_expiry timestamptz NOT NULL DEFAULT '0001-01-01 00:00:00+00';
