-- A transform into Web Mercator that draws what it can of a row the
-- projection cannot take whole, for tiles and overviews (packages tiles
-- and serving). ST_Transform fails a whole query on one row outside the
-- projection's domain — a point or vertex past a pole in EPSG:4326
-- ("transform: Invalid coordinate") — so a single such row made every tile
-- whose box it meets fail, and every overview build of its layer. geotoll
-- uses this function only for a query whose ST_Transform failed so: each
-- call opens a subtransaction, several times slower than ST_Transform.
--
-- It returns ST_Transform(g, srid); on PostGIS's transform errors (and
-- those alone), when g is in a geographic SRID (longitude and latitude:
-- EPSG:4326, 4269, 4258…), the part of g within Web Mercator's latitudes
-- (±85.0511°: what a tile can show of it), cut from g made valid first (a
-- box cut of a self-crossing ring may return a ring around the world,
-- which no transform takes); else NULL — the row is not drawn — as when
-- that part is empty or its transform fails too (a row of a projected
-- SRID outside its domain). PARALLEL UNSAFE (the default): a parallel
-- worker cannot open a subtransaction. It resolves functions in
-- pg_catalog, then public (PostGIS), as geotoll.density_transform does.
-- A read role other than geotoll_reader needs USAGE on schema geotoll and
-- EXECUTE on it for tiles to use it.
-- +goose Up
-- +goose StatementBegin
CREATE FUNCTION geotoll.tile_transform(g geometry, srid integer) RETURNS geometry
LANGUAGE plpgsql IMMUTABLE STRICT SET search_path = pg_catalog, public, pg_temp AS $$
DECLARE
    part geometry;
BEGIN
    RETURN ST_Transform(g, srid);
EXCEPTION WHEN internal_error THEN
    IF SQLERRM NOT LIKE 'transform:%' THEN
        RAISE;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM spatial_ref_sys AS s
                   WHERE s.srid = ST_SRID(g) AND s.proj4text LIKE '%+proj=longlat%') THEN
        RETURN NULL;
    END IF;
    part := g;
    IF NOT (ST_IsValidDetail(part)).valid THEN -- (ST_IsValid would send a NOTICE)
        part := ST_MakeValid(part);
    END IF;
    part := ST_ClipByBox2D(part, ST_MakeEnvelope(-1e9, -85.0511287798066, 1e9, 85.0511287798066, ST_SRID(g)));
    IF part IS NULL OR ST_IsEmpty(part) THEN
        RETURN NULL;
    END IF;
    BEGIN
        RETURN ST_Transform(part, srid);
    EXCEPTION WHEN internal_error THEN
        IF SQLERRM LIKE 'transform:%' THEN
            RETURN NULL;
        END IF;
        RAISE;
    END;
END
$$;
-- +goose StatementEnd
REVOKE ALL ON FUNCTION geotoll.tile_transform(geometry, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION geotoll.tile_transform(geometry, integer) TO geotoll_reader;

-- +goose Down
DROP FUNCTION geotoll.tile_transform(geometry, integer);
