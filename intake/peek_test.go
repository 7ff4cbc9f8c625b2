package intake_test

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/leadintake/leadintake/internal/dbtest"
	"github.com/leadintake/leadintake/internal/testkit"
	"github.com/leadintake/leadintake/response"
)

// peekCounter counts the reads of keys before a claim (Store.Peek).
type peekCounter struct{ n atomic.Int64 }

func (c *peekCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if strings.Contains(d.SQL, "k.raw_hmac") && !strings.Contains(d.SQL, "INSERT") {
		c.n.Add(1)
	}
	return ctx
}

func (c *peekCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// While nearly every submission of a bearer token is a new key, a retry is
// not read before its claim: the claim answers it, byte for byte as the
// read would (a finished key's stored response, an unfinished key in
// progress, another body a mismatch). Once retries are common again, they
// are read first again.
func TestRetriesWithoutTheRead(t *testing.T) {
	t.Parallel()
	url, direct := dbtest.New(t)
	counter := &peekCounter{}
	pool := dbtest.Traced(t, url, counter)
	api := newTestAPIOn(t, direct, &testAPIOpts{Pool: pool})

	// New keys only: the reads stop paying.
	for range 450 {
		key := testkit.NewKey()
		api.send(t, api.submission(key, validBody)).requireAccepted(t, key, false)
	}
	finished, unfinished := testkit.NewKey(), testkit.NewKey()
	api.send(t, api.submission(finished, validBody)).requireAccepted(t, finished, false)
	api.send(t, api.submission(unfinished, validBody)).requireAccepted(t, unfinished, false)
	finishKey(t, api, finished, finish{})

	before := counter.n.Load()
	res := api.send(t, api.submission(finished, validBody))
	if res.Status != http.StatusCreated || string(res.Body) != `{"status": "completed",  "x":1}` || res.Header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("retry of a finished key: %d %s (replayed %q), want 201 with the stored body", res.Status, res.Body, res.Header.Get("Idempotent-Replayed"))
	}
	api.send(t, api.submission(unfinished, validBody)).requireAccepted(t, unfinished, true)
	api.send(t, api.submission(finished, `{"email":"eve@example.com","source":"linkedin"}`)).requireError(t, http.StatusUnprocessableEntity, response.CodeKeyReused)
	if n := counter.n.Load() - before; n != 0 {
		t.Errorf("%d reads before the claims of three retries, want none while new keys are nearly all", n)
	}

	// Retries only: the reads pay again.
	for range 100 {
		api.send(t, api.submission(finished, validBody))
	}
	before = counter.n.Load()
	if res := api.send(t, api.submission(finished, validBody)); res.Status != http.StatusCreated {
		t.Errorf("retry: %d %s", res.Status, res.Body)
	}
	if n := counter.n.Load() - before; n != 1 {
		t.Errorf("%d reads before the claim of a retry among retries, want 1", n)
	}
}
