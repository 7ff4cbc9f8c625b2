package intake

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"

	"github.com/leadintake/leadintake/callers"
	"github.com/leadintake/leadintake/lead"
	"github.com/leadintake/leadintake/response"
	"github.com/leadintake/leadintake/store"
)

// Defaults of HandlerOpts.
const (
	DefaultMaxBodyBytes   = 64 << 10
	DefaultRequestTimeout = 5 * time.Second
	// storeRetryAfter is the Retry-After, in seconds, of a 503.
	storeRetryAfter = "2"
)

// Values kept on the echo.Context for the request log and metrics.
const (
	ctxClientID = "leadintake.client_id"
	ctxRef      = "leadintake.ref"
	ctxOutcome  = "leadintake.outcome"
)

// Submission outcomes, as logged and counted.
const (
	outcomeRefused     = "refused"
	outcomeUnavailable = "unavailable"
	outcomeRateLimited = "rate_limited"
)

// HandlerOpts configure NewHandler.
type HandlerOpts struct {
	Store *store.Store
	// Enqueue inserts a claimed lead's job in the claim's transaction.
	Enqueue store.EnqueueFunc
	// Callers are the clients in force (swapped when the clients file is
	// read again).
	Callers *callers.Holder
	Decode  lead.DecodeOpts
	// MaxBodyBytes bounds a body; larger ones get 413. Default
	// DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// RequestTimeout bounds one request's database work; past it 503.
	// Default DefaultRequestTimeout.
	RequestTimeout time.Duration
	// Logger receives one line per request. Default: discard.
	Logger *slog.Logger
	// Metrics may be nil.
	Metrics *Metrics
	// Waiters holds the requests that ask to wait (Prefer: wait); MaxWait
	// bounds the wait. Defaults: a set of DefaultMaxWaiters, which nothing
	// wakes but its poll, and DefaultMaxWait.
	Waiters *Waiters
	MaxWait time.Duration
	// PublicRateLimit bounds the new submissions of one publishable key
	// from one address, per api process; zero for DefaultPublicRateLimit.
	PublicRateLimit RateLimit
	// TrustedProxies are the peers whose X-Forwarded-For is believed.
	TrustedProxies []netip.Prefix
	// HashKey keys the hash of each lead's email, kept to find the lead
	// for an erasure (PII_HASH_KEY). Required.
	HashKey lead.HashKey
}

// DefaultPublicRateLimit is PUBLIC_RATE_LIMIT's default: 20 a minute.
var DefaultPublicRateLimit = RateLimit{N: 20, Per: time.Minute}

