package tracing

import (
	"context"
	"fmt"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
)

// What one span keeps of what it is given, whoever records it: otelhttp's
// server spans record a request's method, path, Host, User-Agent and
// X-Forwarded-For as the caller sent them (up to the listener's 1 MiB of
// headers each), and a span waits in memory, with all it holds, until it
// is exported.
const (
	// maxValueBytes bounds a span's name, an event's name, the status's
	// description, and each attribute's key and value (of a string slice,
	// each element).
	maxValueBytes = 4 << 10
	// maxSpanBytes bounds a span's names and values in all: its name, the
	// keys and values of its attributes, of its events' and links'
	// attributes, its events' names and its status's description. What
	// comes once the budget is spent is cut or left out.
	maxSpanBytes = 16 << 10
	// scalarBytes is what a number or a boolean counts for.
	scalarBytes = 8
)

// spanLimits are the SDK's limits on a span's counts (OTEL_SPAN_*_LIMIT may
// lower them, not raise them), and its own bound on a value's length, in
// characters (the bounded provider's, in bytes, comes first).
func spanLimits() sdktrace.SpanLimits {
	l := sdktrace.NewSpanLimits()
	lower := func(v *int, most int) {
		if *v < 0 || *v > most {
			*v = most
		}
	}
	lower(&l.AttributeValueLengthLimit, maxValueBytes)
	lower(&l.AttributeCountLimit, 64)
	lower(&l.EventCountLimit, 32)
	lower(&l.LinkCountLimit, 32)
	lower(&l.AttributePerEventCountLimit, 16)
	lower(&l.AttributePerLinkCountLimit, 16)
	return l
}

// bounded is a tracer provider whose spans keep at most maxValueBytes of
// any one name or value and maxSpanBytes in all. What is cut is copied
// before the SDK sees it: the SDK's own limit (spanLimits) counts
// characters, and keeps a cut string as a slice of the whole, which holds
// the whole in memory until the span is exported. Every string value is
// copied, cut or not: a short value may be a slice of a long one too (a
// request's method or path, of its request line).
type bounded struct {
	trace.TracerProvider
}

// Tracer returns the named tracer of the provider, bounded.
func (p bounded) Tracer(name string, opts ...trace.TracerOption) trace.Tracer {
	return boundedTracer{Tracer: p.TracerProvider.Tracer(name, opts...), provider: p}
}

type boundedTracer struct {
	trace.Tracer
	provider bounded
}

// Start starts a span with its name, attributes and links bounded. The
// span in the context it returns is the bounded one, so that whatever
// records on it later (the router's name, otelhttp's status) is bounded
// too.
func (t boundedTracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	cfg := trace.NewSpanStartConfig(opts...)
	s := &boundedSpan{provider: t.provider, left: maxSpanBytes}
	name = s.takeName(name, 0)
	s.nameLen = len(name)
	start := []trace.SpanStartOption{trace.WithSpanKind(cfg.SpanKind())}
	if attrs := cfg.Attributes(); len(attrs) > 0 {
		start = append(start, trace.WithAttributes(s.takeAttrs(attrs)...))
	}
	if ts := cfg.Timestamp(); !ts.IsZero() {
		start = append(start, trace.WithTimestamp(ts))
	}
	if cfg.NewRoot() {
		start = append(start, trace.WithNewRoot())
	}
	for _, l := range cfg.Links() {
		l.Attributes = s.takeAttrs(l.Attributes)
		start = append(start, trace.WithLinks(l))
	}
	ctx, s.Span = t.Tracer.Start(ctx, name, start...)
	return trace.ContextWithSpan(ctx, s), s
}

// boundedSpan is a span of a bounded provider: what it is given is cut
// and copied, within what is left of its budget, before the SDK's span
// keeps it.
type boundedSpan struct {
	trace.Span
	provider bounded

	mu sync.Mutex
	// left is how many bytes of names and values the span may still take.
	left int
	// nameLen and statusLen are those of the name and the status's
	// description in force: a new one counts for what it adds.
	nameLen, statusLen int
}

// TracerProvider returns the bounded provider: spans started from this one
// are bounded too.
func (s *boundedSpan) TracerProvider() trace.TracerProvider { return s.provider }

func (s *boundedSpan) SetName(name string) {
	if !s.Span.IsRecording() {
		return
	}
	s.mu.Lock()
	name = s.takeName(name, s.nameLen)
	s.nameLen = len(name)
	s.mu.Unlock()
	s.Span.SetName(name)
}

func (s *boundedSpan) SetStatus(code codes.Code, description string) {
	if !s.Span.IsRecording() {
		return
	}
	s.mu.Lock()
	description = s.takeName(description, s.statusLen)
	s.statusLen = len(description)
	s.mu.Unlock()
	s.Span.SetStatus(code, description)
}

func (s *boundedSpan) SetAttributes(kv ...attribute.KeyValue) {
	if !s.Span.IsRecording() || len(kv) == 0 {
		return
	}
	s.mu.Lock()
	kv = s.takeAttrs(kv)
	s.mu.Unlock()
	s.Span.SetAttributes(kv...)
}

