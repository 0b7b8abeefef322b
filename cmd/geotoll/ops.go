package main

import (
	"fmt"
	"net"
	"net/http"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/propagation"

	"github.com/geotoll/geotoll/server"
)

// openOps binds the operators' listener, when metrics_listen names one:
// /metrics, /healthz and /readyz with each check's detail, which the
// public listener then does not show.
func (m *Main) openOps() error {
	if m.Config.MetricsListen == "" {
		return nil
	}
	l, err := net.Listen("tcp", m.Config.MetricsListen)
	if err != nil {
		return fmt.Errorf("metrics_listen: %w", err)
	}
	m.opsListener = l
	m.OpsServer = m.httpServer(server.Ops(m.options))
	return nil
}

// OpsAddr is the bound address of the operators' listener ("" without
// one).
func (m *Main) OpsAddr() string {
	if m.opsListener == nil {
		return ""
	}
	return m.opsListener.Addr().String()
}

// traced makes every request a span (named after its route by the
// server), continuing a caller's W3C traceparent, when tracing is on.
func (m *Main) traced(h http.Handler) http.Handler {
	if m.Tracing == nil {
		return h
	}
	return otelhttp.NewHandler(h, "http.request", otelhttp.WithTracerProvider(m.Tracing),
		otelhttp.WithPropagators(propagation.TraceContext{}))
}
