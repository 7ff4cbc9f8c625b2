// Package otlpsink is an OTLP/HTTP trace receiver on 127.0.0.1: what
// leadintake's processes export to in tests and in the bench. It decodes
// every ExportTraceServiceRequest (protobuf, as otlptracehttp sends it),
// and keeps its spans or only counts them.
package otlpsink

import (
	"compress/gzip"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// Span is one received span, with the service that sent it.
type Span struct {
	Service string
	// TraceID and SpanID are hex, as in a traceparent; ParentSpanID is
	// empty for a root span.
	TraceID, SpanID, ParentSpanID string
	Name                          string
	Kind                          tracepb.Span_SpanKind
	// Attributes are the span's, by key, each value as text.
	Attributes map[string]string
	// Raw is the span as received, events and links included.
	Raw *tracepb.Span
	// Resource are the attributes of the span's resource, as text.
	Resource map[string]string
}

// Receiver is a running OTLP/HTTP receiver. Its methods are safe for
// concurrent use.
type Receiver struct {
	srv     *http.Server
	ln      net.Listener
	discard bool

	mu       sync.Mutex
	spans    []Span
	count    int
	requests int
}

// Start starts a receiver on 127.0.0.1; with discard, it counts the spans
// it receives and keeps none.
func Start(discard bool) (*Receiver, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &Receiver{ln: ln, discard: discard}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/traces", r.traces)
	r.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = r.srv.Serve(ln) }()
	return r, nil
}

// Endpoint is the receiver's base URL, for OTEL_EXPORTER_OTLP_ENDPOINT.
func (r *Receiver) Endpoint() string { return "http://" + r.ln.Addr().String() }

// Close stops the receiver.
func (r *Receiver) Close() error { return r.srv.Close() }

// Spans returns the spans received so far (none with discard).
func (r *Receiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Span(nil), r.spans...)
}

// Count returns how many spans were received, and in how many requests.
func (r *Receiver) Count() (spans, requests int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.count, r.requests
}

func (r *Receiver) traces(w http.ResponseWriter, req *http.Request) {
	var body io.Reader = http.MaxBytesReader(w, req.Body, 64<<20)
	if req.Header.Get("Content-Encoding") == "gzip" {
		gz, err := gzip.NewReader(body)
		if err != nil {
			http.Error(w, "bad gzip", http.StatusBadRequest)
			return
		}
		defer gz.Close()
		body = gz
	}
	raw, err := io.ReadAll(body)
	if err != nil {
		http.Error(w, "unreadable body", http.StatusBadRequest)
		return
	}
	var msg collectortrace.ExportTraceServiceRequest
	if err := proto.Unmarshal(raw, &msg); err != nil {
		http.Error(w, "not an ExportTraceServiceRequest", http.StatusBadRequest)
		return
	}
	var got []Span
	n := 0
	for _, rs := range msg.GetResourceSpans() {
		res := attrs(rs.GetResource().GetAttributes())
		for _, ss := range rs.GetScopeSpans() {
			for _, sp := range ss.GetSpans() {
				n++
				if r.discard {
					continue
				}
				got = append(got, Span{
					Service:      res["service.name"],
					TraceID:      hex.EncodeToString(sp.GetTraceId()),
					SpanID:       hex.EncodeToString(sp.GetSpanId()),
					ParentSpanID: hex.EncodeToString(sp.GetParentSpanId()),
					Name:         sp.GetName(),
					Kind:         sp.GetKind(),
					Attributes:   attrs(sp.GetAttributes()),
					Raw:          sp,
					Resource:     res,
				})
			}
		}
	}
	r.mu.Lock()
	r.spans = append(r.spans, got...)
	r.count += n
	r.requests++
	r.mu.Unlock()
	out, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

// attrs returns OTLP attributes by key, each value as text.
func attrs(kvs []*commonpb.KeyValue) map[string]string {
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		m[kv.GetKey()] = Text(kv.GetValue())
	}
	return m
}

// Text is an attribute value as text: a string as is, anything else as
// protobuf's text form of it.
func Text(v *commonpb.AnyValue) string {
	if s, ok := v.GetValue().(*commonpb.AnyValue_StringValue); ok {
		return s.StringValue
	}
	return v.String()
}

// Values returns every string a span holds: its name, and the keys and
// values of its attributes and of its events' and links' attributes, and
// its resource's.
func (s Span) Values() []string {
	out := []string{s.Name}
	add := func(kvs []*commonpb.KeyValue) {
		for _, kv := range kvs {
			out = append(out, kv.GetKey(), Text(kv.GetValue()))
		}
	}
	add(s.Raw.GetAttributes())
	for _, e := range s.Raw.GetEvents() {
		out = append(out, e.GetName())
		add(e.GetAttributes())
	}
	for _, l := range s.Raw.GetLinks() {
		add(l.GetAttributes())
	}
	out = append(out, s.Raw.GetStatus().GetMessage())
	for k, v := range s.Resource {
		out = append(out, k, v)
	}
	return out
}
