// Package tracing is leadintake's OpenTelemetry setup: one trace per
// submission, from the POST that claimed (or last re-opened) its key to
// the lead's job, its database work, its downstream calls and its callback
// deliveries; and, when asked, the pools' statistics and statement durations
// as OTLP metrics (MetricsEnabled).
//
// Export is configured by the standard OTEL_ variables, read by the SDK;
// Setup only decides whether there is anything to export (Enabled). Span
// attributes carry ids (lead, job, client), never personal data, a token
// or an idempotency key: what the instrumentation libraries would record
// of a request beyond its route is removed before export (see scrub). Until
// then a span waits in memory: none keeps more than 4 KiB of a name or
// value, or 16 KiB in all, whatever a caller sent (see bounded).
package tracing

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/exaring/otelpgx"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	noopmetric "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
)

// instrumentation is the name of leadintake's own tracer.
const instrumentation = "github.com/leadintake/leadintake"

// Tracer returns leadintake's tracer, from the global provider (Setup).
func Tracer() trace.Tracer { return otel.Tracer(instrumentation) }

// propagator is W3C Trace Context: traceparent and tracestate.
var propagator = propagation.TraceContext{}

// Enabled reports, from the environment as getenv reads it, whether traces
// are exported: OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT
// or an OTEL_TRACES_EXPORTER other than none is set, and neither
// OTEL_SDK_DISABLED=true nor OTEL_TRACES_EXPORTER=none says otherwise.
func Enabled(getenv func(string) string) bool {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return false
	}
	switch exp := strings.ToLower(strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER"))); exp {
	case "none":
		return false
	case "":
		return getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
	default:
		return true
	}
}

// MetricsEnabled reports, from the environment as getenv reads it, whether
// metrics (the pools' statistics and statement durations: the Prometheus
// metrics of /metrics are served whatever it says) are exported over OTLP:
// OTEL_METRICS_EXPORTER=otlp or OTEL_EXPORTER_OTLP_METRICS_ENDPOINT is set,
// and neither OTEL_SDK_DISABLED=true nor OTEL_METRICS_EXPORTER=none says
// otherwise. OTEL_EXPORTER_OTLP_ENDPOINT alone does not export metrics: it
// often names a traces-only backend such as Jaeger.
func MetricsEnabled(getenv func(string) string) bool {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return false
	}
	switch exp := strings.ToLower(strings.TrimSpace(getenv("OTEL_METRICS_EXPORTER"))); exp {
	case "none":
		return false
	case "":
		return getenv("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT") != ""
	default:
		return true
	}
}

// metered is set once Setup set a meter provider (MetricsEnabled).
var metered atomic.Bool

// RecordPoolStats exports the statistics of pool (connections acquired,
// idle, waited for...) through the meter provider Setup set; it does
// nothing when there is none.
func RecordPoolStats(pool *pgxpool.Pool) error {
	if !metered.Load() {
		return nil
	}
	if err := otelpgx.RecordStats(pool); err != nil {
		return fmt.Errorf("tracing: pool statistics: %w", err)
	}
	return nil
}

// Options are what Setup takes beyond the environment.
type Options struct {
	// Getenv reads the environment; nil is os.Getenv's equivalent
	// (the SDK reads the OTEL_ variables from the process's environment in
	// any case).
	Getenv func(string) string
	// Exporter replaces the OTLP exporter (tests, the bench); nil for
	// OTLP over HTTP as the OTEL_ variables configure it.
	Exporter sdktrace.SpanExporter
}