// NewHandler returns the public HTTP API.
func NewHandler(opts *HandlerOpts) *echo.Echo {
	o := *opts
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if o.RequestTimeout <= 0 {
		o.RequestTimeout = DefaultRequestTimeout
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Waiters == nil {
		o.Waiters = NewWaiters(0)
	}
	if o.MaxWait <= 0 {
		o.MaxWait = DefaultMaxWait
	}
	if o.PublicRateLimit.N <= 0 {
		o.PublicRateLimit = DefaultPublicRateLimit
	}

	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.HTTPErrorHandler = errorHandler(o.Logger)
	e.Use(
		dropUnfitRequestID,
		middleware.RequestIDWithConfig(middleware.RequestIDConfig{TargetHeader: echo.HeaderXRequestID}),
		observe(o.Logger, o.Metrics),
		middleware.RecoverWithConfig(middleware.RecoverConfig{
			DisableStackAll: true,
			LogErrorFunc: func(c echo.Context, err error, stack []byte) error {
				o.Logger.ErrorContext(c.Request().Context(), "panic", slog.String("error", err.Error()), slog.String("stack", string(stack)))
				return err
			},
		}),
		refuseUnknownMethods,
		browsers(o.Callers),
	)
	addRoutes(e, &o)
	return e
}

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

// pathParam returns the path parameter name, percent-decoded: Echo routes
// on the escaped path when the request's differs from the default encoding
// (as demo%2Dkey does), and then hands parameters over still escaped. ok is
// false for an escape that does not decode.
func pathParam(c echo.Context, name string) (string, bool) {
	v := c.Param(name)
	if c.Request().URL.RawPath == "" {
		return v, true
	}
	decoded, err := url.PathUnescape(v)
	return decoded, err == nil
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

// processingBody is the 202 body of a submission in progress.
type processingBody struct {
	Status         string `json:"status"`
	IdempotencyKey string `json:"idempotency_key"`
	LeadID         string `json:"lead_id"`
	StatusURL      string `json:"status_url"`
}

// submitter is what a submission needs, whichever way it authenticates.
type submitter struct {
	hashKey lead.HashKey
	store   *store.Store
	enqueue store.EnqueueFunc
	waiters *Waiters
	limits  *limiters
	trusted []netip.Prefix
	decode  *lead.DecodeOpts
	maxBody int64
	timeout time.Duration
}

// handleLeadCreate is POST /v1/leads: a caller authenticated by its bearer
// token or publishable key submits one enquiry under its Idempotency-Key.
func handleLeadCreate(sub *submitter) echo.HandlerFunc {
	return func(c echo.Context) error {
		req := c.Request()
		clientID := c.Get(ctxClientID).(string)
		key, err := ParseKey(req.Header.Values("Idempotency-Key"))
		if err != nil {
			return err
		}
		c.Set(ctxRef, ExternalRef(clientID, key))
		if err := requireJSON(req); err != nil {
			return err
		}
		body, err := readBody(c, sub.maxBody)
		if err != nil {
			return err
		}
		return sub.submit(c, clientID, key, body)
	}
}

// requireJSON refuses a request whose body is not declared JSON.
func requireJSON(req *http.Request) error {
	if mt, _, err := mime.ParseMediaType(req.Header.Get(echo.HeaderContentType)); err != nil || mt != echo.MIMEApplicationJSON {
		return response.Errorf(response.CodeUnsupportedMediaType, "send Content-Type: application/json")
	}
	return nil
}

// submit claims key for the client's body, and answers as the key stands:
// the rest of POST /v1/leads once the caller, its key and its body are
// known. A retry of a key that exists is answered from one read, without a
// transaction, and its body is not decoded again when its bytes are the
// first request's; only a claim claims.
func (sub *submitter) submit(c echo.Context, clientID, key string, body []byte) error {
	req := c.Request()
	st, timeout := sub.store, sub.timeout
	supersedes, err := ParseSupersedes(req.Header.Values("Supersedes"))
	if err != nil {
		return err
	}
	if supersedes == key {
		return response.Errorf(response.CodeSupersedesInvalid, "a request cannot supersede its own Idempotency-Key")
	}
	decode := func() (*lead.Payload, error) {
		payload, err := lead.Decode(body, sub.decode)
		if err != nil {
			return nil, err
		}
		if supersedes != "" {
			payload.Supersede(supersedes)
		}
		return payload, nil
	}
	raw := lead.RawHash(body, supersedes)

	// The claim runs to its end even if the caller hangs up: a half-done
	// claim helps nobody, and the caller's retry will find the result.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(req.Context()), timeout)
	defer cancel()
	peeked, err := st.Peek(ctx, clientID, key)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return storeError(err)
	}
	var payload *lead.Payload
	if peeked != nil {
		same := peeked.RawHash != nil && bytes.Equal(peeked.RawHash, raw)
		if !same {
			if payload, err = decode(); err != nil {
				return err
			}
			same = bytes.Equal(peeked.Fingerprint, payload.Fingerprint[:])
		}
		if !same {
			return sub.answer(c, clientID, key, &store.ClaimResult{Outcome: store.OutcomeMismatch, State: peeked.State, LeadID: peeked.LeadID})
		}
		if res, ok := peeked.Answer(); ok {
			return sub.answer(c, clientID, key, res)
		}
	}
	if payload == nil {
		if payload, err = decode(); err != nil {
			return err
		}
	}
	if pk := publishableKeyOf(c); pk != "" && sub.limits != nil && peeked == nil {
		// Only a submission that would claim a new key counts.
		if ok, wait := sub.limits.allow(pk, clientAddr(req, sub.trusted)); !ok {
			c.Response().Header().Set(echo.HeaderRetryAfter, retryAfter(wait))
			c.Set(ctxOutcome, outcomeRateLimited)
			return response.Errorf(response.CodeRateLimited, "too many new submissions from this page; retry after the time in Retry-After")
		}
	}
	res, err := st.Claim(ctx, &store.ClaimParams{
		ClientID: clientID, Key: key, ExternalRef: c.Get(ctxRef).(string), Payload: payload, Enqueue: sub.enqueue,
		EmailHMAC: sub.hashKey.Email(payload.Lead.Email), RawHash: raw,
	})
	if err != nil {
		return storeError(err)
	}
	return sub.answer(c, clientID, key, res)
}

// answer answers a submission as the claim (or the read) found its key.
func (sub *submitter) answer(c echo.Context, clientID, key string, res *store.ClaimResult) error {
	c.Set(ctxOutcome, res.Outcome.String())
	h := c.Response().Header()
	switch res.Outcome {
	case store.OutcomeClaimed, store.OutcomeReopened, store.OutcomeInProgress:
		h.Set("Idempotency-Key", key)
		replayed := res.Outcome == store.OutcomeInProgress
		h.Set("Idempotent-Replayed", strconv.FormatBool(replayed))
		state := res.State
		if d := waitOf(c); d > 0 {
			op := holdUntilFinished(c, sub.store, sub.waiters, clientID, key, res.LeadID, d, sub.timeout)
			if op != nil && op.Response != nil {
				// A new key that finished in time is answered with its
				// final response, and is no replay.
				return writeFinal(c, *op.Response)
			}
			if op != nil {
				state = op.State
			}
		}
		statusURL := "/v1/operations/" + key
		h.Set(echo.HeaderLocation, statusURL)
		h.Set(echo.HeaderRetryAfter, "1")
		return writeJSON(c, http.StatusAccepted, processingBody{
			Status: string(state), IdempotencyKey: key, LeadID: res.LeadID.String(), StatusURL: statusURL,
		})
	case store.OutcomeReplayed:
		h.Set("Idempotency-Key", key)
		h.Set("Idempotent-Replayed", "true")
		return writeFinal(c, res.Response)
	case store.OutcomeSupersedesUnknown:
		return response.Errorf(response.CodeSupersedesUnknown, "the Supersedes key is not a key of this client, or it has expired")
	case store.OutcomeAlreadySuperseded:
		return response.Errorf(response.CodeAlreadySuperseded, "the Supersedes key was already superseded by another key; amend that one")
	default: // OutcomeMismatch
		return response.Errorf(response.CodeKeyReused, "this Idempotency-Key was used with a different request (body or Supersedes); use a new key for a new enquiry")
	}
}

// holdUntilFinished holds a request that asked to wait d for the client's
// key, of lead, to finish, and returns the operation as it stood at the last
// look that succeeded (nil when none did). The time held is not bounded by
// the request time-out; each look at the key is.
func holdUntilFinished(c echo.Context, st *store.Store, waiters *Waiters, clientID, key string, lead uuid.UUID, d, timeout time.Duration) *store.Operation {
	var op *store.Operation
	look := func() bool {
		ctx, cancel := context.WithTimeout(c.Request().Context(), timeout)
		defer cancel()
		got, err := st.Operation(ctx, clientID, key)
		if err != nil {
			return errors.Is(err, store.ErrNotFound) // expired meanwhile: nothing to wait for
		}
		op = got
		return op.Response != nil
	}
	waiters.Wait(c.Request().Context(), lead, d, look)
	return op
}

// readBody reads at most maxBody bytes of the body, whether or not it was
// sent chunked.
func readBody(c echo.Context, maxBody int64) ([]byte, error) {
	req := c.Request()
	tooLarge := response.Errorf(response.CodeBodyTooLarge, "the body is larger than %d bytes", maxBody)
	if req.ContentLength > maxBody {
		return nil, tooLarge
	}
	body, err := io.ReadAll(http.MaxBytesReader(c.Response(), req.Body, maxBody))
	var maxErr *http.MaxBytesError
	switch {
	case err == nil:
		return body, nil
	case errors.As(err, &maxErr):
		return nil, tooLarge
	case errors.Is(err, os.ErrDeadlineExceeded):
		return nil, &response.Error{Code: response.CodeRequestTimeout, Message: "the body did not arrive in time", Err: err}
	default:
		return nil, &response.Error{Code: response.CodeBadRequest, Message: "the body could not be read", Err: err}
	}
}

// operationBody is the body of GET /v1/operations/{key}.
type operationBody struct {
	IdempotencyKey string             `json:"idempotency_key"`
	State          string             `json:"state"`
	LeadID         string             `json:"lead_id"`
	CreatedAt      time.Time          `json:"created_at"`
	UpdatedAt      time.Time          `json:"updated_at"`
	ExpiresAt      *time.Time         `json:"expires_at"`
	Response       *operationResponse `json:"response"`
	Supersedes     *string            `json:"supersedes"`
	SupersededBy   *string            `json:"superseded_by"`
}

type operationResponse struct {
	Status int             `json:"status"`
	Body   json.RawMessage `json:"body"`
}

func handleOperationGet(st *store.Store, waiters *Waiters, timeout time.Duration) echo.HandlerFunc {
	return func(c echo.Context) error {
		clientID := c.Get(ctxClientID).(string)
		key, ok := pathParam(c, "key")
		notFound := response.Errorf(response.CodeNotFound, "no operation with this key")
		if !ok || !ValidKey(key) {
			return notFound
		}
		c.Set(ctxRef, ExternalRef(clientID, key))
		ctx, cancel := context.WithTimeout(c.Request().Context(), timeout)
		defer cancel()
		op, err := st.Operation(ctx, clientID, key)
		if errors.Is(err, store.ErrNotFound) {
			return notFound
		}
		if err != nil {
			return storeError(err)
		}
		if d := waitOf(c); d > 0 && op.Response == nil {
			if held := holdUntilFinished(c, st, waiters, clientID, key, op.LeadID, d, timeout); held != nil {
				op = held
			}
		}
		body := operationBodyOf(op)
		if body.Response != nil && publishableKeyOf(c) != "" {
			body.Response.Body = response.ForBrowser(body.Response.Body)
		}
		return writeJSON(c, http.StatusOK, body)
	}
}

// writeFinal answers with a stored final response: as stored, byte for
// byte, or, for a web page, projected (response.ForBrowser) with the
// stored status.
func writeFinal(c echo.Context, f response.Final) error {
	body := f.Body
	if publishableKeyOf(c) != "" {
		body = response.ForBrowser(body)
	}
	return c.Blob(f.Status, echo.MIMEApplicationJSON, body)
}

// operationBodyOf is the body of GET /v1/operations/{key} for op.
func operationBodyOf(op *store.Operation) operationBody {
	body := operationBody{
		IdempotencyKey: op.Key,
		State:          string(op.State),
		LeadID:         op.LeadID.String(),
		CreatedAt:      op.CreatedAt.UTC(),
		UpdatedAt:      op.UpdatedAt.UTC(),
		Supersedes:     nilIfEmpty(op.Supersedes),
		SupersededBy:   nilIfEmpty(op.SupersededBy),
	}
	if op.Response != nil {
		expires := op.ExpiresAt.UTC()
		body.ExpiresAt = &expires
		body.Response = &operationResponse{Status: op.Response.Status, Body: op.Response.Body}
	}
	return body
}

func nilIfEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func handleHealthz() echo.HandlerFunc {
	return func(c echo.Context) error {
		return writeJSON(c, http.StatusOK, map[string]string{"status": "ok"})
	}
}

func handleReadyz(st *store.Store) echo.HandlerFunc {
	return func(c echo.Context) error {
		ctx, cancel := context.WithTimeout(c.Request().Context(), 2*time.Second)
		defer cancel()
		if err := st.Ready(ctx); err != nil {
			// Whatever the cause, the process cannot serve submissions.
			return &response.Error{Code: response.CodeStoreUnavailable, Message: "the store is not ready", Err: err}
		}
		return writeJSON(c, http.StatusOK, map[string]string{"status": "ready"})
	}
}

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
		case response.CodeStoreUnavailable:
			h.Set(echo.HeaderRetryAfter, storeRetryAfter)
			c.Set(ctxOutcome, outcomeUnavailable)
		case response.CodeInternal:
			logger.ErrorContext(c.Request().Context(), "internal error",
				slog.String("request_id", c.Response().Header().Get(echo.HeaderXRequestID)),
				slog.String("error", err.Error()))
		}
		if c.Get(ctxOutcome) == nil {
			c.Set(ctxOutcome, outcomeRefused)
		}
		if c.Request().Method == http.MethodHead {
			_ = c.NoContent(status)
			return
		}
		_ = writeJSON(c, status, response.ErrorBody{Error: response.ErrorDetail{Code: apiErr.Code, Message: apiErr.Message, Details: apiErr.Details}})
	}
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
			outcome, _ := c.Get(ctxOutcome).(string)
			method := methodLabel(c.Request().Method)
			metrics.observeRequest(method, route, status, outcome, elapsed)

			attrs := []slog.Attr{
				slog.String("request_id", c.Response().Header().Get(echo.HeaderXRequestID)),
				slog.String("method", method),
				slog.String("route", route),
				slog.Int("status", status),
				slog.Float64("latency_ms", float64(elapsed.Microseconds())/1000),
			}
			if id, ok := c.Get(ctxClientID).(string); ok {
				attrs = append(attrs, slog.String("client_id", id))
			}
			if outcome != "" {
				attrs = append(attrs, slog.String("outcome", outcome))
			}
			if ref, ok := c.Get(ctxRef).(string); ok {
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
