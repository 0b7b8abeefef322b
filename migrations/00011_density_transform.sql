-- A transform that skips what it cannot transform, for the price models'
-- builds (package density). A relation in another SRID than 3857 or 4326
-- is modelled from its features' boxes transformed to EPSG:4326, and one
-- box outside the projection's domain makes ST_Transform fail the whole
-- build — and every build after it, each reading the table up to that row.
-- PostGIS has no transform that returns NULL instead, so this one catches
-- PostGIS's transform errors ("transform: Point outside of projection
-- domain", and the like) and returns NULL; any other error (an SRID
-- PostGIS does not know) still fails. Each call opens a subtransaction,
-- several times slower than ST_Transform: a build uses it only after its
-- query with ST_Transform failed. PARALLEL UNSAFE (the default): a parallel
-- worker cannot open a subtransaction. It resolves functions in
-- pg_catalog, then public (PostGIS), as geotoll.geofence_cut does.
-- +goose Up
-- +goose StatementBegin
CREATE FUNCTION geotoll.density_transform(g geometry) RETURNS geometry
LANGUAGE plpgsql IMMUTABLE STRICT SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    RETURN ST_Transform(g, 4326);
EXCEPTION WHEN internal_error THEN
    IF SQLERRM LIKE 'transform:%' THEN
        RETURN NULL;
    END IF;
    RAISE;
END
$$;
-- +goose StatementEnd
REVOKE ALL ON FUNCTION geotoll.density_transform(geometry) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION geotoll.density_transform(geometry) TO geotoll_reader;

-- +goose Down
DROP FUNCTION geotoll.density_transform(geometry);
