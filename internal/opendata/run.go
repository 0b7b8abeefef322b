package opendata

import (
	"context"
	"fmt"
)

// Run fetches the pinned sources into cacheDir (npm pack, integrity
// checked) and loads every table: points, countries and, unless
// Options.Simplify is negative, countries_simple. Tables already loaded
// from the same source and parameters are skipped. done, when not nil, is
// called after each table.
func (l *Loader) Run(ctx context.Context, cacheDir string, done func(TableReport)) ([]TableReport, error) {
	if done == nil {
		done = func(TableReport) {}
	}
	if err := l.Prepare(ctx); err != nil {
		return nil, err
	}
	var out []TableReport
	add := func(r TableReport, err error) error {
		if err != nil {
			return err
		}
		out = append(out, r)
		done(r)
		return nil
	}
	citiesTGZ, err := Cities.Fetch(ctx, cacheDir)
	if err != nil {
		return nil, fmt.Errorf("opendata: %w", err)
	}
	countriesTGZ, err := CountriesLand10m.Fetch(ctx, cacheDir)
	if err != nil {
		return nil, fmt.Errorf("opendata: %w", err)
	}
	rc, err := Cities.Open(citiesTGZ)
	if err != nil {
		return nil, fmt.Errorf("opendata: %w", err)
	}
	cities, err := ReadCities(rc)
	rc.Close()
	if err != nil {
		return nil, fmt.Errorf("opendata: %s: %w", Cities, err)
	}
	if err := add(l.LoadPoints(ctx, cities, Cities.String())); err != nil {
		return out, err
	}
	rc, err = CountriesLand10m.Open(countriesTGZ)
	if err != nil {
		return out, fmt.Errorf("opendata: %w", err)
	}
	err = add(l.LoadCountries(ctx, rc, CountriesLand10m.String(), 0))
	rc.Close()
	if err != nil {
		return out, err
	}
	if l.opts.Simplify >= 0 {
		if err := add(l.LoadSimplified(ctx)); err != nil {
			return out, err
		}
	}
	return out, nil
}
