package intake

import (
	"errors"
	"log/slog"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/leadintake/leadintake/response"
	"github.com/leadintake/leadintake/store"
)

// storeRetryAfter is the Retry-After, in seconds, of a 503.
const storeRetryAfter = "2"

// storeError turns an error of the store into the API's error.
func storeError(err error) error {
	if store.IsUnavailable(err) {
		return &response.Error{Code: response.CodeStoreUnavailable, Message: "the store is unavailable; retry with the same Idempotency-Key", Err: err}
	}
	return &response.Error{Code: response.CodeInternal, Message: "internal error", Err: err}
}

// writeJSON writes v as compact JSON (response.Marshal).
func writeJSON(c echo.Context, status int, v any) error {
	return c.Blob(status, echo.MIMEApplicationJSON, response.Marshal(v))
}

// echoCodes names the errors Echo itself raises.
var echoCodes = map[int]response.Code{
	http.StatusNotFound:                    response.CodeNotFound,
	http.StatusMethodNotAllowed:            response.CodeMethodNotAllowed,
	http.StatusRequestEntityTooLarge:       response.CodeBodyTooLarge,
	http.StatusUnauthorized:                response.CodeUnauthorized,
	http.StatusUnsupportedMediaType:        response.CodeUnsupportedMediaType,
	http.StatusBadRequest:                  response.CodeBadRequest,
	http.StatusRequestTimeout:              response.CodeRequestTimeout,
	http.StatusServiceUnavailable:          response.CodeStoreUnavailable,
	http.StatusRequestHeaderFieldsTooLarge: response.CodeHeadersTooLarge,
}

// errorHandler is the one place where errors become responses, Echo's own
// 404 and 405 included. Only internal errors are logged here; the caller
// sees a generic message for them.
func errorHandler(logger *slog.Logger) echo.HTTPErrorHandler {
	return func(err error, c echo.Context) {
		if c.Response().Committed {
			return
		}
		var (
			apiErr  *response.Error
			echoErr *echo.HTTPError
		)
		switch {
		case errors.As(err, &apiErr):
		case errors.As(err, &echoErr):
			code, ok := echoCodes[echoErr.Code]
			if !ok {
				code = response.CodeInternal
			}
			msg := http.StatusText(echoErr.Code)
			if code == response.CodeInternal {
				msg = "internal error"
			}
			apiErr = &response.Error{Code: code, Message: strings.ToLower(msg), Err: err}
		default:
			apiErr = &response.Error{Code: response.CodeInternal, Message: "internal error", Err: err}
		}

		status := apiErr.HTTPStatus()
		h := c.Response().Header()
		switch apiErr.Code {
		case response.CodeUnauthorized:
			h.Set(echo.HeaderWWWAuthenticate, `Bearer realm="leadintake"`)
		case response.CodeStoreUnavailable, response.CodeCaptchaUnavailable:
			h.Set(echo.HeaderRetryAfter, storeRetryAfter)
			requestOf(c).outcome = outcomeUnavailable
		case response.CodeInternal:
			logger.ErrorContext(c.Request().Context(), "internal error",
				slog.String("request_id", c.Response().Header().Get(echo.HeaderXRequestID)),
				slog.String("error", err.Error()))
		}
		if requestOf(c).outcome == "" {
			requestOf(c).outcome = outcomeRefused
		}
		if c.Request().Method == http.MethodHead {
			_ = c.NoContent(status)
			return
		}
		_ = writeJSON(c, status, response.ErrorBody{Error: response.ErrorDetail{Code: apiErr.Code, Message: apiErr.Message, Details: apiErr.Details}})
	}
}
