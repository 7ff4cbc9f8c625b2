package intake

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/leadintake/leadintake/openapi"
	"github.com/leadintake/leadintake/web"
)

// publicPaths are the routes that ignore Authorization altogether.
var publicPaths = map[string]bool{routeHealthz: true, routeReadyz: true, routeOpenAPI: true, routeSnippet: true, routeSnippetVersion: true}

// Routes by their Echo pattern, for the lists below.
const (
	routeLeads     = "/v1/leads"
	routeOperation = "/v1/operations/:key"
	routeWebhook   = "/v1/webhooks/:client_id/leads"
	routeSnippet   = "/v1/sdk/leadintake.js"
	// routeSnippetVersion is one route for every version: the handler
	// serves its own and answers 404 for the others.
	routeSnippetVersion = "/v1/sdk/leadintake@:version.js"
	routeOpenAPI        = "/openapi.json"
	routeHealthz        = "/healthz"
	routeReadyz         = "/readyz"
)

// browserRoutes are the requests a publishable key may make, by route and
// method: submit a lead, and read its operation. A page may ask for CORS
// on these paths (browserPath).
var browserRoutes = map[string]string{routeLeads: http.MethodPost, routeOperation: http.MethodGet}

// browserRoute reports whether a request is one a publishable key may make;
// route is Echo's pattern of the request.
func browserRoute(method, route string) bool {
	m, ok := browserRoutes[route]
	return ok && m == method
}

// browserPath reports whether route is one of browserRoutes.
func browserPath(route string) bool {
	_, ok := browserRoutes[route]
	return ok
}

// addRoutes lists the whole public API.
func addRoutes(e *echo.Echo, o *HandlerOpts) {
	auth := authenticate(o.Callers)

	e.GET(routeHealthz, handleHealthz())
	e.GET(routeReadyz, handleReadyz(o.Store))
	// Public, and holding nothing: the API's description, and the snippet
	// lead forms import.
	e.GET(routeOpenAPI, echo.WrapHandler(openapi.Handler()))
	e.Match([]string{http.MethodGet, http.MethodHead}, routeSnippet, echo.WrapHandler(web.Snippet()))
	e.Match([]string{http.MethodGet, http.MethodHead}, routeSnippetVersion, echo.WrapHandler(web.Snippet()))
	wait := applyWait(o.MaxWait)
	sub := &submitter{
		hashKey: o.HashKey, store: o.Store, waiters: o.Waiters, limits: newLimiters(o.PublicRateLimit),
		trusted: o.TrustedProxies, decode: &o.Decode, maxBody: o.MaxBodyBytes, timeout: o.RequestTimeout,
		callers: o.Callers, spam: o.Spam, metrics: o.Metrics, retention: o.KeyRetention,
	}
	e.POST(routeLeads, handleLeadCreate(sub), wait, auth)
	e.POST(routeWebhook, handleWebhookLead(sub, o.Callers), wait)
	e.GET(routeOperation, handleOperationGet(o.Store, o.Waiters, o.RequestTimeout), wait, auth)
}
