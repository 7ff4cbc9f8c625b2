package intake

import (
	"time"

	"github.com/labstack/echo/v4"
)

// request is what the handling of one request learns of it as it goes,
// for its handlers, its log line and its metrics. Every request has one
// (requestOf); nothing else is kept on the echo.Context.
type request struct {
	// clientID is the authenticated client; empty until it is known.
	clientID string
	// publishableKey is the key a web page authenticated with; empty for a
	// bearer token or a signed webhook.
	publishableKey string
	// ref is the external reference of the request's key, once the key is
	// known: what its log line names instead of the key.
	ref string
	// outcome is a submission's outcome, as logged and counted.
	outcome string
	// leadID is the lead of a submission's key, once known: what the
	// request's span names (traceRoute).
	leadID string
	// wait is how long the request asked to be held (Prefer: wait); zero
	// for not at all.
	wait time.Duration
}

// requestKey is where the request is kept on the echo.Context.
const requestKey = "leadintake.request"

// requestOf returns the request of c, made on first use.
func requestOf(c echo.Context) *request {
	if r, ok := c.Get(requestKey).(*request); ok {
		return r
	}
	r := &request{}
	c.Set(requestKey, r)
	return r
}
