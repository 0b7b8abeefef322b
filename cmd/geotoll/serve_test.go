package main

import (
	"context"
	"strings"
	"testing"

	"github.com/geotoll/geotoll/internal/testenv"
)

// The requests' pool's sessions are application_name geotoll and the
// server's own work's geotoll-background, or both the one the URL names:
// servers sharing a database are told apart by it. Parallel: each server
// reads the names of its own pools' sessions, no one else's.
func TestServePoolApplicationName(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ query, want, background string }{
		{"", "geotoll", "geotoll-background"},
		{"application_name=geotoll-east", "geotoll-east", "geotoll-east"},
	} {
		m := startMain(t, func(c *Config) {
			if tc.query != "" {
				sep := "?"
				if strings.Contains(c.Database.URL, "?") {
					sep = "&"
				}
				c.Database.URL += sep + tc.query
			}
		})
		var got, background string
		if err := m.Pool.QueryRow(context.Background(), "SELECT current_setting('application_name')").Scan(&got); err != nil || got != tc.want {
			t.Errorf("URL with %q: application_name %q, %v; want %q", tc.query, got, err, tc.want)
		}
		if err := m.Background.QueryRow(context.Background(), "SELECT current_setting('application_name')").Scan(&background); err != nil || background != tc.background {
			t.Errorf("URL with %q: the background pool's application_name %q, %v; want %q", tc.query, background, err, tc.background)
		}
	}
}

// The server's own work runs plain statements too (the registry, the
// tables' change detectors): its pool's sessions are read only, each
// statement bounded, whatever role the URL names — here the schema owner,
// which has neither as a default.
func TestBackgroundSessionsAreReadOnlyAndBounded(t *testing.T) {
	t.Parallel()
	m := startMain(t, func(c *Config) { c.Database.URL = testenv.DatabaseURL(t) })
	var readOnly, timeout string
	if err := m.Background.QueryRow(context.Background(),
		"SELECT current_setting('default_transaction_read_only'), current_setting('statement_timeout')").Scan(&readOnly, &timeout); err != nil {
		t.Fatal(err)
	}
	if readOnly != "on" || timeout != BackgroundStatementTimeout {
		t.Errorf("background sessions: default_transaction_read_only %s, statement_timeout %s; want on, %s", readOnly, timeout, BackgroundStatementTimeout)
	}
	if _, err := m.Background.Exec(context.Background(), "CREATE TEMP TABLE background_write (x int)"); err == nil {
		t.Error("a background session wrote")
	}
}