func (s *boundedSpan) AddEvent(name string, opts ...trace.EventOption) {
	if !s.Span.IsRecording() {
		return
	}
	cfg := trace.NewEventConfig(opts...)
	s.mu.Lock()
	name = s.takeName(name, 0)
	event := []trace.EventOption{trace.WithAttributes(s.takeAttrs(cfg.Attributes())...)}
	s.mu.Unlock()
	if ts := cfg.Timestamp(); !ts.IsZero() {
		event = append(event, trace.WithTimestamp(ts))
	}
	s.Span.AddEvent(name, event...)
}

// RecordError records err as the SDK does (an exception event with the
// error's type and message, and the stack when asked), bounded.
func (s *boundedSpan) RecordError(err error, opts ...trace.EventOption) {
	if err == nil || !s.Span.IsRecording() {
		return
	}
	opts = append(opts, trace.WithAttributes(semconv.ExceptionType(typeName(err)), semconv.ExceptionMessage(err.Error())))
	if cfg := trace.NewEventConfig(opts...); cfg.StackTrace() {
		stack := make([]byte, 2048)
		opts = append(opts, trace.WithAttributes(semconv.ExceptionStacktrace(string(stack[:runtime.Stack(stack, false)]))))
	}
	s.AddEvent(semconv.ExceptionEventName, opts...)
}

func (s *boundedSpan) AddLink(link trace.Link) {
	if !s.Span.IsRecording() {
		return
	}
	s.mu.Lock()
	link.Attributes = s.takeAttrs(link.Attributes)
	s.mu.Unlock()
	s.Span.AddLink(link)
}

// takeName returns name cut to maxValueBytes and to what the budget has
// left beyond replaced (the length of the name it replaces), copied, and
// spends it. The caller holds s.mu, or has the span to itself.
func (s *boundedSpan) takeName(name string, replaced int) string {
	name = cut(name, min(maxValueBytes, s.left+replaced))
	s.left -= max(0, len(name)-replaced)
	return strings.Clone(name)
}

// takeAttrs returns attrs bounded, each string copied, leaving out what
// the budget has no room for, and spends it. The caller holds s.mu, or has
// the span to itself.
func (s *boundedSpan) takeAttrs(attrs []attribute.KeyValue) []attribute.KeyValue {
	out := make([]attribute.KeyValue, 0, len(attrs))
	for _, a := range attrs {
		key := string(a.Key)
		if len(key) > maxValueBytes {
			key = strings.Clone(cut(key, maxValueBytes))
		}
		room := s.left - len(key)
		if room <= 0 {
			continue
		}
		v, size, ok := boundValue(a.Value, room)
		if !ok {
			continue
		}
		s.left -= len(key) + size
		out = append(out, attribute.KeyValue{Key: attribute.Key(key), Value: v})
	}
	return out
}

// boundValue returns v within room bytes (a string cut to at most
// maxValueBytes, a slice of strings each cut and as many as fit), copied,
// and its size; ok is false when it cannot fit. Composite values (slices
// of values, maps) are kept as their text.
func boundValue(v attribute.Value, room int) (out attribute.Value, size int, ok bool) {
	switch v.Type() {
	case attribute.EMPTY:
		return v, 0, true
	case attribute.BOOL, attribute.INT64, attribute.FLOAT64:
		return v, scalarBytes, room >= scalarBytes
	case attribute.BOOLSLICE:
		size = scalarBytes * len(v.AsBoolSlice())
		return v, size, room >= size
	case attribute.INT64SLICE:
		size = scalarBytes * len(v.AsInt64Slice())
		return v, size, room >= size
	case attribute.FLOAT64SLICE:
		size = scalarBytes * len(v.AsFloat64Slice())
		return v, size, room >= size
	case attribute.STRING:
		s := cut(v.AsString(), min(maxValueBytes, room))
		return attribute.StringValue(strings.Clone(s)), len(s), true
	case attribute.BYTESLICE:
		b := v.AsByteSlice()
		b = b[:min(len(b), maxValueBytes, room)]
		return attribute.ByteSliceValue(b), len(b), true
	case attribute.STRINGSLICE:
		var kept []string
		for _, e := range v.AsStringSlice() {
			if room-size <= 0 {
				break
			}
			e = cut(e, min(maxValueBytes, room-size))
			kept = append(kept, strings.Clone(e))
			size += max(len(e), 1)
		}
		return attribute.StringSliceValue(kept), size, true
	default:
		s := cut(v.String(), min(maxValueBytes, room))
		return attribute.StringValue(strings.Clone(s)), len(s), true
	}
}

// cut returns s cut to at most n bytes, not within a UTF-8 sequence.
func cut(s string, n int) string {
	if n <= 0 {
		return ""
	}
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// typeName is an error's type as the SDK names it in an exception event.
func typeName(err error) string {
	t := reflect.TypeOf(err)
	if t.PkgPath() == "" && t.Name() == "" {
		return t.String()
	}
	return fmt.Sprintf("%s.%s", t.PkgPath(), t.Name())
}
