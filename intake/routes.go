package intake

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/leadintake/leadintake/openapi"
	"github.com/leadintake/leadintake/web"
)

// addRoutes lists the whole public API.
func addRoutes(e *echo.Echo, o *HandlerOpts) {
	auth := authenticate(o.Callers)

	e.GET("/healthz", handleHealthz())
	e.GET("/readyz", handleReadyz(o.Store))
	// Public, and holding nothing: the API's description, and the snippet
	// lead forms import.
	e.GET("/openapi.json", echo.WrapHandler(openapi.Handler()))
	e.Match([]string{http.MethodGet, http.MethodHead}, "/v1/sdk/leadintake.js", echo.WrapHandler(web.Snippet()))
	e.Match([]string{http.MethodGet, http.MethodHead}, "/v1/sdk/leadintake@:version.js", echo.WrapHandler(web.Snippet()))
	wait := applyWait(o.MaxWait)
	sub := &submitter{
		hashKey: o.HashKey, store: o.Store, enqueue: o.Enqueue, waiters: o.Waiters, limits: newLimiters(o.PublicRateLimit),
		trusted: o.TrustedProxies, decode: &o.Decode, maxBody: o.MaxBodyBytes, timeout: o.RequestTimeout,
	}
	e.POST("/v1/leads", handleLeadCreate(sub), wait, auth)
	e.POST("/v1/webhooks/:client_id/leads", handleWebhookLead(sub, o.Callers), wait)
	e.GET("/v1/operations/:key", handleOperationGet(o.Store, o.Waiters, o.RequestTimeout), wait, auth)
}
