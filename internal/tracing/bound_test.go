package tracing

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"unicode/utf8"
	"unsafe"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// boundedProvider is a bounded provider exporting to an in-memory
// exporter at once, with Setup's limits, made the global one for the test.
func boundedProvider(t *testing.T) (trace.TracerProvider, *tracetest.InMemoryExporter) {
	t.Helper()
	resetGlobal(t)
	mem := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(mem), sdktrace.WithRawSpanLimits(spanLimits()))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	p := bounded{tp}
	otel.SetTracerProvider(p)
	otel.SetTextMapPropagator(propagator)
	return p, mem
}

// within reports whether s's bytes lie within whole's: a cut of whole that
// would keep whole in memory.
func within(s, whole string) bool {
	if len(s) == 0 || len(whole) == 0 {
		return false
	}
	p, start := uintptr(unsafe.Pointer(unsafe.StringData(s))), uintptr(unsafe.Pointer(unsafe.StringData(whole)))
	return p >= start && p < start+uintptr(len(whole))
}

// spanStrings are the names and values a span holds, its resource aside.
func spanStrings(s tracetest.SpanStub) []string {
	out := []string{s.Name, s.Status.Description}
	add := func(kvs []attribute.KeyValue) {
		for _, kv := range kvs {
			out = append(out, string(kv.Key))
			if kv.Value.Type() == attribute.STRINGSLICE {
				out = append(out, kv.Value.AsStringSlice()...)
				continue
			}
			out = append(out, kv.Value.AsString())
		}
	}
	add(s.Attributes)
	for _, e := range s.Events {
		out = append(out, e.Name)
		add(e.Attributes)
	}
	for _, l := range s.Links {
		add(l.Attributes)
	}
	return out
}

// checkBounded fails t for a span holding a name or value over
// maxValueBytes, over maxSpanBytes in all, a cut that is not UTF-8, or a
// string that lies within one of inputs.
func checkBounded(t *testing.T, s tracetest.SpanStub, inputs ...string) {
	t.Helper()
	sum := 0
	for _, v := range spanStrings(s) {
		sum += len(v)
		if len(v) > maxValueBytes {
			t.Errorf("span %.40q: a name or value of %d bytes: %.40q...", s.Name, len(v), v)
		}
		if !utf8.ValidString(v) {
			t.Errorf("span %.40q: %.40q... is not UTF-8", s.Name, v)
		}
		for _, in := range inputs {
			if within(v, in) {
				t.Errorf("span %.40q: %.40q... is a slice of an input of %d bytes: the input stays in memory", s.Name, v, len(in))
			}
		}
	}
	if sum > maxSpanBytes {
		t.Errorf("span %.40q: %d bytes of names and values, over %d", s.Name, sum, maxSpanBytes)
	}
}

// Whatever a span is given, by whatever method, it keeps at most 4 KiB of
// a name or value and 16 KiB in all, cut on a character's boundary and
// copied: nothing it keeps holds the large input in memory.
func TestBoundedSpans(t *testing.T) {
	p, mem := boundedProvider(t)
	// 3-byte characters, so that a cut at 4096 bytes falls within one.
	big := strings.Repeat("é€", 300<<10)
	short := big[:5] // a short slice of a large string
	many := make([]attribute.KeyValue, 0, 200)
	for i := range 200 {
		many = append(many, attribute.Int("n"+strings.Repeat("x", i%7), i))
	}
	ctx, span := p.Tracer("test").Start(context.Background(), big,
		trace.WithAttributes(attribute.String("big", big), attribute.String("short", short),
			attribute.StringSlice("slice", []string{big, big, short}), attribute.String(big, "key")),
		trace.WithLinks(trace.Link{Attributes: []attribute.KeyValue{attribute.String("link", big)}}))
	if trace.SpanFromContext(ctx) != span {
		t.Fatal("the context's span is not the bounded one")
	}
	span.SetName(big + "renamed")
	span.SetAttributes(many...)
	span.SetAttributes(attribute.String("late", big))
	span.AddEvent(big, trace.WithAttributes(attribute.String("event", big)))
	span.RecordError(errors.New(big), trace.WithStackTrace(true))
	span.SetStatus(codes.Error, big)
	span.AddLink(trace.Link{Attributes: []attribute.KeyValue{attribute.String("added", big)}})
	// A child started from the span's own provider (as otelhttp does) is
	// bounded too.
	_, child := span.TracerProvider().Tracer("child").Start(ctx, big, trace.WithAttributes(attribute.String("child", big)))
	child.End()
	span.End()

	spans := mem.GetSpans()
	if len(spans) != 2 {
		t.Fatalf("%d spans", len(spans))
	}
	for _, s := range spans {
		checkBounded(t, s, big)
	}
	// Within the budget, what fits is kept as it was.
	s := spans[1]
	if got := s.Attributes[0]; got.Key != "big" || len(got.Value.AsString()) < maxValueBytes-2 || !strings.HasPrefix(big, got.Value.AsString()) {
		t.Errorf("first attribute %s = %.40q... (%d bytes), want big's first 4 KiB", got.Key, got.Value.AsString(), len(got.Value.AsString()))
	}
	if got := s.Attributes[1]; got.Key != "short" || got.Value.AsString() != short {
		t.Errorf("second attribute %s = %q, want %q", got.Key, got.Value.AsString(), short)
	}
	if s.Parent.IsValid() || !spans[0].Parent.IsValid() {
		t.Error("the child is not the span's child")
	}
}

