package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"

	"github.com/leadintake/leadintake/client"
)

// exampleService stands in for a leadintake service: it stores each new key
// (202) and completes it at the first poll. Bodies other than the first
// under one key are refused, as the service refuses them.
func exampleService() *httptest.Server {
	var (
		mu     sync.Mutex
		bodies = map[string]string{}
	)
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if r.Method == http.MethodPost {
			key := r.Header.Get("Idempotency-Key")
			body, _ := io.ReadAll(r.Body)
			if prev, ok := bodies[key]; ok && prev != string(body) {
				w.WriteHeader(http.StatusUnprocessableEntity)
				io.WriteString(w, `{"error":{"code":"idempotency_key_reused","message":"use a new key for a new enquiry"}}`)
				return
			}
			bodies[key] = string(body)
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusAccepted)
			fmt.Fprintf(w, `{"status":"processing","idempotency_key":%q,"lead_id":"8d2f","status_url":"/v1/operations/%s"}`, key, key)
			return
		}
		key := strings.TrimPrefix(r.URL.Path, "/v1/operations/")
		fmt.Fprintf(w, `{"idempotency_key":%q,"state":"completed","lead_id":"8d2f","created_at":"2026-01-02T03:04:05Z","updated_at":"2026-01-02T03:04:06Z","expires_at":"2026-01-09T03:04:06Z",`+
			`"response":{"status":201,"body":{"status":"completed","lead_id":"8d2f","crm_id":"crm_000042","score":85,"tier":"hot","notified":true,"warnings":[]}}}`, key)
	}))
}

// Submit one enquiry and wait for its final answer.
func ExampleClient_Submit() {
	srv := exampleService()
	defer srv.Close()

	c, err := client.New(srv.URL, "my-token", nil)
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	lead := map[string]any{"email": "ada@example.com", "source": "referral", "name": "Ada", "company": "Analytical Engines"}
	res, err := c.Submit(ctx, lead, nil)
	if err != nil {
		panic(err)
	}
	fmt.Println(res.Status, res.CRMID, res.Score, res.Tier)
	// Output: completed crm_000042 85 hot
}

// The four ways a submission ends, and what to do about each.
func ExampleClient_Submit_errors() {
	// A service that is down for good: every answer is 503.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, `{"error":{"code":"store_unavailable","message":"retry with the same Idempotency-Key"}}`)
	}))
	defer srv.Close()

	c, err := client.New(srv.URL, "my-token", &client.Options{BackoffBase: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond})
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()

	res, err := c.Submit(ctx, json.RawMessage(`{"email":"ada@example.com","source":"referral"}`), nil)
	var (
		refused *client.APIError
		failed  *client.Failed
		unknown *client.OutcomeUnknownError
	)
	switch {
	case err == nil:
		fmt.Println("completed:", res.CRMID)
	case errors.As(err, &refused):
		fmt.Println("refused, fix the request:", refused.Code)
	case errors.As(err, &failed):
		fmt.Println("failed for good:", failed.Code)
	case errors.As(err, &unknown):
		// Keep unknown.Key with the enquiry; Wait or Submit with it later.
		fmt.Println("outcome unknown; resume later with the key:", unknown.Key != "", errors.Is(err, context.DeadlineExceeded))
	default:
		fmt.Println("nothing sent:", err)
	}
	// Output: outcome unknown; resume later with the key: true true
}

// The visitor edited the enquiry after an uncertain outcome: the edited
// enquiry goes under a new key, superseding the old one, not under the old
// key (which the service would refuse as reused).
func ExampleClient_Amend() {
	srv := exampleService()
	defer srv.Close()
	c, err := client.New(srv.URL, "my-token", nil)
	if err != nil {
		panic(err)
	}
	ctx := context.Background()

	first := json.RawMessage(`{"email":"ada@example.com","source":"referral"}`)
	key := client.NewKey()
	if _, err := c.Submit(ctx, first, &client.SubmitOptions{Key: key}); err != nil {
		panic(err)
	}

	edited := json.RawMessage(`{"email":"ada@example.org","source":"referral"}`)
	_, err = c.Submit(ctx, edited, &client.SubmitOptions{Key: key})
	var refused *client.APIError
	fmt.Println("same key, other body:", errors.As(err, &refused) && refused.Code == client.CodeKeyReused)

	res, err := c.Amend(ctx, key, edited, nil)
	if err != nil {
		panic(err)
	}
	fmt.Println("amendment:", res.Status)
	// Output:
	// same key, other body: true
	// amendment: completed
}
