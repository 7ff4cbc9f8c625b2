package intake

import (
	"github.com/labstack/echo/v4"

	"github.com/leadintake/leadintake/openapi"
)

// addRoutes lists the whole public API.
func addRoutes(e *echo.Echo, o *HandlerOpts) {
	auth := authenticate(o.Callers)

	e.GET("/healthz", handleHealthz())
	e.GET("/readyz", handleReadyz(o.Store))
	// The API's description; no auth: it describes, and holds nothing.
	e.GET("/openapi.json", echo.WrapHandler(openapi.Handler()))
	wait := applyWait(o.MaxWait)
	sub := &submitter{
		hashKey: o.HashKey, store: o.Store, enqueue: o.Enqueue, waiters: o.Waiters, limits: newLimiters(o.PublicRateLimit),
		trusted: o.TrustedProxies, decode: &o.Decode, maxBody: o.MaxBodyBytes, timeout: o.RequestTimeout,
	}
	e.POST("/v1/leads", handleLeadCreate(sub), wait, auth)
	e.POST("/v1/webhooks/:client_id/leads", handleWebhookLead(sub, o.Callers), wait)
	e.GET("/v1/operations/:key", handleOperationGet(o.Store, o.Waiters, o.RequestTimeout), wait, auth)
}
