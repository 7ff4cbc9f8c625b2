package jobs

import (
	"context"
	"encoding/json"
	"strconv"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/leadintake/leadintake/internal/tracing"
)

// traceKey is the key of a job's traceparent in its metadata.
const traceKey = "traceparent"

// traceMetadata is the metadata of a job whose work continues the trace of
// traceParent.
func traceMetadata(traceParent string) []byte {
	b, _ := json.Marshal(map[string]string{traceKey: traceParent})
	return b
}

// traceParentOf reads the traceparent of a job's metadata ("" for none).
func traceParentOf(metadata []byte) string {
	var m struct {
		TraceParent string `json:"traceparent"`
	}
	_ = json.Unmarshal(metadata, &m)
	return m.TraceParent
}

// Traced is the worker middleware that makes the work of a job whose
// metadata holds a traceparent (a lead's job: the request that claimed or
// re-opened its key) a span of that trace, the child of the request's
// span, named "job KIND" with the job's id, kind and attempt. Other jobs
// (periodic ones) are worked as they are, outside any trace.
type Traced struct{ river.WorkerMiddlewareDefaults }

// Work starts the job's span around doInner.
func (*Traced) Work(ctx context.Context, job *rivertype.JobRow, doInner func(context.Context) error) error {
	tp := traceParentOf(job.Metadata)
	if tp == "" {
		return doInner(ctx)
	}
	ctx, span := tracing.Tracer().Start(tracing.WithTraceParent(ctx, tp), "job "+job.Kind,
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(
			attribute.String("messaging.system", "river"),
			attribute.String("job.kind", job.Kind),
			attribute.String("job.id", strconv.FormatInt(job.ID, 10)),
			attribute.Int("job.attempt", job.Attempt),
		))
	defer span.End()
	err := doInner(ctx)
	if err != nil {
		span.SetStatus(codes.Error, "job failed")
	}
	return err
}

// leadSpan starts, for work on one lead outside its job (the reconciler's,
// a callback delivery), a span in the lead's trace: the child of the
// request that last claimed or re-opened its key (traceParent), or of ctx
// when there is none.
func leadSpan(ctx context.Context, traceParent, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	var opts []trace.SpanStartOption
	if traceParent != "" {
		ctx = tracing.WithTraceParent(ctx, traceParent)
	}
	opts = append(opts, trace.WithAttributes(attrs...))
	return tracing.Tracer().Start(ctx, name, opts...)
}
