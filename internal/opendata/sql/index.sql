-- Key and spatial indexes of a loaded table, named after the loading table
-- (swap.sql renames them with it).
ALTER TABLE {{q .Schema}}.{{q .Table "_load"}} ADD CONSTRAINT {{q .Table "_load_pkey"}} PRIMARY KEY (id);
CREATE INDEX {{q .Table "_load_geom_gist"}} ON {{q .Schema}}.{{q .Table "_load"}} USING gist (geom);
CREATE INDEX {{q .Table "_load_geom_3857_gist"}} ON {{q .Schema}}.{{q .Table "_load"}} USING gist (geom_3857);
-- Geofence within searches (geom::geography).
CREATE INDEX {{q .Table "_load_geom_geog_gist"}} ON {{q .Schema}}.{{q .Table "_load"}} USING gist ((geom::geography));
