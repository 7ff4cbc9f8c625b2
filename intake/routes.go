package intake

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/leadintake/leadintake/web"
)

// addRoutes lists the whole public API.
func addRoutes(e *echo.Echo, o *HandlerOpts) {
	auth := authenticate(o.Callers)

	e.GET("/healthz", handleHealthz())
	e.GET("/readyz", handleReadyz(o.Store))
	e.Match([]string{http.MethodGet, http.MethodHead}, "/v1/sdk/leadintake.js", echo.WrapHandler(web.Snippet()))
	wait := applyWait(o.MaxWait)
	limits := newLimiters(o.PublicRateLimit)
	e.POST("/v1/leads", handleLeadCreate(o.Store, o.Enqueue, o.Waiters, limits, o.TrustedProxies,
		&o.Decode, o.MaxBodyBytes, o.RequestTimeout), wait, auth)
	e.GET("/v1/operations/:key", handleOperationGet(o.Store, o.Waiters, o.RequestTimeout), wait, auth)
}
