package telemetry

import (
	"context"
	"fmt"
	"os"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Propagator reads and writes W3C trace context (traceparent, tracestate) and baggage.
var Propagator = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})

// Tracing is a tracer provider and how to stop it.
type Tracing struct {
	Provider trace.TracerProvider
	shutdown func(context.Context) error
}

// Shutdown flushes and stops the exporter.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if t.shutdown == nil {
		return nil
	}
	return t.shutdown(ctx)
}

// NewTracing configures tracing from the standard OpenTelemetry environment: spans are exported
// over OTLP/HTTP when OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set, and
// not recorded at all otherwise.
func NewTracing(ctx context.Context, service, version string) (*Tracing, error) {
	if os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
		return &Tracing{Provider: noop.NewTracerProvider()}, nil
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("start OTLP trace exporter: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(Resource(service, version)))
	return &Tracing{Provider: tp, shutdown: tp.Shutdown}, nil
}

// Resource describes this process in traces: the SDK's defaults (host, SDK version, and
// OTEL_RESOURCE_ATTRIBUTES) with the service name and version. Schemaless, so that it merges with
// the defaults whatever semantic-conventions version those use.
func Resource(service, version string) *resource.Resource {
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(semconv.ServiceName(service), semconv.ServiceVersion(version)))
	if err != nil {
		return resource.NewSchemaless(semconv.ServiceName(service), semconv.ServiceVersion(version))
	}
	return res
}

// ProviderForTests wraps an SDK provider (with an in-memory recorder, say).
func ProviderForTests(tp *sdktrace.TracerProvider) *Tracing {
	return &Tracing{Provider: tp, shutdown: tp.Shutdown}
}
