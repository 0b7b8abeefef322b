-- Serving storage that prepare has replaced but not dropped yet.
--
-- prepare builds every relation under a new name (its stable name and the
-- build transaction's id) and replaces the registry rows in the same
-- transaction, so a build never takes a lock a tile query waits for. The
-- relations the registry named before are listed here, with when they
-- stopped being served; servers that have not re-read the registry yet
-- still read them. A later prepare run drops those retired longer ago
-- than its -retain (10 minutes by default), and forgets them here.
--   relation    its table in geotoll_serving (unqualified)
--   layer       the layer it served
--   retired_at  when the registry stopped naming it (the switch, at the end
--               of the build that replaced it)
-- +goose Up
CREATE TABLE geotoll_serving.retired (
    relation   text        PRIMARY KEY,
    layer      text        NOT NULL,
    retired_at timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
-- +goose StatementBegin
DO $$
DECLARE r text;
BEGIN
    FOR r IN SELECT relation FROM geotoll_serving.retired LOOP
        EXECUTE format('DROP TABLE IF EXISTS geotoll_serving.%I', r);
    END LOOP;
END
$$;
-- +goose StatementEnd
DROP TABLE geotoll_serving.retired;