// Setup sets the global propagator (W3C Trace Context, always: an incoming
// traceparent is carried on even when nothing is exported) and, when
// Enabled, a global tracer provider that exports over OTLP/HTTP in
// batches, with the SDK's sampler (OTEL_TRACES_SAMPLER and
// OTEL_TRACES_SAMPLER_ARG, parent-based by default) and the service name
// OTEL_SERVICE_NAME, else service. Otherwise the tracer provider stays
// OpenTelemetry's no-op one: nothing is recorded, no connection opened.
//
// Metrics are exported likewise when MetricsEnabled, through a global meter
// provider (see RecordPoolStats).
//
// shutdown flushes the spans and metrics still buffered and stops the
// export; call it once the process's work ended, with a bounded context.
// It is a no-op when nothing is exported. enabled reports whether traces
// are.
func Setup(ctx context.Context, service string, o Options) (shutdown func(context.Context) error, enabled bool, err error) {
	getenv := o.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	otel.SetTextMapPropagator(propagator)
	noop := func(context.Context) error { return nil }
	if err := ValidateHeaders(getenv); err != nil {
		return noop, false, err
	}
	res, err := resourceOf(service)
	if err != nil {
		return noop, false, err
	}
	flushMetrics, err := setupMetrics(ctx, getenv, res)
	if err != nil {
		return noop, false, err
	}
	if !Enabled(getenv) {
		return flushMetrics, false, nil
	}
	exporter := o.Exporter
	if exporter == nil {
		switch exp := strings.ToLower(strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER"))); exp {
		case "", "otlp":
		default:
			return noop, false, fmt.Errorf("OTEL_TRACES_EXPORTER: %q is not one of otlp, none", exp)
		}
		proto := getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
		if proto == "" {
			proto = getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
		}
		if proto != "" && proto != "http/protobuf" {
			return noop, false, fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL: %q is not supported (http/protobuf only)", proto)
		}
		// The exporter reads its endpoint, headers, time-out and TLS
		// settings from the OTEL_EXPORTER_OTLP_ variables; it connects
		// on the first export.
		exporter, err = otlptracehttp.New(ctx)
		if err != nil {
			return flushMetrics, false, errors.Join(fmt.Errorf("tracing: OTLP exporter: %w", err), flushMetrics(ctx))
		}
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(scrub{exporter}),
		sdktrace.WithResource(res),
		sdktrace.WithRawSpanLimits(spanLimits()),
	)
	// Spans wait in memory until they are exported: what a caller sends
	// must not make one large (see bounded).
	otel.SetTracerProvider(bounded{tp})
	exporting.Store(true)
	return func(ctx context.Context) error {
		err := tp.Shutdown(ctx)
		if errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("tracing: flush spans: %w", err)
		}
		return errors.Join(err, flushMetrics(ctx))
	}, true, nil
}

// resourceOf is the resource of the process's telemetry: the SDK's, with
// the service name service unless OTEL_SERVICE_NAME (or
// OTEL_RESOURCE_ATTRIBUTES) names another.
func resourceOf(service string) (*resource.Resource, error) {
	res, err := resource.Merge(
		resource.NewSchemaless(semconv.ServiceName(service)),
		resource.Environment(),
	)
	if err != nil {
		return nil, fmt.Errorf("tracing: resource: %w", err)
	}
	res, err = resource.Merge(resource.Default(), res)
	if err != nil {
		return nil, fmt.Errorf("tracing: resource: %w", err)
	}
	return res, nil
}

// setupMetrics sets, when MetricsEnabled, a global meter provider that
// exports over OTLP/HTTP every OTEL_METRIC_EXPORT_INTERVAL (the SDK reads
// it, and the exporter its OTEL_EXPORTER_OTLP_ variables). flush sends
// what is pending and stops it.
func setupMetrics(ctx context.Context, getenv func(string) string, res *resource.Resource) (flush func(context.Context) error, err error) {
	noop := func(context.Context) error { return nil }
	if !MetricsEnabled(getenv) {
		return noop, nil
	}
	switch exp := strings.ToLower(strings.TrimSpace(getenv("OTEL_METRICS_EXPORTER"))); exp {
	case "", "otlp":
	default:
		return noop, fmt.Errorf("OTEL_METRICS_EXPORTER: %q is not one of otlp, none", exp)
	}
	exporter, err := otlpmetrichttp.New(ctx)
	if err != nil {
		return noop, fmt.Errorf("tracing: OTLP metrics exporter: %w", err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewPeriodicReader(exporter)), sdkmetric.WithResource(res))
	otel.SetMeterProvider(mp)
	metered.Store(true)
	return mp.Shutdown, nil
}

// TraceParent returns the W3C traceparent of ctx's span ("" when ctx has
// none): what a job's metadata and a lead's row keep of the request that
// started them. It holds ids and flags only.
func TraceParent(ctx context.Context) string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ""
	}
	c := propagation.MapCarrier{}
	propagator.Inject(ctx, c)
	return c["traceparent"]
}

// WithTraceParent returns ctx with the remote span context of traceparent
// as its parent (ctx itself when traceparent is empty or not valid).
func WithTraceParent(ctx context.Context, traceparent string) context.Context {
	if traceparent == "" {
		return ctx
	}
	return propagator.Extract(ctx, propagation.MapCarrier{"traceparent": traceparent})
}

