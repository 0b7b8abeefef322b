// Package catalog builds the immutable, name-indexed sets of configured
// layers that tiles and geofence both keep (they may not import each other).
package catalog

import (
	"errors"
	"fmt"
	"strings"
)

// Layer is what a configured layer does to join a catalog.
type Layer interface {
	// Key is the layer's unique name.
	Key() string
	// Prepare fills defaults, validates, and renders the layer's queries;
	// its error names the layer.
	Prepare() error
}

// Set is an immutable set of prepared layers, by name and in order.
// Packages embed it in their own Catalog type.
type Set[L any] struct {
	byName map[string]*L
	order  []*L
}

// Layer returns the named layer, or nil.
func (s Set[L]) Layer(name string) *L { return s.byName[name] }

// Layers returns the layers in configuration order.
func (s Set[L]) Layers() []*L { return append([]*L(nil), s.order...) }

// Build copies each of layers (the set owns its copies), prepares it, and
// indexes it by Key. kind names the layers in errors ("layer", "geofence
// layer"). Every problem is reported, not just the first.
func Build[L any, P interface {
	*L
	Layer
}](layers []L, kind string) (Set[L], error) {
	s := Set[L]{byName: make(map[string]*L, len(layers)), order: make([]*L, 0, len(layers))}
	var errs []error
	for i := range layers {
		l := layers[i]
		p := P(&l)
		if err := p.Prepare(); err != nil {
			errs = append(errs, err)
			continue
		}
		if _, dup := s.byName[p.Key()]; dup {
			errs = append(errs, fmt.Errorf("%s %q is defined twice", kind, p.Key()))
			continue
		}
		s.byName[p.Key()] = &l
		s.order = append(s.order, &l)
	}
	if err := errors.Join(errs...); err != nil {
		return Set[L]{}, err
	}
	return s, nil
}

// SQLQuoted reports whether a part of a dotted name is written as an SQL
// quoted identifier ("MyTable", or "my.schema", as in a query): a part
// that opens with a double quote and closes with one at a dot or at the
// end. A configured name is taken as it is spelt in the database, so such
// quotes would be part of the name sought, and no table of a sane schema
// has them.
func SQLQuoted(name string) bool {
	for start := 0; start < len(name); {
		if name[start] == '"' {
			for i := start + 1; i < len(name); i++ {
				if name[i] == '"' && (i+1 == len(name) || name[i+1] == '.') {
					return true
				}
			}
		}
		dot := strings.IndexByte(name[start:], '.')
		if dot < 0 {
			return false
		}
		start += dot + 1
	}
	return false
}
