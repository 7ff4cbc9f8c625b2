package tracing

import (
	"context"
	"net/url"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
)

// scrub is an exporter that removes, from every span before next exports
// it, what the instrumentation libraries record of a request beyond its
// route and what they may record of a person: a server span's url.path is
// its route (or nothing, when no route matched), a URL keeps its origin
// only (a path holds references, a query or user-info credentials), the
// client's address, the peer's and the user agent go, and a database
// error's text (which may quote a value) is replaced.
type scrub struct{ next sdktrace.SpanExporter }

// dropped are the attributes scrub removes wherever they are.
var dropped = map[attribute.Key]bool{
	semconv.URLQueryKey:           true,
	semconv.ClientAddressKey:      true,
	semconv.ClientPortKey:         true,
	semconv.NetworkPeerAddressKey: true,
	semconv.NetworkPeerPortKey:    true,
	semconv.UserAgentOriginalKey:  true,
	semconv.UserNameKey:           true,
}

// droppedPrefixes are the prefixes of attributes scrub removes: headers
// (they hold tokens) and statement parameters (they hold personal data).
var droppedPrefixes = []string{"http.request.header.", "http.response.header.", "db.query.parameter.", "db.operation.parameter."}

func (s scrub) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	out := make([]sdktrace.ReadOnlySpan, len(spans))
	for i, sp := range spans {
		stub := tracetest.SpanStubFromReadOnlySpan(sp)
		db := isDatabase(stub.Attributes)
		stub.Attributes = scrubAttrs(stub.Attributes)
		for j := range stub.Events {
			stub.Events[j].Attributes = scrubAttrs(stub.Events[j].Attributes)
			if db {
				stub.Events[j].Attributes = dropKey(stub.Events[j].Attributes, semconv.ExceptionMessageKey)
			}
		}
		if db && stub.Status.Description != "" {
			// A database error may quote a value it was given ("invalid
			// input syntax for type uuid: ..."); its SQLSTATE stays, as
			// an attribute.
			stub.Status.Description = "database error"
		}
		for j := range stub.Links {
			stub.Links[j].Attributes = scrubAttrs(stub.Links[j].Attributes)
		}
		out[i] = stub.Snapshot()
	}
	return s.next.ExportSpans(ctx, out)
}

func (s scrub) Shutdown(ctx context.Context) error { return s.next.Shutdown(ctx) }

// isDatabase reports whether attrs are a database client span's.
func isDatabase(attrs []attribute.KeyValue) bool {
	for _, a := range attrs {
		if a.Key == semconv.DBSystemNameKey {
			return true
		}
	}
	return false
}

// dropKey returns attrs without key.
func dropKey(attrs []attribute.KeyValue, key attribute.Key) []attribute.KeyValue {
	out := attrs[:0:0]
	for _, a := range attrs {
		if a.Key != key {
			out = append(out, a)
		}
	}
	return out
}

// scrubAttrs returns attrs without what scrub removes.
func scrubAttrs(attrs []attribute.KeyValue) []attribute.KeyValue {
	route := ""
	for _, a := range attrs {
		if a.Key == semconv.HTTPRouteKey {
			route = a.Value.AsString()
		}
	}
	out := attrs[:0:0]
	for _, a := range attrs {
		switch {
		case dropped[a.Key] || hasDroppedPrefix(string(a.Key)):
			continue
		case a.Key == semconv.URLPathKey:
			if route == "" {
				continue
			}
			a = semconv.URLPath(route)
		case a.Key == semconv.URLFullKey:
			a = semconv.URLFull(origin(a.Value.AsString()))
		}
		out = append(out, a)
	}
	return out
}

func hasDroppedPrefix(key string) bool {
	for _, p := range droppedPrefixes {
		if strings.HasPrefix(key, p) {
			return true
		}
	}
	return false
}

// origin returns scheme://host of a URL ("" when it does not parse).
func origin(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return ""
	}
	return u.Scheme + "://" + u.Host
}
