package intake

import (
	"github.com/labstack/echo/v4"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/leadintake/leadintake/internal/tracing"
)

// traceRoute names the request's span (the server's, tracing.Handler) by
// its route template, never its path (which holds a key), and records on
// it the ids the request learnt: the client, the lead, the outcome.
func traceRoute(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		ctx := c.Request().Context()
		tracing.NameByRoute(ctx, c.Request().Method, c.Path())
		err := next(c)
		if span := trace.SpanFromContext(ctx); span.IsRecording() {
			r := requestOf(c)
			var attrs []attribute.KeyValue
			if r.clientID != "" {
				attrs = append(attrs, attribute.String("client_id", r.clientID))
			}
			if r.leadID != "" {
				attrs = append(attrs, attribute.String("lead_id", r.leadID))
			}
			if r.outcome != "" {
				attrs = append(attrs, attribute.String("outcome", r.outcome))
			}
			span.SetAttributes(attrs...)
		}
		return err
	}
}
