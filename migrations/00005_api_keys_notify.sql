-- Every change to the API keys (create, revoke, delete) notifies the channel
-- geotoll_api_keys when its transaction commits. Each server LISTENs on a
-- connection of its own and reloads its keys at once, so a new key works
-- and a revoked one is refused on every replica within moments; the
-- periodic reload (throttle.key_refresh) stays as the fallback for a lost
-- connection. The payload is empty: a notification only says "reload".
-- +goose Up
-- +goose StatementBegin
CREATE FUNCTION geotoll.api_keys_notify() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog
AS $$
BEGIN
    PERFORM pg_notify('geotoll_api_keys', '');
    RETURN NULL;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER api_keys_notify
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON geotoll.api_keys
    FOR EACH STATEMENT EXECUTE FUNCTION geotoll.api_keys_notify();

-- +goose Down
DROP TRIGGER api_keys_notify ON geotoll.api_keys;
DROP FUNCTION geotoll.api_keys_notify();
