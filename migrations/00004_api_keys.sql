-- API keys. Only the SHA-256 of a key is stored; the key itself is shown
-- once, by `geotoll keys create`. geotoll_reader may read the hashes (the
-- server caches them in memory and refreshes in the background) and nothing
-- else of this table is writable by it.
-- +goose Up
CREATE TABLE geotoll.api_keys (
    id         bigserial PRIMARY KEY,
    name       text        NOT NULL UNIQUE CHECK (name ~ '^[A-Za-z0-9_.-]{1,64}$'),
    tier       text        NOT NULL CHECK (tier ~ '^[A-Za-z0-9_-]{1,32}$'),
    key_hash   bytea       NOT NULL UNIQUE CHECK (length(key_hash) = 32),
    key_prefix text        NOT NULL, -- first characters of the key, to recognise it in lists
    admin      boolean     NOT NULL DEFAULT false,
    created_at timestamptz NOT NULL DEFAULT now(),
    revoked_at timestamptz
);
GRANT SELECT ON geotoll.api_keys TO geotoll_reader;

-- +goose Down
DROP TABLE geotoll.api_keys;
