package main

import (
	"fmt"
	"net"
	"net/http"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/geotoll/geotoll/apikeys"
	"github.com/geotoll/geotoll/internal/forwarded"
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
// server), continuing a caller's W3C traceparent, when tracing is on. Its
// client.address is the client the toll identifies (the socket peer, or
// behind trusted proxies the address they forwarded): otelhttp takes the
// first X-Forwarded-For address whoever sent it, which any client can
// write.
func (m *Main) traced(h http.Handler, proxies *forwarded.Trusted) http.Handler {
	if m.Tracing == nil {
		return h
	}
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if span := trace.SpanFromContext(r.Context()); span.IsRecording() {
			if addr := proxies.ClientAddr(r); addr.IsValid() {
				span.SetAttributes(attribute.String("client.address", addr.String()))
			}
			// otelhttp records the path as sent: a key in it (a URL
			// template with &key= for ?key=) is hidden, as in the log.
			if p := apikeys.RedactPath(r.URL.Path); p != r.URL.Path {
				span.SetAttributes(attribute.String("url.path", p))
			}
		}
		h.ServeHTTP(w, r)
	})
	return otelhttp.NewHandler(inner, "http.request", otelhttp.WithTracerProvider(m.Tracing),
		otelhttp.WithPropagators(propagation.TraceContext{}))
}
