package intake_test

import (
	"context"
	"net/http"
	"slices"
	"sync"
	"testing"

	"github.com/leadintake/leadintake/internal/apicheck"
	"github.com/leadintake/leadintake/openapi"
	"github.com/leadintake/leadintake/response"
)

// A body with attribution, as the snippet sends it from a page and as a
// back office may send it, is accepted and stored as it came; one with a
// member the API does not know, at any depth, is refused and names it. The
// traffic is checked against the API description on the way.
func TestAttribution(t *testing.T) {
	t.Parallel()
	api := newTestAPI(t, nil)
	checker, err := apicheck.New(openapi.Document())
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu         sync.Mutex
		mismatches []error
	)
	checked := *api.client
	checked.Transport = checker.Transport(api.client.Transport, func(err error) {
		mu.Lock()
		defer mu.Unlock()
		mismatches = append(mismatches, err)
	})
	through := *api
	through.client = &checked
	send := func(req *http.Request) *reply {
		t.Helper()
		return through.send(t, req)
	}
	const (
		first = `{"landing_page":"https://shop.example/landing?utm_source=google&utm_medium=cpc&gclid=abc123","referrer":"https://www.google.com/",` +
			`"utm":{"source":"google","medium":"cpc"},"click_ids":{"gclid":"abc123"},"at":"2025-03-01T09:30:00.123Z"}`
		last = `{"landing_page":"https://shop.example/contact","at":"2025-03-01T09:41:12.5Z"}`
	)
	body := `{"email":"ada@example.com","source":"website","attribution":{"first":` + first + `,"last":` + last + `}}`

	for _, tc := range []struct {
		name string
		edit []func(*http.Request)
	}{
		{"Token", nil},
		{"PublishableKey", []func(*http.Request){withHeader("Authorization", "Bearer "+publishableKeyA), withHeader("Origin", shopOrigin)}},
	} {
		key := "attribution-" + tc.name
		send(api.submission(key, body, tc.edit...)).requireAccepted(t, key, false)
		var stored string
		if err := api.Pool.QueryRow(context.Background(),
			`SELECT submission->'attribution'->'first'->'click_ids'->>'gclid' FROM leads WHERE idempotency_key = $1`, key).Scan(&stored); err != nil || stored != "abc123" {
			t.Errorf("%s: the stored lead's first click id %q (%v), want abc123", tc.name, stored, err)
		}
	}

	for body, want := range map[string][]string{
		`{"email":"ada@example.com","source":"website","attribution":{"first":{"click_ids":{"ttclid":"x"}}}}`:    {"attribution.first.click_ids.ttclid"},
		`{"email":"ada@example.com","source":"website","attribution":{"last":{"page":"https://shop.example/"}}}`: {"attribution.last.page"},
	} {
		got := send(api.submission("attribution-unknown", body)).requireError(t, http.StatusUnprocessableEntity, response.CodeUnknownField)
		if !slices.Equal(got.fields(), want) {
			t.Errorf("%s: details name %q, want %q", body, got.fields(), want)
		}
	}
	got := send(api.submission("attribution-broken", `{"email":"ada@example.com","source":"website","attribution":{"first":{"landing_page":"/landing","at":"today"}}}`)).
		requireError(t, http.StatusUnprocessableEntity, response.CodeValidationFailed)
	if want := []string{"attribution.first.at", "attribution.first.landing_page"}; !slices.Equal(got.fields(), want) {
		t.Errorf("details name %q, want %q", got.fields(), want)
	}
	// Refused before the claim: the key stays free.
	if keyStored(t, api.Pool, "a", "attribution-unknown") || keyStored(t, api.Pool, "a", "attribution-broken") {
		t.Error("a refused body claimed its key")
	}

	mu.Lock()
	defer mu.Unlock()
	for _, err := range mismatches {
		t.Errorf("the exchange does not match the API description: %v", err)
	}
}
