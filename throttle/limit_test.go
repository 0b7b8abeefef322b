package throttle

import (
	"math"
	"testing"
)

func TestLimitValidate(t *testing.T) {
	tests := []struct {
		name string
		l    Limit
		ok   bool
	}{
		{"ok", Limit{Rate: 20, Capacity: 100}, true},
		{"fractional", Limit{Rate: 0.001, Capacity: 0.5}, true},
		{"zero value", Limit{}, false},
		{"zero rate", Limit{Rate: 0, Capacity: 1}, false},
		{"negative capacity", Limit{Rate: 1, Capacity: -1}, false},
		{"NaN rate", Limit{Rate: math.NaN(), Capacity: 1}, false},
		{"Inf capacity", Limit{Rate: 1, Capacity: math.Inf(1)}, false},
		{"refills too slowly", Limit{Rate: 1e-9, Capacity: 100}, false},
		{"refills in exactly the most allowed", Limit{Rate: 1, Capacity: maxFillSeconds}, true},
		{"a hair slower", Limit{Rate: 1, Capacity: maxFillSeconds * (1 + 1e-15)}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.l.Validate(); (err == nil) != tt.ok {
				t.Errorf("Validate() = %v, want ok=%v", err, tt.ok)
			}
		})
	}
}