// Transport wraps base (nil for http.DefaultTransport) so that every call
// is a client span named "METHOD name" (name: the downstream called, such
// as crm) whose context goes out as traceparent. The span's URL keeps the
// origin only (see scrub): paths hold references, queries and user-info
// may hold credentials.
func Transport(base http.RoundTripper, name string) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	return otelhttp.NewTransport(base,
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string { return r.Method + " " + name }),
		otelhttp.WithPropagators(propagator),
	)
}

// exporting is set once Setup installed a tracer provider that exports:
// until then (and in processes that export nothing) Handler and TracePool
// make no spans, which would all be dropped, and cost every request and
// statement their making.
var exporting atomic.Bool

// Handler wraps h, a server's handler, so that every request is a server
// span, the child of the request's traceparent when it has one, except the
// probes of the paths untraced (such as /healthz, polled every few
// seconds). The span is named by its method (HTTP for a method the API
// does not know) until the router names it by route (NameByRoute): a
// request that matches no route keeps that name, never its path. Set up
// after Setup; while nothing is exported, it only takes the request's
// traceparent into its context.
//
// otelhttp's metrics of the requests are not recorded: their attributes
// hold the request's Host as sent (a series of the caller's choosing);
// /metrics has the API's own.
func Handler(h http.Handler, untraced ...string) http.Handler {
	if !exporting.Load() {
		// No span can be recorded: the request's traceparent alone is
		// taken, for the calls it leads to.
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("traceparent") != "" {
				r = r.WithContext(propagator.Extract(r.Context(), propagation.HeaderCarrier(r.Header)))
			}
			h.ServeHTTP(w, r)
		})
	}
	return otelhttp.NewHandler(h, "http.server",
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string { return methodName(r.Method) }),
		otelhttp.WithPropagators(propagator),
		otelhttp.WithMeterProvider(noopmetric.NewMeterProvider()),
		otelhttp.WithFilter(func(r *http.Request) bool { return !slices.Contains(untraced, r.URL.Path) }),
	)
}

// NameByRoute names the server span of ctx "METHOD route", route being the
// template the router matched (such as /v1/operations/:key, never the path
// with a key in it) and METHOD the request's (HTTP for one the API does not
// know), and records the route as http.route and url.path. Nothing is done
// for an empty route (no route matched).
func NameByRoute(ctx context.Context, method, route string) {
	span := trace.SpanFromContext(ctx)
	if route == "" || !span.IsRecording() {
		return
	}
	span.SetName(methodName(method) + " " + route)
	span.SetAttributes(semconv.HTTPRoute(route), semconv.URLPath(route))
}

// methodName is a request's method as a span's name says it: one of the
// methods of HTTP, else HTTP (OpenTelemetry's name for any other method),
// never what a caller made up.
func methodName(method string) string {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions, http.MethodConnect, http.MethodTrace:
		return method
	}
	return "HTTP"
}

// TracePool makes every statement of the pool cfg configures a client span
// of the span in its context (none without one), with the statement's SQL
// and never its parameters (they hold personal data), nor the connection's
// user or address. It does nothing unless Setup set up an export first.
func TracePool(cfg *pgxpool.Config) {
	if !exporting.Load() {
		return // no span can be recorded: none is made
	}
	cfg.ConnConfig.Tracer = otelpgx.NewTracer(otelpgx.WithDisableConnectionDetailsInAttributes())
}

// Grouped records, in the trace of ctx (when its span is recording), the
// statement one group ran for it and others (a group commit, a grouped
// read or save): a client span named name from start to end, with the
// group's size and its error. The statement itself runs on the group's own
// context, which no single trace owns.
func Grouped(ctx context.Context, name string, start, end time.Time, size int, err error) {
	if !trace.SpanFromContext(ctx).IsRecording() {
		return
	}
	_, span := Tracer().Start(ctx, name, trace.WithSpanKind(trace.SpanKindClient), trace.WithTimestamp(start),
		trace.WithAttributes(semconv.DBSystemNamePostgreSQL, attribute.Int("leadintake.group_size", size)))
	if err != nil {
		span.SetStatus(codes.Error, "group failed")
	}
	span.End(trace.WithTimestamp(end))
}
