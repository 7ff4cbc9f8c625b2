package intake

import (
	"log/slog"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"
)

// The middleware every request goes through, outermost first: a caller's
// request id kept only when fit (dropUnfitRequestID), Echo's request id,
// the log line and metrics (observe), recovery from a panic, methods
// outside knownMethods refused, and the judgement of web pages (browsers,
// auth.go).

// knownMethods are the methods the API records by name; any other is
// answered 405 and recorded (in metrics and logs) as methodOther, so that no
// caller can create a metric series or a log field of its own choosing.
var knownMethods = map[string]bool{
	http.MethodGet: true, http.MethodHead: true, http.MethodPost: true, http.MethodPut: true,
	http.MethodPatch: true, http.MethodDelete: true, http.MethodOptions: true,
}

const methodOther = "OTHER"

// methodLabel is the method as metrics and logs record it.
func methodLabel(method string) string {
	if knownMethods[method] {
		return method
	}
	return methodOther
}

// refuseUnknownMethods answers 405 to a method outside knownMethods,
// whatever the path: no route takes one.
func refuseUnknownMethods(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if !knownMethods[c.Request().Method] {
			return echo.ErrMethodNotAllowed
		}
		return next(c)
	}
}

// maxRequestIDLen bounds a caller's X-Request-Id.
const maxRequestIDLen = 128

// dropUnfitRequestID removes a caller's X-Request-Id that is longer than
// maxRequestIDLen or holds anything but A-Z a-z 0-9 . _ ~ : -, so that a
// fresh one is generated: the id is logged on every line of the request, and
// must carry neither personal data (an address, say) nor a megabyte of
// padding into the logs. UUIDs, ULIDs and trace ids pass.
func dropUnfitRequestID(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		h := c.Request().Header
		if ids := h.Values(echo.HeaderXRequestID); len(ids) > 0 && (len(ids) > 1 || !fitRequestID(ids[0])) {
			h.Del(echo.HeaderXRequestID)
		}
		return next(c)
	}
}

func fitRequestID(id string) bool {
	if id == "" || len(id) > maxRequestIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			c == '.' || c == '_' || c == '~' || c == ':' || c == '-') {
			return false
		}
	}
	return true
}

// observe writes one log line per request and records its metrics. It
// renders a returned error itself so that the line carries the final status.
func observe(logger *slog.Logger, metrics *Metrics) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			start := time.Now()
			if err := next(c); err != nil {
				c.Error(err)
			}
			elapsed := time.Since(start)
			status := c.Response().Status
			route := c.Path()
			if route == "" {
				route = "unmatched"
			}
			outcome := requestOf(c).outcome
			method := methodLabel(c.Request().Method)
			metrics.observeRequest(method, route, status, outcome, elapsed)

			attrs := []slog.Attr{
				slog.String("request_id", c.Response().Header().Get(echo.HeaderXRequestID)),
				slog.String("method", method),
				slog.String("route", route),
				slog.Int("status", status),
				slog.Float64("latency_ms", float64(elapsed.Microseconds())/1000),
			}
			if id := requestOf(c).clientID; id != "" {
				attrs = append(attrs, slog.String("client_id", id))
			}
			if outcome != "" {
				attrs = append(attrs, slog.String("outcome", outcome))
			}
			if ref := requestOf(c).ref; ref != "" {
				attrs = append(attrs, slog.String("ref", ref))
			}
			level := slog.LevelInfo
			if status >= 500 {
				level = slog.LevelError
			}
			logger.LogAttrs(c.Request().Context(), level, "request", attrs...)
			return nil
		}
	}
}
