-- Storage is readable by the role prepare checked it for, and no other.
-- 00006 let geotoll_reader read every table created in geotoll_serving
-- by default; prepare grants each relation it builds to its read role
-- (prepare -reader-role, geotoll_reader unless told otherwise) after
-- checking that the role may read what it copies. Built for another role,
-- storage stayed readable by geotoll_reader, which was never checked and
-- may not read the table at all. Storage built before this migration
-- keeps its grants until prepare runs: it revokes geotoll_reader's from
-- storage of another read role that it finds current, and with the read
-- role's when it withdraws storage.
-- +goose Up
ALTER DEFAULT PRIVILEGES IN SCHEMA geotoll_serving REVOKE SELECT ON TABLES FROM geotoll_reader;

-- +goose Down
ALTER DEFAULT PRIVILEGES IN SCHEMA geotoll_serving GRANT SELECT ON TABLES TO geotoll_reader;
