package e2e

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/leadintake/leadintake/internal/apicheck"
	"github.com/leadintake/leadintake/store"
)

// Neither /metrics carries personal data, a key or a token in a label,
// whatever the requests put in their bodies, paths, queries and headers.
// (TestLogsHoldNoPersonalData does the same for the logs; job arguments are
// checked there too.)
func TestMetricsHoldNoPersonalData(t *testing.T) {
	t.Parallel()
	s := newStack(t, nil)
	api := s.startAPI()
	worker := s.startWorker()

	const (
		name    = "Ottoline Fairweather-Quist"
		email   = "ottoline.quist@metrics-pii.example"
		phone   = "+44 7700 900456"
		message = "call me about the tangerine submarine"
		key     = "metrics-pii-QzXkeyZ-0001"
	)
	body := `{"email":"` + email + `","source":"referral","name":"` + name + `","phone":"` + phone + `","message":"` + message + `"}`
	if r := s.submit(key, body); r.status != http.StatusAccepted {
		t.Fatalf("submit: %d %s", r.status, r.body)
	}
	s.waitState(key, time.Minute, string(store.KeyCompleted))
	s.submit(key, body) // a replay
	s.submit(key, strings.Replace(body, "referral", "ads", 1))
	s.submit("metrics-pii-QzXbadY-0002", `{"email":"`+email+`","source":"referral","`+name+`":1}`)

	// Personal data in paths, queries and headers, on known and unknown
	// routes.
	for _, path := range []string{
		"/v1/operations/" + url.PathEscape(email),
		"/v1/operations/" + key + "?email=" + url.QueryEscape(email),
		"/" + url.PathEscape(email),
		"/v1/leads/" + url.PathEscape(name),
	} {
		req, err := http.NewRequest(http.MethodGet, s.apiURL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+s.token)
		req.Header.Set("X-Request-Id", strings.ReplaceAll(name, " ", "-"))
		if strings.Contains(path, "?") {
			// The API takes no query parameter and ignores any it is
			// sent, which an OpenAPI document cannot say: this one is
			// sent on purpose, to see that it reaches no metric.
			req = apicheck.Unchecked(req)
		}
		s.do(req)
	}

	for _, target := range []struct {
		name string
		url  string
	}{{"api", adminURL(t, api) + "/metrics"}, {"worker", adminURL(t, worker) + "/metrics"}} {
		r := get(t, target.url, basicAuth{})
		if r.status != http.StatusOK {
			t.Fatalf("%s /metrics: %d", target.name, r.status)
		}
		text := strings.ToLower(string(r.body))
		for _, secret := range []string{
			name, "fairweather", email, "ottoline", "metrics-pii.example", phone, "7700 900456", "7700900456",
			message, "tangerine", key, "qzxkeyz", "qzxbady", s.token,
		} {
			if i := strings.Index(text, strings.ToLower(secret)); i >= 0 {
				t.Errorf("%s /metrics holds %q: %s", target.name, secret, lineAround(string(r.body), i))
			}
		}
	}
}
