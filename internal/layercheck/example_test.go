package layercheck_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/geotoll/geotoll/internal/layercheck"
)

// A server checks its layers as the role it serves them with, before it
// serves: a mismatch names each layer and what is wrong; any other error
// means the database could not be asked.
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://geotoll_reader@127.0.0.1:55432/geotoll")
	if err != nil {
		return
	}
	defer pool.Close()
	checker := layercheck.New(layercheck.Spec{
		Layer:    `tile layer "places"`,
		Table:    pgx.Identifier{"geotoll", "places"},
		Geometry: "geom_3857", SRID: 3857, ID: "id",
		Properties: []string{"name", "kind"},
	})
	var mismatches layercheck.Mismatches
	switch err := checker.Check(ctx, pool); {
	case errors.As(err, &mismatches):
		for _, m := range mismatches {
			fmt.Println(m.Layer, m.Reasons)
		}
	case err != nil:
		fmt.Println("not checked:", err)
	}
}
