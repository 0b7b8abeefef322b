-- Fences stored as pieces. contains and check test a point against small
-- pieces of each fence instead of the whole fence: ST_Subdivide cuts every
-- fence into polygons of at most 256 vertices, so the GiST probe of a point
-- finds one or two small pieces (a coastline fence of a million vertices
-- costs the same as a square), and the executor checks for interrupts
-- between rows, so statement_timeout cuts a long batch.
--
-- geotoll.geofence_pieces holds (fence_id, geom) rows; the pieces of a
-- fence cover exactly the fence (its outline, holes excluded). A point on
-- the seam between two pieces is covered by both: readers answer DISTINCT
-- fence ids.
--
-- Kept current by a trigger on geotoll.geofences: an insert or an update
-- of geom cuts the fence anew, a delete drops its pieces (ON DELETE
-- CASCADE). The trigger function is SECURITY DEFINER, owned by the schema
-- owner: geotoll_fence_writer has no right on the pieces table itself, so
-- its pieces change only through its fence writes. geotoll_reader may read
-- them. Existing fences get their pieces here. The function names every
-- table with its schema and resolves functions in pg_catalog, then public
-- (PostGIS), temporary schemas last: it trusts that nobody but the schema
-- owner creates objects in public — PostgreSQL 15's default; on an older
-- cluster run REVOKE CREATE ON SCHEMA public FROM PUBLIC first.
-- +goose Up
CREATE TABLE geotoll.geofence_pieces (
    fence_id bigint NOT NULL REFERENCES geotoll.geofences (id) ON DELETE CASCADE,
    geom     geometry(Polygon, 4326) NOT NULL
);
CREATE INDEX geofence_pieces_geom_gist ON geotoll.geofence_pieces USING gist (geom);
CREATE INDEX geofence_pieces_fence_id ON geotoll.geofence_pieces (fence_id);

-- +goose StatementBegin
CREATE FUNCTION geotoll.geofence_cut() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    IF TG_OP = 'UPDATE' THEN
        DELETE FROM geotoll.geofence_pieces WHERE fence_id = OLD.id;
    END IF;
    INSERT INTO geotoll.geofence_pieces (fence_id, geom)
    SELECT NEW.id, d.geom
    FROM ST_Subdivide(NEW.geom, 256) AS s(geom), ST_Dump(s.geom) AS d
    WHERE GeometryType(d.geom) = 'POLYGON';
    RETURN NULL;
END
$$;
-- +goose StatementEnd
REVOKE ALL ON FUNCTION geotoll.geofence_cut() FROM PUBLIC;
CREATE TRIGGER geofences_cut
    AFTER INSERT OR UPDATE OF geom ON geotoll.geofences
    FOR EACH ROW EXECUTE FUNCTION geotoll.geofence_cut();

INSERT INTO geotoll.geofence_pieces (fence_id, geom)
SELECT f.id, d.geom
FROM geotoll.geofences AS f, ST_Subdivide(f.geom, 256) AS s(geom), ST_Dump(s.geom) AS d
WHERE GeometryType(d.geom) = 'POLYGON';
ANALYZE geotoll.geofence_pieces;

GRANT SELECT ON geotoll.geofence_pieces TO geotoll_reader;

-- +goose Down
DROP TRIGGER geofences_cut ON geotoll.geofences;
DROP FUNCTION geotoll.geofence_cut();
DROP TABLE geotoll.geofence_pieces;
