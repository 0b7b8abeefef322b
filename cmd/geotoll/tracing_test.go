package main

import (
	"strings"
	"testing"
)

// A tracing.sample_ratio outside 0..1 is refused by the configuration's
// validation, as its reference says.
func TestValidateTracingSampleRatio(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		ratio float64
		bad   bool
	}{
		{"none", 0, false},
		{"half", 0.5, false},
		{"all", 1, false},
		{"negative", -0.1, true},
		{"above one", 1.5, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := DefaultConfig()
			cfg.Tracing.SampleRatio = tc.ratio
			err := cfg.validate()
			if got := err != nil && strings.Contains(err.Error(), "tracing.sample_ratio"); got != tc.bad {
				t.Fatalf("sample_ratio %g: validate() = %v, want refused %v", tc.ratio, err, tc.bad)
			}
		})
	}
}
