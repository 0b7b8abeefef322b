package tiles

import (
	"slices"
	"strconv"
	"strings"

	"github.com/geotoll/geotoll/internal/layercheck"
)

// Checks are what the catalog's layers need of their tables, for the
// server's start-up and readiness checks (package layercheck): the table,
// its geometry column in the layer's SRID, the id column (an integer)
// unless the layer is served without ids, the properties and the
// order_by's columns.
func (c *Catalog) Checks() []layercheck.Spec {
	layers := c.Layers()
	out := make([]layercheck.Spec, 0, len(layers))
	for _, l := range layers {
		s := layercheck.Spec{
			Layer: "tile layer " + strconv.Quote(l.Name), Table: l.tableIdent(),
			Geometry: l.GeometryColumn, SRID: l.SRID, Properties: l.Properties,
			Verdict: &l.state.verdict,
		}
		if !l.WithoutID {
			s.ID = l.IDColumn
		}
		for _, c := range l.Columns() { // the order_by's, past the id and properties
			if c != s.ID && !slices.Contains(l.Properties, c) {
				s.Order = append(s.Order, c)
			}
		}
		out = append(out, s)
	}
	return out
}

// misfit is the 503 of a tile that names a layer the last layer check
// found not to match its table (a table dropped or renamed, a grant
// revoked), nil when none does: such a layer answers so at every zoom,
// from its storage too, which outlives the table's grant and the table.
func misfit(layers []*Layer) error {
	for _, l := range layers {
		if err := l.state.verdict.Err(subject([]*Layer{l})); err != nil {
			return err
		}
	}
	return nil
}

// subject names the layers of a tile in an answer about them.
func subject(layers []*Layer) string {
	if len(layers) == 1 {
		return "layer " + strconv.Quote(layers[0].Name)
	}
	names := make([]string, len(layers))
	for i, l := range layers {
		names[i] = l.Name
	}
	return "a layer of " + strconv.Quote(strings.Join(names, ","))
}
