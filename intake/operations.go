package intake

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/leadintake/leadintake/internal/probe"
	"github.com/leadintake/leadintake/response"
	"github.com/leadintake/leadintake/store"
)

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
		clientID := requestOf(c).clientID
		key, ok := pathParam(c, "key")
		notFound := response.Errorf(response.CodeNotFound, "no operation with this key")
		if !ok || !ValidKey(key) {
			return notFound
		}
		requestOf(c).ref = ExternalRef(clientID, key)
		ctx, cancel := context.WithTimeout(c.Request().Context(), timeout)
		defer cancel()
		op, err := st.Operation(ctx, clientID, key)
		if errors.Is(err, store.ErrNotFound) || (err == nil && publishableKeyOf(c) != "" && !op.Publishable) {
			// A page sees only the keys submitted through a publishable
			// key of its client.
			return notFound
		}
		if err != nil {
			return storeError(err)
		}
		if d := waitOf(c); d > 0 && op.Response == nil {
			held, err := holdUntilFinished(c, st, waiters, clientID, key, op.LeadID, d, timeout)
			if err != nil {
				return err
			}
			if held != nil {
				op = held
			}
		}
		body := operationBodyOf(op)
		if publishableKeyOf(c) != "" {
			if body.Response != nil {
				body.Response.Body = response.ForBrowser(body.Response.Body)
			}
			// Nor does a page learn the name of a key it may not see. (A
			// time of its own: a held request may have outlived ctx.)
			ctx, cancel := context.WithTimeout(c.Request().Context(), timeout)
			defer cancel()
			if body.Supersedes, err = pageKeyOnly(ctx, st, clientID, body.Supersedes); err != nil {
				return storeError(err)
			}
			if body.SupersededBy, err = pageKeyOnly(ctx, st, clientID, body.SupersededBy); err != nil {
				return storeError(err)
			}
		}
		return writeJSON(c, http.StatusOK, body)
	}
}

// pageKeyOnly returns key when a page may see it (a key of the client
// submitted through a publishable key, not expired), else nil: what a page
// reads names no key of the client's server or of a signed webhook. It
// reads the key only when there is one, which is rare (a key in an
// amendment chain).
func pageKeyOnly(ctx context.Context, st *store.Store, clientID string, key *string) (*string, error) {
	if key == nil {
		return nil, nil
	}
	peeked, err := st.Peek(ctx, clientID, *key)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, nil
	case err != nil:
		return nil, err
	case !peeked.Publishable:
		return nil, nil
	}
	return key, nil
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

// handleHealthz is GET /healthz. Any page may read it
// (Access-Control-Allow-Origin: *): the snippet asks it, when the browser
// shows the page no answer of the api, whether the api itself answers (a
// refusal of the page's origin) or not (the api is down, or a load
// balancer's error page without CORS headers stands in its place, and the
// enquiry is sent again later). It tells nothing else.
func handleHealthz() echo.HandlerFunc {
	return func(c echo.Context) error {
		c.Response().Header().Set(echo.HeaderAccessControlAllowOrigin, "*")
		return writeJSON(c, http.StatusOK, map[string]string{"status": "ok"})
	}
}

func handleReadyz(st *store.Store) echo.HandlerFunc {
	// However many probes come, the database is checked at most once a
	// second.
	ready := probe.NewShared(st.Ready, probe.Opts{Timeout: 2 * time.Second})
	return func(c echo.Context) error {
		ctx, cancel := context.WithTimeout(c.Request().Context(), 2*time.Second)
		defer cancel()
		if err := ready.Ready(ctx); err != nil {
			// Whatever the cause, the process cannot serve submissions.
			return &response.Error{Code: response.CodeStoreUnavailable, Message: "the store is not ready", Err: err}
		}
		return writeJSON(c, http.StatusOK, map[string]string{"status": "ready"})
	}
}
