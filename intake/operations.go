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
		if body.Response != nil && publishableKeyOf(c) != "" {
			body.Response.Body = response.ForBrowser(body.Response.Body)
		}
		return writeJSON(c, http.StatusOK, body)
	}
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
