package geofence

import (
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/geotoll/geotoll/internal/layercheck"
)

// fenceSubject names the table contains, check and the fence admin read
// (created by the migrations) in answers about it.
const fenceSubject = "the fence table geotoll.geofences"

// Checks are what the catalog's layers, and contains and check, need of
// their tables, for the server's start-up and readiness checks (package
// layercheck): each table, its geometry column in EPSG:4326, its integer
// id column and its properties.
func (c *Catalog) Checks() []layercheck.Spec {
	layers := c.Layers()
	out := make([]layercheck.Spec, 0, len(layers)+1)
	for _, l := range layers {
		out = append(out, layercheck.Spec{
			Layer: "geofence " + l.subject(), Table: pgx.Identifier(strings.Split(l.Table, ".")),
			Geometry: l.GeometryColumn, SRID: 4326, ID: l.IDColumn, Properties: l.Properties,
			Verdict: l.verdict,
		})
	}
	return append(out, layercheck.Spec{
		Layer: fenceSubject + " (contains, check)", Table: pgx.Identifier{"geotoll", "geofences"},
		Geometry: "geom", SRID: 4326, ID: "id", Properties: []string{"name", "kind"},
	})
}

// subject names the layer in answers about it.
func (l *Layer) subject() string { return "layer " + strconv.Quote(l.Name) }
