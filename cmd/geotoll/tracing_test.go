package main

import (
	"context"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
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

// The deployment's OpenTelemetry environment reaches the spans' resource:
// OTEL_SERVICE_NAME names the service while tracing.service_name is left
// at its default (a name set there wins), and OTEL_RESOURCE_ATTRIBUTES
// adds its attributes.
func TestTracingResourceFollowsTheEnvironment(t *testing.T) {
	for _, tc := range []struct{ serviceName, attributes, configured, want string }{
		{"geotoll-eu", "service.instance.id=replica-7", defaultServiceName, "geotoll-eu"},
		{"geotoll-eu", "service.instance.id=replica-7", "tiles-prod", "tiles-prod"},
		{"", "service.instance.id=replica-7,service.name=geotoll-us", defaultServiceName, "geotoll-us"},
		{"", "service.instance.id=replica-7", defaultServiceName, defaultServiceName},
	} {
		t.Setenv("OTEL_SERVICE_NAME", tc.serviceName)
		t.Setenv("OTEL_RESOURCE_ATTRIBUTES", tc.attributes)
		cfg := TracingConfig{Endpoint: "http://127.0.0.1:1", ServiceName: tc.configured, SampleRatio: 1}
		tp, err := cfg.provider(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		_, span := tp.Tracer("t").Start(t.Context(), "x")
		attrs := map[string]string{}
		for _, kv := range span.(sdktrace.ReadOnlySpan).Resource().Attributes() {
			attrs[string(kv.Key)] = kv.Value.String()
		}
		span.End()
		if err := tp.Shutdown(context.Background()); err != nil {
			t.Log(err) // nothing listens at the endpoint
		}
		if attrs["service.name"] != tc.want || attrs["service.instance.id"] != "replica-7" || attrs["service.version"] == "" {
			t.Errorf("service_name %q: resource %v, want service.name %q, service.instance.id replica-7 and a version", tc.configured, attrs, tc.want)
		}
	}
}