// A span's budget is shared by everything it records: past it, attributes
// are cut, then left out, and numbers count too.
func TestBoundedSpanBudget(t *testing.T) {
	p, mem := boundedProvider(t)
	_, span := p.Tracer("test").Start(context.Background(), "work")
	for i := range 10 {
		span.SetAttributes(attribute.String(string(rune('a'+i)), strings.Repeat("v", 3<<10)))
	}
	span.SetAttributes(attribute.Int("number", 1))
	span.End()
	s := mem.GetSpans()[0]
	checkBounded(t, s)
	keys := map[string]int{}
	for _, a := range s.Attributes {
		keys[string(a.Key)] = len(a.Value.AsString())
	}
	if len(keys) != 6 || keys["a"] != 3<<10 || keys["e"] != 3<<10 || keys["f"] == 0 || keys["f"] == 3<<10 {
		t.Errorf("attributes kept, by length: %v; want a to e whole, f cut, the rest left out", keys)
	}
}

// A request's span is named by a method HTTP knows, else HTTP, and by the
// route when one matched: never by what the caller sent. Its attributes
// are bounded, however long its method, path, Host, User-Agent and
// X-Forwarded-For.
func TestHandlerBoundsWhatARequestSends(t *testing.T) {
	_, mem := boundedProvider(t)
	prev := exporting.Swap(true)
	t.Cleanup(func() { exporting.Store(prev) })
	big := strings.Repeat("a", 512<<10)
	h := Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/leads" {
			NameByRoute(r.Context(), r.Method, "/v1/leads")
		}
	}))
	var inputs []string
	for _, c := range []struct {
		method, path, want string
		header             string
	}{
		{"POST", "/v1/leads", "POST /v1/leads", "User-Agent"},
		{"X" + strings.ToUpper(big), "/v1/leads", "HTTP /v1/leads", "X-Forwarded-For"},
		{"GET", "/" + big, "GET", "Host"},
		{"BREW", "/" + big, "HTTP", "User-Agent"},
	} {
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.Method, req.URL.Path, req.RequestURI = c.method, c.path, c.path
		if c.header == "Host" {
			req.Host = big
		} else {
			req.Header.Set(c.header, big)
		}
		req.Header.Set("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
		inputs = append(inputs, c.method, c.path, req.Host, req.Header.Get(c.header))
		h.ServeHTTP(httptest.NewRecorder(), req)
		spans := mem.GetSpans()
		if len(spans) == 0 {
			t.Fatalf("%.20s %.20s: no span", c.method, c.path)
		}
		s := spans[len(spans)-1]
		if s.Name != c.want {
			t.Errorf("%.20s %.20s: span named %.40q, want %q", c.method, c.path, s.Name, c.want)
		}
	}
	for _, s := range mem.GetSpans() {
		checkBounded(t, s, inputs...)
	}
}
