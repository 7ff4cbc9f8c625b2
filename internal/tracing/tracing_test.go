package tracing

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	noopmetric "go.opentelemetry.io/otel/metric/noop"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	collectormetrics "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	"google.golang.org/protobuf/proto"

	"github.com/leadintake/leadintake/internal/dbtest"
	"github.com/leadintake/leadintake/internal/otlpsink"
)

func env(kv ...string) func(string) string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) string { return m[k] }
}

func TestEnabled(t *testing.T) {
	for _, c := range []struct {
		name string
		env  []string
		want bool
	}{
		{"nothing set", nil, false},
		{"only a sampler", []string{"OTEL_TRACES_SAMPLER", "always_on", "OTEL_SERVICE_NAME", "x"}, false},
		{"endpoint", []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318"}, true},
		{"traces endpoint", []string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://collector:4318/v1/traces"}, true},
		{"exporter otlp", []string{"OTEL_TRACES_EXPORTER", "otlp"}, true},
		{"exporter none", []string{"OTEL_TRACES_EXPORTER", "none", "OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318"}, false},
		{"exporter NONE", []string{"OTEL_TRACES_EXPORTER", "NONE"}, false},
		{"sdk disabled", []string{"OTEL_SDK_DISABLED", "true", "OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318"}, false},
		{"sdk disabled TRUE", []string{"OTEL_SDK_DISABLED", "TRUE", "OTEL_TRACES_EXPORTER", "otlp"}, false},
		{"sdk not disabled", []string{"OTEL_SDK_DISABLED", "false", "OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318"}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := Enabled(env(c.env...)); got != c.want {
				t.Fatalf("Enabled = %v, want %v", got, c.want)
			}
		})
	}
}

// resetGlobal restores OpenTelemetry's no-op tracer provider after a test.
func resetGlobal(t *testing.T) {
	t.Cleanup(func() { otel.SetTracerProvider(noop.NewTracerProvider()) })
}

// TestDisabledOpensNothing: with the SDK disabled, or the exporter none,
// nothing reaches an endpoint that the other variables name, spans or not.
func TestDisabledOpensNothing(t *testing.T) {
	for _, off := range [][2]string{{"OTEL_SDK_DISABLED", "true"}, {"OTEL_TRACES_EXPORTER", "none"}} {
		t.Run(off[0], func(t *testing.T) {
			resetGlobal(t)
			var hits atomic.Int32
			ts := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
			defer ts.Close()
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", ts.URL)
			t.Setenv(off[0], off[1])
			shutdown, enabled, err := Setup(context.Background(), "leadintake-test", Options{})
			if err != nil || enabled {
				t.Fatalf("Setup: enabled %v, err %v", enabled, err)
			}
			_, span := Tracer().Start(context.Background(), "work")
			if span.IsRecording() {
				t.Error("a span records with tracing off")
			}
			span.End()
			if err := shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			if n := hits.Load(); n != 0 {
				t.Fatalf("%d requests reached the endpoint", n)
			}
		})
	}
}

// TestExportsToEndpoint: with an endpoint, spans reach it by the end of
// shutdown, under OTEL_SERVICE_NAME or the default service name, and an
// incoming traceparent makes them children.
func TestExportsToEndpoint(t *testing.T) {
	for _, c := range []struct{ serviceEnv, want string }{{"", "leadintake-test"}, {"renamed", "renamed"}} {
		t.Run(c.want, func(t *testing.T) {
			resetGlobal(t)
			rcv, err := otlpsink.Start(false)
			if err != nil {
				t.Fatal(err)
			}
			defer rcv.Close()
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rcv.Endpoint())
			t.Setenv("OTEL_SERVICE_NAME", c.serviceEnv)
			shutdown, enabled, err := Setup(context.Background(), "leadintake-test", Options{})
			if err != nil || !enabled {
				t.Fatalf("Setup: enabled %v, err %v", enabled, err)
			}
			const parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
			ctx := WithTraceParent(context.Background(), parent)
			ctx, span := Tracer().Start(ctx, "work")
			if tp := TraceParent(ctx); !strings.HasPrefix(tp, "00-0af7651916cd43dd8448eb211c80319c-") || tp == parent {
				t.Errorf("TraceParent = %q, want the trace of %q and a span of its own", tp, parent)
			}
			span.End()
			ctx2, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := shutdown(ctx2); err != nil {
				t.Fatal(err)
			}
			spans := rcv.Spans()
			if len(spans) != 1 {
				t.Fatalf("got %d spans, want 1", len(spans))
			}
			s := spans[0]
			if s.TraceID != "0af7651916cd43dd8448eb211c80319c" || s.ParentSpanID != "b7ad6b7169203331" || s.Service != c.want {
				t.Fatalf("span %+v: want trace 0af7…, parent b7ad…, service %s", s, c.want)
			}
		})
	}
}

