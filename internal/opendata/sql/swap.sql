-- Replaces the served table with the loaded one in one transaction (the
-- caller's), so readers see the old rows or the new, never none, and lets
-- the read role select it. Template: .Reader is the read role.
DROP TABLE IF EXISTS {{q .Schema}}.{{q .Table}};
ALTER TABLE {{q .Schema}}.{{q .Table "_load"}} RENAME TO {{q .Table}};
ALTER INDEX {{q .Schema}}.{{q .Table "_load_pkey"}} RENAME TO {{q .Table "_pkey"}};
ALTER INDEX {{q .Schema}}.{{q .Table "_load_geom_gist"}} RENAME TO {{q .Table "_geom_gist"}};
ALTER INDEX {{q .Schema}}.{{q .Table "_load_geom_3857_gist"}} RENAME TO {{q .Table "_geom_3857_gist"}};
ALTER INDEX {{q .Schema}}.{{q .Table "_load_geom_geog_gist"}} RENAME TO {{q .Table "_geom_geog_gist"}};
GRANT USAGE ON SCHEMA {{q .Schema}} TO {{q .Reader}};
GRANT SELECT ON {{q .Schema}}.{{q .Table}}, {{q .Schema}}.sources TO {{q .Reader}};
