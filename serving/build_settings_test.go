package serving_test

import (
	"context"
	"testing"

	"github.com/geotoll/geotoll/serving"
)

// settingsProbe is the Subdivide builder, reading the settings its
// build runs under before it builds.
type settingsProbe struct {
	serving.Subdivide
	jit *string
}

func (p settingsProbe) Build(ctx context.Context, job *serving.Job, t serving.Target) (int64, error) {
	if err := job.Tx.QueryRow(ctx, `SELECT current_setting('jit')`).Scan(p.jit); err != nil {
		return 0, err
	}
	return p.Subdivide.Build(ctx, job, t)
}

// TestBuildRunsWithJITOff: a build's statements run with JIT off, whatever
// the database's default (on, as PostgreSQL ships it, here): compiling
// each of them cost about a second, and a layer of four rows took seconds
// to build.
func TestBuildRunsWithJITOff(t *testing.T) {
	t.Parallel()
	owner, f, name := setup(t, true, "jit_")
	shapes(t, f)
	var def string
	if err := owner.QueryRow(t.Context(), `SELECT current_setting('jit')`).Scan(&def); err != nil {
		t.Fatal(err)
	}
	cat := catalog(t, shapesLayer(name, f.schema))
	var jit string
	o := serving.Options{Builders: []serving.Builder{settingsProbe{jit: &jit}}}
	if r := one(t, owner, cat.Layer(name), o); r.Status != serving.Built {
		t.Fatalf("prepare: %+v", r)
	}
	if jit != "off" {
		t.Errorf("the build ran with jit = %q (the database's default: %q), want off", jit, def)
	}
}