// TestSamplerFromEnvironment: the SDK's sampler reads OTEL_TRACES_SAMPLER;
// parent-based, a sampled parent is followed whatever the ratio.
func TestSamplerFromEnvironment(t *testing.T) {
	resetGlobal(t)
	t.Setenv("OTEL_TRACES_EXPORTER", "otlp")
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
	t.Setenv("OTEL_TRACES_SAMPLER", "parentbased_traceidratio")
	t.Setenv("OTEL_TRACES_SAMPLER_ARG", "0")
	shutdown, _, err := Setup(context.Background(), "leadintake-test", Options{Exporter: tracetest.NewInMemoryExporter()})
	if err != nil {
		t.Fatal(err)
	}
	defer shutdown(context.Background())
	_, root := Tracer().Start(context.Background(), "root")
	if root.SpanContext().IsSampled() {
		t.Error("a root span is sampled at ratio 0")
	}
	ctx := WithTraceParent(context.Background(), "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	_, child := Tracer().Start(ctx, "child")
	if !child.SpanContext().IsSampled() {
		t.Error("the child of a sampled parent is not sampled")
	}
}

func TestWithTraceParentInvalid(t *testing.T) {
	for _, tp := range []string{"", "garbage", "00-00000000000000000000000000000000-b7ad6b7169203331-01"} {
		ctx := WithTraceParent(context.Background(), tp)
		if trace.SpanContextFromContext(ctx).IsValid() {
			t.Errorf("%q gave a valid span context", tp)
		}
		if got := TraceParent(ctx); got != "" {
			t.Errorf("TraceParent after %q = %q", tp, got)
		}
	}
}

// TestScrub: what scrub exports of a server and a client span.
func TestScrub(t *testing.T) {
	mem := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(scrub{mem}))
	defer tp.Shutdown(context.Background())
	tr := tp.Tracer("test")
	_, server := tr.Start(context.Background(), "GET /v1/operations/:key", trace.WithAttributes(
		semconv.URLPath("/v1/operations/secret-key-1"), semconv.URLQuery("token=abc"),
		semconv.ClientAddress("203.0.113.9"), semconv.UserAgentOriginal("Mozilla"),
		attribute.String("http.request.header.authorization", "Bearer tok"),
	))
	server.SetAttributes(semconv.HTTPRoute("/v1/operations/:key"))
	server.AddEvent("e", trace.WithAttributes(semconv.URLFull("https://u:pw@crm.example/leads/li_x?token=abc")))
	server.End()
	_, client := tr.Start(context.Background(), "PUT crm", trace.WithAttributes(
		semconv.URLFull("https://user:pw@crm.example:8443/crm/leads/li_x?sig=abc"), semconv.URLPath("/crm/leads/li_x"),
	))
	client.End()

	got := mem.GetSpans()
	if len(got) != 2 {
		t.Fatalf("%d spans", len(got))
	}
	want := []map[string]string{
		{"url.path": "/v1/operations/:key", "http.route": "/v1/operations/:key"},
		{"url.full": "https://crm.example:8443"},
	}
	for i, s := range got {
		have := map[string]string{}
		for _, a := range s.Attributes {
			have[string(a.Key)] = a.Value.String()
		}
		for _, e := range s.Events {
			for _, a := range e.Attributes {
				have[string(a.Key)] = a.Value.String()
			}
		}
		if i == 0 {
			want[i]["url.full"] = "https://crm.example"
		}
		if len(have) != len(want[i]) {
			t.Errorf("span %s: attributes %v, want %v", s.Name, have, want[i])
			continue
		}
		for k, v := range want[i] {
			if have[k] != v {
				t.Errorf("span %s: %s = %q, want %q", s.Name, k, have[k], v)
			}
		}
	}
}

