-- Every change to who may do what is announced on coder_auth_changed with
-- the user's id when it commits, to every replica: a user's roles, status
-- or deletion, an API key's removal or new expiry or secret. Replicas that
-- trust a token they checked a moment ago (prepared relay connections)
-- check it again after any such change, wherever it was made (another
-- replica's API, or SQL by hand).
CREATE FUNCTION notify_auth_changed() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    who uuid;
BEGIN
    IF TG_TABLE_NAME = 'users' THEN
        IF TG_OP = 'DELETE' THEN who := OLD.id; ELSE who := NEW.id; END IF;
    ELSE
        IF TG_OP = 'DELETE' THEN who := OLD.user_id; ELSE who := NEW.user_id; END IF;
    END IF;
    PERFORM pg_notify('coder_auth_changed', who::text);
    RETURN NULL;
END
$$;

CREATE TRIGGER users_auth_changed AFTER UPDATE OF roles, status, deleted OR DELETE ON users
    FOR EACH ROW EXECUTE FUNCTION notify_auth_changed();
CREATE TRIGGER api_keys_auth_changed AFTER UPDATE OF hashed_secret, expires_at, user_id OR DELETE ON api_keys
    FOR EACH ROW EXECUTE FUNCTION notify_auth_changed();
