package intake

import "github.com/labstack/echo/v4"

// addRoutes lists the whole public API.
func addRoutes(e *echo.Echo, o *HandlerOpts) {
	auth := authenticate(o.Clients)

	e.GET("/healthz", handleHealthz())
	e.GET("/readyz", handleReadyz(o.Store))
	e.POST("/v1/leads", handleLeadCreate(o.Store, o.Enqueue, &o.Decode, o.MaxBodyBytes, o.RequestTimeout), auth)
	e.GET("/v1/operations/:key", handleOperationGet(o.Store, o.RequestTimeout), auth)
}
