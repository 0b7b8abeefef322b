-- Fence revisions, the validators of the fence admin's ETags.
--
-- geotoll.geofences.revision is the number of the write that last changed
-- the fence, drawn from geotoll.geofence_revision_seq by a trigger before
-- every insert and update, whatever the writer sent (an UPDATE that sets
-- the same values is still a write: updated_at moves). So a fence's
-- revision changes on every write and only then, no two writes share one,
-- and a fence deleted and created anew never shows an old revision again.
-- The fence admin sends it as the fence's ETag ("<revision>") and checks
-- If-Match against it under the row's lock, in the write's transaction;
-- being in the database, it is the same on every replica.
--
-- Existing fences get a revision each here (the table is rewritten: the
-- default is volatile). geotoll_fence_writer draws revisions through its
-- own writes, so it may use the sequence (as it may geofences_id_seq).
-- +goose Up
CREATE SEQUENCE geotoll.geofence_revision_seq AS bigint;
ALTER TABLE geotoll.geofences
    ADD COLUMN revision bigint NOT NULL DEFAULT nextval('geotoll.geofence_revision_seq');
ALTER SEQUENCE geotoll.geofence_revision_seq OWNED BY geotoll.geofences.revision;

-- +goose StatementBegin
CREATE FUNCTION geotoll.geofence_revise() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    NEW.revision := nextval('geotoll.geofence_revision_seq');
    RETURN NEW;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER geofences_revise
    BEFORE INSERT OR UPDATE ON geotoll.geofences
    FOR EACH ROW EXECUTE FUNCTION geotoll.geofence_revise();

GRANT USAGE ON SEQUENCE geotoll.geofence_revision_seq TO geotoll_fence_writer;

-- +goose Down
DROP TRIGGER geofences_revise ON geotoll.geofences;
DROP FUNCTION geotoll.geofence_revise();
ALTER TABLE geotoll.geofences DROP COLUMN revision; -- drops the sequence it owns
