package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/exaring/otelpgx"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/extra/redisotel/v9"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/geotoll/geotoll/internal/forwarded"
	"github.com/geotoll/geotoll/internal/redact"
)

// TracingConfig turns on OpenTelemetry tracing, exported over OTLP/HTTP:
// a span per request (named by its route), the price's charge, each Redis
// call and each PostgreSQL statement, in one trace. It is off unless
// Endpoint or OTEL_EXPORTER_OTLP_ENDPOINT (or _TRACES_ENDPOINT) is set;
// the exporter reads the other OTEL_EXPORTER_OTLP_* variables (headers,
// timeout) itself.
type TracingConfig struct {
	Endpoint string `yaml:"endpoint"` // OTLP/HTTP collector URL, e.g. http://127.0.0.1:4318
	// ServiceName is the service.name resource attribute; left at
	// defaultServiceName, OTEL_SERVICE_NAME names the service when set.
	ServiceName string  `yaml:"service_name"`
	SampleRatio float64 `yaml:"sample_ratio"` // share of new traces sampled, 0..1; a caller's sampled traceparent is followed
}

// semconvServiceName is the resource attribute that names a service.
const semconvServiceName = "service.name"

// defaultServiceName is tracing.service_name's default.
const defaultServiceName = "geotoll"

// enabled reports whether tracing is on.
func (c TracingConfig) enabled() bool {
	_, e := otelEndpoint()
	return c.Endpoint != "" || e != ""
}

// validate refuses a sample ratio outside 0..1 and an endpoint that is
// not an http or https URL with a host: the exporter would take
// "127.0.0.1:4318" for a URL of scheme 127.0.0.1 and post elsewhere.
func (c TracingConfig) validate() error {
	var errs []error
	if !(c.SampleRatio >= 0 && c.SampleRatio <= 1) {
		errs = append(errs, fmt.Errorf("tracing.sample_ratio %g must be within 0..1", c.SampleRatio))
	}
	if c.Endpoint != "" {
		if err := validateEndpoint("tracing.endpoint", c.Endpoint); err != nil {
			errs = append(errs, err)
		}
	} else if v, e := otelEndpoint(); e != "" {
		// The exporter reads it itself, and took "ftp://…" or "not a url"
		// for an https URL, or a URL without a host.
		if err := validateEndpoint(v, e); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// otelEndpoint returns the variable that names the collector as the
// exporter reads them, and its value (trimmed, as the exporter trims
// it): the traces' own when set, else the general one; "" for neither.
func otelEndpoint() (name, value string) {
	for _, v := range otelEndpointVars {
		if e := strings.TrimSpace(os.Getenv(v)); e != "" {
			return v, e
		}
	}
	return "", ""
}

// otelEndpointVars are the variables that name the OTLP collector, and
// turn tracing on, when tracing.endpoint is not set: in the exporter's
// order, the traces' own first.
var otelEndpointVars = []string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"}

// validateEndpoint: an endpoint (of the setting or variable name) is an
// absolute http or https URL whose host is a valid host[:port]. The
// errors show the URL without its password.
func validateEndpoint(name, endpoint string) error {
	u, err := url.Parse(endpoint)
	if err != nil {
		return fmt.Errorf(`%s is not a URL: it must be an http or https URL such as "http://127.0.0.1:4318"`, name)
	}
	bad := func(why string) error {
		return fmt.Errorf("%s %q must be an http or https URL such as \"http://127.0.0.1:4318\": %s", name, u.Redacted(), why)
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return bad("its scheme must be http or https")
	case u.Opaque != "" || u.Host == "":
		return bad("it needs a host")
	case !forwarded.ValidHost(u.Host):
		return bad(fmt.Sprintf("%q is not a valid host[:port] (a name or an IP address, and a port from 1 to 65535)", u.Host))
	}
	return nil
}

// provider makes the tracer provider that exports to the collector.
func (c TracingConfig) provider(ctx context.Context) (*sdktrace.TracerProvider, error) {
	var opts []otlptracehttp.Option
	if c.Endpoint != "" {
		opts = append(opts, otlptracehttp.WithEndpointURL(tracesURL(c.Endpoint)))
	}
	exp, err := otlptracehttp.New(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("tracing: %w", err)
	}
	attrs := []attribute.KeyValue{attribute.String("service.version", version)}
	// The SDK merges the environment's resource (OTEL_SERVICE_NAME, or
	// service.name in OTEL_RESOURCE_ATTRIBUTES) under this one: the
	// default name must not hide a name the deployment gave there.
	if _, named := resource.Environment().Set().Value(semconvServiceName); c.ServiceName != defaultServiceName || !named {
		attrs = append(attrs, attribute.String(semconvServiceName, c.ServiceName))
	}
	res := resource.NewSchemaless(attrs...)
	return sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(c.SampleRatio)))), nil
}

// tracesURL is where spans go for a collector's endpoint: as for
// OTEL_EXPORTER_OTLP_ENDPOINT, a base URL without a path gets the signal's
// path, /v1/traces (the exporter itself would post to the URL as given).
func tracesURL(endpoint string) string {
	u, err := url.Parse(endpoint)
	if err != nil || strings.Trim(u.Path, "/") != "" {
		return endpoint // a full URL, or nonsense the exporter reports
	}
	u.Path = "/v1/traces"
	return u.String()
}

// openTracing sets m.Tracing from the configuration, unless it is set
// already (tests give their own provider).
func (m *Main) openTracing(ctx context.Context) error {
	if m.Tracing != nil || !m.Config.Tracing.enabled() {
		return nil
	}
	tp, err := m.Config.Tracing.provider(ctx)
	if err != nil {
		return err
	}
	m.Tracing, m.stopTracing = tp, tp.Shutdown
	endpoint := m.Config.Tracing.Endpoint
	if endpoint == "" {
		_, endpoint = otelEndpoint() // the log names where spans go
	}
	m.Logger.Info("tracing on", "endpoint", redact.URL(endpoint), "sample_ratio", m.Config.Tracing.SampleRatio)
	return nil
}

// closeTracing sends the spans still buffered, for at most a few seconds.
func (m *Main) closeTracing() {
	if m.stopTracing == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := m.stopTracing(ctx); err != nil {
		m.Logger.Warn("tracing: spans not sent before shutdown", "err", err)
	}
	m.stopTracing = nil
}

// tracePool makes a pool's statements spans.
func tracePool(tp trace.TracerProvider, pcfg *pgxpool.Config) {
	if tp != nil {
		pcfg.ConnConfig.Tracer = otelpgx.NewTracer(otelpgx.WithTracerProvider(tp))
	}
}

// traceRedis makes Redis calls spans.
func traceRedis(tp trace.TracerProvider, rdb redis.UniversalClient) error {
	if tp == nil {
		return nil
	}
	return redisotel.InstrumentTracing(rdb, redisotel.WithTracerProvider(tp))
}
