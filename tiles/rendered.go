package tiles

import (
	"strconv"
	"strings"
)

// Rendered is one rendered tile: its MVT bytes (the layers concatenated)
// and the layers its byte budgets reduced.
type Rendered struct {
	MVT     []byte
	Reduced []Reduction
}

// Reduction records that a layer of a tile exceeded its byte budget and
// was served at reduction Level (1 or more; see Budget).
type Reduction struct {
	Layer string
	Level int
}

// HeaderReduced is the response header that names the reduced layers of a
// tile, e.g. `X-Tile-Reduced: places;level=2, roads;level=1`; a tile that
// fits every budget has none.
const HeaderReduced = "X-Tile-Reduced"

// reducedHeader formats reductions for HeaderReduced ("" for none).
func reducedHeader(rs []Reduction) string {
	parts := make([]string, len(rs))
	for i, r := range rs {
		parts[i] = r.Layer + ";level=" + strconv.Itoa(r.Level)
	}
	return strings.Join(parts, ", ")
}

// ReadSettingsSQL is the statement that sets, at the start of the read
// transaction, the settings a tile query runs under (besides its
// statement_timeout); tools that time the tile queries outside the server
// send it too. JIT off, and generic plans: a tile query's plan does not
// depend on the tile (an index scan of the envelope either way), and
// planning the generalising queries anew each time costs more than
// running a small tile.
const ReadSettingsSQL = `SELECT set_config('jit', 'off', true), set_config('plan_cache_mode', 'force_generic_plan', true)`