// TestScrubDatabaseError: a statement's error text, which may quote a
// value, is not exported; its SQLSTATE is.
func TestScrubDatabaseError(t *testing.T) {
	mem := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(scrub{mem}))
	defer tp.Shutdown(context.Background())
	_, span := tp.Tracer("test").Start(context.Background(), "INSERT", trace.WithAttributes(
		semconv.DBSystemNamePostgreSQL, attribute.String("db.response.status_code", "22P02")))
	err := errors.New(`ERROR: invalid input syntax for type uuid: "ada@example.com" (SQLSTATE 22P02)`)
	span.RecordError(err)
	span.SetStatus(codes.Error, err.Error())
	span.End()
	got := mem.GetSpans()[0]
	if strings.Contains(got.Status.Description, "ada@") {
		t.Errorf("status %q", got.Status.Description)
	}
	for _, e := range got.Events {
		for _, a := range e.Attributes {
			if strings.Contains(a.Value.String(), "ada@") {
				t.Errorf("event %s: %s = %q", e.Name, a.Key, a.Value.String())
			}
		}
	}
	if len(got.Attributes) != 2 {
		t.Errorf("attributes %v, want db.system.name and the SQLSTATE", got.Attributes)
	}
}

func TestMetricsEnabled(t *testing.T) {
	for _, c := range []struct {
		name string
		env  []string
		want bool
	}{
		{"nothing set", nil, false},
		{"only the traces' endpoint", []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://jaeger:4318"}, false},
		{"metrics endpoint", []string{"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "http://collector:4318/v1/metrics"}, true},
		{"exporter otlp", []string{"OTEL_METRICS_EXPORTER", "otlp", "OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318"}, true},
		{"exporter none", []string{"OTEL_METRICS_EXPORTER", "none", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "http://collector:4318/v1/metrics"}, false},
		{"sdk disabled", []string{"OTEL_SDK_DISABLED", "true", "OTEL_METRICS_EXPORTER", "otlp"}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := MetricsEnabled(env(c.env...)); got != c.want {
				t.Fatalf("MetricsEnabled = %v, want %v", got, c.want)
			}
		})
	}
}

// TestPoolStats: with a metrics endpoint, the pool's statistics reach it
// by the end of shutdown; without one, RecordPoolStats sets up nothing.
func TestPoolStats(t *testing.T) {
	t.Cleanup(func() {
		otel.SetMeterProvider(noopmetric.NewMeterProvider())
		metered.Store(false)
	})
	_, pool := dbtest.New(t)
	if err := RecordPoolStats(pool); err != nil || metered.Load() {
		t.Fatalf("without a meter provider: %v", err)
	}

	var mu sync.Mutex
	var names []string
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		var msg collectormetrics.ExportMetricsServiceRequest
		if r.URL.Path != "/v1/metrics" || proto.Unmarshal(raw, &msg) != nil {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		mu.Lock()
		for _, rm := range msg.GetResourceMetrics() {
			for _, sm := range rm.GetScopeMetrics() {
				for _, m := range sm.GetMetrics() {
					names = append(names, m.GetName())
				}
			}
		}
		mu.Unlock()
	}))
	defer ts.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", ts.URL+"/v1/metrics")
	shutdown, traced, err := Setup(context.Background(), "leadintake-test", Options{})
	if err != nil || traced {
		t.Fatalf("Setup: traced %v, err %v", traced, err)
	}
	if err := RecordPoolStats(pool); err != nil {
		t.Fatal(err)
	}
	if err := pool.Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Contains(names, "pgxpool.acquires") || !slices.Contains(names, "pgxpool.max_connections") {
		t.Fatalf("metrics received %q, want the pool's", names)
	}
}

// TestHandler: a request is a server span, the child of its traceparent,
// named by route once the router says it; the untraced paths are not.
func TestHandler(t *testing.T) {
	resetGlobal(t)
	mem := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(scrub{mem}))
	defer tp.Shutdown(context.Background())
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagator)
	h := Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		NameByRoute(r.Context(), r.Method, "/v1/operations/:key")
	}), "/healthz")
	for _, path := range []string{"/healthz", "/v1/operations/secret-key-0001?x=1"} {
		req := httptest.NewRequest(http.MethodGet, path, nil)
		req.Header.Set("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
		h.ServeHTTP(httptest.NewRecorder(), req)
	}
	spans := mem.GetSpans()
	if len(spans) != 1 {
		t.Fatalf("%d spans, want 1 (none for /healthz)", len(spans))
	}
	s := spans[0]
	if s.Name != "GET /v1/operations/:key" || s.Parent.SpanID().String() != "b7ad6b7169203331" || s.SpanKind != trace.SpanKindServer {
		t.Errorf("span %q, parent %s, kind %s", s.Name, s.Parent.SpanID(), s.SpanKind)
	}
	for _, a := range s.Attributes {
		if v := a.Value.String(); strings.Contains(v, "secret-key") || strings.Contains(v, "x=1") {
			t.Errorf("%s = %q", a.Key, v)
		}
	}
}
