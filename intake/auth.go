package intake

import (
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/leadintake/leadintake/callers"
	"github.com/leadintake/leadintake/response"
)

// Browser CORS: what a page may send and read.
const (
	corsAllowMethods  = "GET, POST"
	corsAllowHeaders  = "Authorization, Content-Type, Idempotency-Key, Supersedes, Prefer, X-Request-Id, Form-Signals, traceparent, tracestate"
	corsExposeHeaders = "Idempotency-Key, Idempotent-Replayed, Location, Retry-After, X-Request-Id, Preference-Applied"
	corsMaxAge        = "600"
)

// bearer returns the bearer credential of the request, "" when there is
// none.
func bearer(r *http.Request) (string, bool) {
	scheme, token, _ := strings.Cut(r.Header.Get(echo.HeaderAuthorization), " ")
	token = strings.TrimSpace(token)
	if !strings.EqualFold(scheme, "Bearer") || token == "" {
		return "", false
	}
	return token, true
}

// browsers judges, before any handler, the requests of web pages: CORS
// preflights, and every request carrying a publishable key. A publishable
// key may only submit (POST /v1/leads) and poll (GET /v1/operations/{key}),
// from an origin listed for it; answers to it carry the CORS headers.
// Requests with a bearer token are left alone.
func browsers(holder *callers.Holder) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			req := c.Request()
			origin := strings.ToLower(req.Header.Get(echo.HeaderOrigin))
			set := holder.Set()
			route := c.Path()
			if req.Method == http.MethodOptions {
				if browserPath(route) && origin != "" && set.OriginAllowed(origin) {
					h := c.Response().Header()
					h.Set(echo.HeaderAccessControlAllowOrigin, origin)
					h.Add(echo.HeaderVary, echo.HeaderOrigin)
					h.Set(echo.HeaderAccessControlAllowMethods, corsAllowMethods)
					h.Set(echo.HeaderAccessControlAllowHeaders, corsAllowHeaders)
					h.Set(echo.HeaderAccessControlMaxAge, corsMaxAge)
					return c.NoContent(http.StatusNoContent)
				}
				return response.Errorf(response.CodeOriginNotAllowed, "no publishable key allows this origin on this path")
			}
			token, ok := bearer(req)
			if !ok || !callers.IsPublishable(token) || publicPaths[route] {
				return next(c)
			}
			if !browserRoute(req.Method, route) {
				return response.Errorf(response.CodeForbiddenForPublishableKey, "a publishable key may only submit leads and read their operations")
			}
			clientID, allowed, known := set.Publishable(token, origin)
			if !known {
				// The page may read this answer when its origin is one some
				// key allows: the 401 is the page's to show.
				if origin != "" && set.OriginAllowed(origin) {
					setCORS(c, origin)
				}
				return response.Errorf(response.CodeUnauthorized, "the publishable key is not valid")
			}
			if !allowed {
				return response.Errorf(response.CodeOriginNotAllowed, "this publishable key does not allow the request's Origin")
			}
			setCORS(c, origin)
			requestOf(c).clientID = clientID
			requestOf(c).publishableKey = token
			return next(c)
		}
	}
}

// setCORS marks an answer readable by the page of origin.
func setCORS(c echo.Context, origin string) {
	h := c.Response().Header()
	h.Set(echo.HeaderAccessControlAllowOrigin, origin)
	h.Add(echo.HeaderVary, echo.HeaderOrigin)
	h.Set(echo.HeaderAccessControlExposeHeaders, corsExposeHeaders)
}

// publishableKeyOf returns the publishable key of a browser's request, ""
// for a request with a bearer token.
func publishableKeyOf(c echo.Context) string {
	return requestOf(c).publishableKey
}

// authenticate accepts a request authenticated by a publishable key (see
// browsers), or one whose bearer token belongs to a client and whose
// X-Client-Id, when sent, names that client.
func authenticate(holder *callers.Holder) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if publishableKeyOf(c) == "" {
				token, ok := bearer(c.Request())
				if !ok {
					return response.Errorf(response.CodeUnauthorized, "send Authorization: Bearer <token>")
				}
				clientID, ok := holder.Set().Authenticate(token)
				if !ok {
					return response.Errorf(response.CodeUnauthorized, "the bearer token is not valid")
				}
				requestOf(c).clientID = clientID
			}
			clientID := requestOf(c).clientID
			if ids := c.Request().Header.Values("X-Client-Id"); len(ids) > 0 && (len(ids) > 1 || ids[0] != clientID) {
				return response.Errorf(response.CodeClientMismatch, "X-Client-Id does not match the authenticated client")
			}
			return next(c)
		}
	}
}
