// Package catalog builds the immutable, name-indexed sets of configured
// layers that tiles and geofence both keep (they may not import each other).
package catalog

import (
	"errors"
	"fmt"
)

// Layer is what a configured layer does to join a catalog.
type Layer interface {
	// Key is the layer's unique name.
	Key() string
	// Prepare fills defaults, validates, and renders the layer's queries;
	// its error names the layer.
	Prepare() error
}

// Build copies each of layers (the catalog owns its copies), prepares it,
// and indexes it by Key. kind names the layers in errors ("layer",
// "geofence layer"). Every problem is reported, not just the first.
func Build[L any, P interface {
	*L
	Layer
}](layers []L, kind string) (map[string]*L, []*L, error) {
	byName := make(map[string]*L, len(layers))
	order := make([]*L, 0, len(layers))
	var errs []error
	for i := range layers {
		l := layers[i]
		p := P(&l)
		if err := p.Prepare(); err != nil {
			errs = append(errs, err)
			continue
		}
		if _, dup := byName[p.Key()]; dup {
			errs = append(errs, fmt.Errorf("%s %q is defined twice", kind, p.Key()))
			continue
		}
		byName[p.Key()] = &l
		order = append(order, &l)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, nil, err
	}
	return byName, order, nil
}
