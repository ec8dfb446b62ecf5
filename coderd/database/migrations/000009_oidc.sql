-- OpenID Connect sign-in (issue 32): how each user signs in, and the
-- identity provider account a user is linked to. A user is linked to at
-- most one account and an account to at most one user; the subject is the
-- ID token's "sub", unique per issuer.
ALTER TABLE users ADD COLUMN login_type text NOT NULL DEFAULT 'password';

CREATE TABLE user_links (
    user_id    uuid PRIMARY KEY REFERENCES users (id) ON DELETE CASCADE,
    login_type text NOT NULL,
    issuer     text NOT NULL,
    subject    text NOT NULL,
    created_at timestamptz NOT NULL,
    updated_at timestamptz NOT NULL,
    UNIQUE (issuer, subject)
);
