-- A key's name is unique among the keys that are not revoked: once a key is
-- revoked its name is free again, so `geotoll keys create -name demo` works
-- after `geotoll keys revoke -name demo` (the revoked key stays listed,
-- with its date). Revoking by name revokes the one active key of that name.
-- (IF EXISTS / IF NOT EXISTS: a database that had this change under another
-- migration number takes it again without error.)
-- +goose Up
ALTER TABLE geotoll.api_keys DROP CONSTRAINT IF EXISTS api_keys_name_key;
CREATE UNIQUE INDEX IF NOT EXISTS api_keys_active_name ON geotoll.api_keys (name) WHERE revoked_at IS NULL;

-- +goose Down
-- Fails while two keys share a name (one of them revoked): delete the
-- revoked ones first.
DROP INDEX geotoll.api_keys_active_name;
ALTER TABLE geotoll.api_keys ADD CONSTRAINT api_keys_name_key UNIQUE (name);
