package intake_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/leadintake/leadintake/intake"
	"github.com/leadintake/leadintake/internal/testkit"
	"github.com/leadintake/leadintake/response"
	"github.com/leadintake/leadintake/store"
)

// signals adds Form-Signals to a page's request.
func signals(value string) func(*http.Request) {
	return func(r *http.Request) { r.Header.Set("Form-Signals", value) }
}

// requireReceived checks a quarantined enquiry's answer: 200 received, as a
// page sees it.
func (r *reply) requireReceived(t *testing.T, key string, replayed bool) string {
	t.Helper()
	var body struct {
		Status string `json:"status"`
		LeadID string `json:"lead_id"`
	}
	if r.Status != http.StatusOK || json.Unmarshal(r.Body, &body) != nil || body.Status != "received" || body.LeadID == "" ||
		r.Header.Get("Idempotency-Key") != key || r.Header.Get("Idempotent-Replayed") != fmt.Sprint(replayed) {
		t.Fatalf("answer %d %v %s, want 200 received, replayed %t", r.Status, r.Header, r.Body, replayed)
	}
	return body.LeadID
}

// quarantined reads a key's state, its lead's spam reasons, and whether its
// lead has a job.
func quarantined(t *testing.T, api *testAPI, key string) (state string, reasons []string, hasJob bool) {
	t.Helper()
	err := api.Pool.QueryRow(context.Background(), `
SELECT k.state, coalesce(l.spam_reasons, '{}'), l.job_id IS NOT NULL
FROM idempotency_keys k JOIN leads l ON l.id = k.lead_id WHERE k.client_id = 'a' AND k.key = $1`, key).Scan(&state, &reasons, &hasJob)
	if err != nil {
		t.Fatal(err)
	}
	return state, reasons, hasJob
}

// A page's new submission is judged from its Form-Signals when its
// publishable key has a spam policy: spam is stored and finished at once,
// quarantined (200 received, no job), and never judged again.
func TestSpamVerdict(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	api := newTestAPI(t, &testAPIOpts{Spam: "{min_seconds: 3}", Registry: reg})
	page := fromPage(shopOrigin)
	// Once every subtest ran: each reason counted for each verdict it was
	// part of.
	t.Cleanup(func() {
		for reason, want := range map[string]float64{"honeypot": 2, "too_fast": 2, "no_signals": 2} {
			if got := spamCount(t, reg, reason); got != want {
				t.Errorf("leadintake_spam_total{reason=%q} = %v, want %v", reason, got, want)
			}
		}
	})

	for _, tt := range []struct {
		name, signals string
		want          []string
	}{
		{"Honeypot", "hp=?1, t=8", []string{"honeypot"}},
		{"TooFast", "hp=?0, t=1", []string{"too_fast"}},
		{"HoneypotAndTooFast", "hp, t=0", []string{"honeypot", "too_fast"}},
		{"Malformed", "hp=yes; t=3", []string{"no_signals"}},
		{"Missing", "", []string{"no_signals"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			key := testkit.NewKey()
			edits := []func(*http.Request){page}
			if tt.signals != "" {
				edits = append(edits, signals(tt.signals))
			}
			res := api.send(t, api.submission(key, validBody, edits...))
			res.requireReceived(t, key, false)
			requireCORS(t, res)
			state, reasons, hasJob := quarantined(t, api, key)
			if state != "quarantined" || !slices.Equal(reasons, tt.want) || hasJob {
				t.Errorf("key %s, reasons %v, job %t; want quarantined, %v, no job", state, reasons, hasJob, tt.want)
			}
			// A retry, even with fine signals, is a replay: never judged
			// again.
			api.send(t, api.submission(key, validBody, page, signals("hp=?0, t=30"))).requireReceived(t, key, true)
			op := api.send(t, edited(api.operation(tokenA, key), page))
			var got struct {
				State    string `json:"state"`
				Response struct {
					Status int             `json:"status"`
					Body   json.RawMessage `json:"body"`
				} `json:"response"`
			}
			if op.Status != http.StatusOK || json.Unmarshal(op.Body, &got) != nil || got.State != "quarantined" ||
				got.Response.Status != http.StatusOK || !strings.Contains(string(got.Response.Body), `"received"`) {
				t.Errorf("operation %d %s", op.Status, op.Body)
			}
		})
	}

	t.Run("APersonGoesThrough", func(t *testing.T) {
		t.Parallel()
		key := testkit.NewKey()
		api.send(t, api.submission(key, validBody, page, signals("hp=?0, t=4"))).requireAccepted(t, key, false)
		if state, _, hasJob := quarantined(t, api, key); state != "processing" || !hasJob {
			t.Errorf("key %s, job %t; want processing with its job", state, hasJob)
		}
	})

	t.Run("BearerTokensAreNeverJudged", func(t *testing.T) {
		t.Parallel()
		key := testkit.NewKey()
		api.send(t, api.submission(key, validBody)).requireAccepted(t, key, false)
	})
}

// spamCount is the sum of leadintake_spam_total for reason.
func spamCount(t *testing.T, reg *prometheus.Registry, reason string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	v := 0.0
	for _, f := range families {
		if f.GetName() != "leadintake_spam_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" && l.GetValue() == reason {
					v += m.GetCounter().GetValue()
				}
			}
		}
	}
	return v
}

// Under a policy that refuses spam, the page is told 403 spam_refused and
// nothing is stored: the key stays free.
func TestSpamRefused(t *testing.T) {
	t.Parallel()
	api := newTestAPI(t, &testAPIOpts{Spam: "{action: refuse}"})
	page := fromPage(shopOrigin)
	key := testkit.NewKey()
	res := api.send(t, api.submission(key, validBody, page, signals("hp=?1, t=9")))
	res.requireError(t, http.StatusForbidden, response.CodeSpamRefused)
	requireCORS(t, res)
	if keyStored(t, api.Pool, "a", key) {
		t.Fatal("a refused enquiry stored its key")
	}
	api.send(t, api.submission(key, validBody, page, signals("hp=?0, t=9"))).requireAccepted(t, key, false)
	// The same spam again, on the key that now exists: answered as it
	// stands.
	api.send(t, api.submission(key, validBody, page, signals("hp=?1, t=0"))).requireAccepted(t, key, true)
}

// siteverify stands in for a captcha's siteverify service: a token is good
// when it starts with "good", the service answers with status otherwise when status
// is not 200, and calls counts the calls.
type siteverify struct {
	url    string
	calls  atomic.Int64
	status atomic.Int64
}

func newSiteverify(t *testing.T) *siteverify {
	t.Helper()
	sv := &siteverify{}
	sv.status.Store(http.StatusOK)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sv.calls.Add(1)
		if st := int(sv.status.Load()); st != http.StatusOK {
			w.WriteHeader(st)
			return
		}
		fmt.Fprintf(w, `{"success": %t}`, strings.HasPrefix(r.PostFormValue("response"), "good") && r.PostFormValue("secret") == "captcha-secret")
	}))
	t.Cleanup(srv.Close)
	sv.url = srv.URL
	return sv
}

// With a captcha, the page's token is verified with the siteverify service
// at the claim of a new key: a good one passes, a bad or missing one is
// quarantined, and one that cannot be verified is 503 captcha_unavailable,
// nothing stored. A token of several KiB (hCaptcha's) is verified; one over
// 8,192 bytes is not sent.
func TestSpamCaptcha(t *testing.T) {
	t.Parallel()
	sv := newSiteverify(t)
	api := newTestAPI(t, &testAPIOpts{Spam: fmt.Sprintf("{captcha: {verify_url: %q, secret: captcha-secret}}", sv.url)})
	page := fromPage(shopOrigin)

	good := testkit.NewKey()
	api.send(t, api.submission(good, validBody, page, signals(`hp=?0, t=5, captcha="good"`))).requireAccepted(t, good, false)
	bad := testkit.NewKey()
	api.send(t, api.submission(bad, validBody, page, signals(`hp=?0, t=5, captcha="forged"`))).requireReceived(t, bad, false)
	if calls := sv.calls.Load(); calls != 2 {
		t.Errorf("%d verifications, want 2", calls)
	}
	// Retries are never verified again.
	api.send(t, api.submission(good, validBody, page, signals(`hp=?0, t=5, captcha="good"`))).requireAccepted(t, good, true)
	api.send(t, api.submission(bad, validBody, page, signals(`hp=?0, t=5, captcha="good"`))).requireReceived(t, bad, true)
	hcaptcha := testkit.NewKey()
	api.send(t, api.submission(hcaptcha, validBody, page, signals(`hp=?0, t=5, captcha="good`+strings.Repeat("g", 8188)+`"`))).
		requireAccepted(t, hcaptcha, false)
	if calls := sv.calls.Load(); calls != 3 {
		t.Errorf("%d verifications after two retries and a token of 8,192 bytes, want 3", calls)
	}
	long := testkit.NewKey()
	api.send(t, api.submission(long, validBody, page, signals(`hp=?0, t=5, captcha="good`+strings.Repeat("g", 8189)+`"`))).requireReceived(t, long, false)
	if calls := sv.calls.Load(); calls != 3 {
		t.Errorf("%d verifications after a token of 8,193 bytes, want still 3", calls)
	}
	if _, reasons, _ := quarantined(t, api, long); !slices.Equal(reasons, []string{"captcha_failed"}) {
		t.Errorf("a long token's reasons %v", reasons)
	}

	sv.status.Store(http.StatusInternalServerError)
	down := testkit.NewKey()
	res := api.send(t, api.submission(down, validBody, page, signals(`hp=?0, t=5, captcha="good"`)))
	res.requireError(t, http.StatusServiceUnavailable, response.CodeCaptchaUnavailable)
	if res.Header.Get("Retry-After") == "" {
		t.Error("503 captcha_unavailable without Retry-After")
	}
	if keyStored(t, api.Pool, "a", down) {
		t.Fatal("an enquiry whose captcha could not be verified stored its key")
	}
	sv.status.Store(http.StatusOK)
	api.send(t, api.submission(down, validBody, page, signals(`hp=?0, t=5, captcha="good"`))).requireAccepted(t, down, false)
}

// A spam verdict counts against the page's rate limit, as the submission
// that claimed a new key it is.
func TestSpamCountsAgainstTheRateLimit(t *testing.T) {
	t.Parallel()
	api := newTestAPI(t, &testAPIOpts{Spam: "{}", PublicRateLimit: intake.RateLimit{N: 2, Per: time.Hour}})
	page := fromPage(shopOrigin)
	for range 2 {
		key := testkit.NewKey()
		api.send(t, api.submission(key, validBody, page, signals("hp=?1, t=5"))).requireReceived(t, key, false)
	}
	api.send(t, api.submission(testkit.NewKey(), validBody, page, signals("hp=?0, t=5"))).
		requireError(t, http.StatusTooManyRequests, response.CodeRateLimited)
}

// A new lead with the same email and content as an earlier one of the
// client under another key, within DUPLICATE_WINDOW, is flagged (never
// refused); another utm is the same content; along an amendment chain, or
// with the window off, nothing is flagged.
func TestPossibleDuplicates(t *testing.T) {
	t.Parallel()
	duplicateOf := func(t *testing.T, api *testAPI, key string) *string {
		t.Helper()
		var dup *string
		if err := api.Pool.QueryRow(context.Background(), `
SELECT l.duplicate_of::text FROM idempotency_keys k JOIN leads l ON l.id = k.lead_id
WHERE k.client_id = 'a' AND k.key = $1`, key).Scan(&dup); err != nil {
			t.Fatal(err)
		}
		return dup
	}
	withUTM := `{"email":"ada@example.com","source":"website","name":"Ada Lovelace","utm":{"source":"newsletter"}}`

	t.Run("Flagged", func(t *testing.T) {
		t.Parallel()
		api := newTestAPI(t, &testAPIOpts{DuplicateWindow: time.Hour})
		first, second, other := testkit.NewKey(), testkit.NewKey(), testkit.NewKey()
		p := api.send(t, api.submission(first, validBody)).requireAccepted(t, first, false)
		api.send(t, api.submission(second, withUTM)).requireAccepted(t, second, false)
		api.send(t, api.submission(other, `{"email":"ada@example.com","source":"website","name":"Ada"}`)).requireAccepted(t, other, false)
		if dup := duplicateOf(t, api, second); dup == nil || *dup != p.LeadID {
			t.Errorf("the second lead's duplicate_of %v, want %s", dup, p.LeadID)
		}
		if dup := duplicateOf(t, api, first); dup != nil {
			t.Errorf("the first lead is flagged a duplicate of %s", *dup)
		}
		if dup := duplicateOf(t, api, other); dup != nil {
			t.Errorf("another content is flagged a duplicate of %s", *dup)
		}
		// An amendment with the same content is no duplicate of the key it
		// amends.
		amend := testkit.NewKey()
		api.send(t, api.submission(amend, validBody, func(r *http.Request) { r.Header.Set("Supersedes", first) })).
			requireAccepted(t, amend, false)
		if dup := duplicateOf(t, api, amend); dup != nil && *dup == p.LeadID {
			t.Errorf("an amendment is flagged a duplicate of the lead it amends")
		}
	})

	// A quarantined lead is nobody's original: sales never saw it. Once
	// released, it is.
	t.Run("QuarantinedIsNoOriginal", func(t *testing.T) {
		t.Parallel()
		api := newTestAPI(t, &testAPIOpts{DuplicateWindow: time.Hour, Spam: "{}"})
		spam, second, third := testkit.NewKey(), testkit.NewKey(), testkit.NewKey()
		spamLead := api.send(t, api.submission(spam, validBody, fromPage(shopOrigin), signals("hp=?1, t=9"))).requireReceived(t, spam, false)
		api.send(t, api.submission(second, validBody)).requireAccepted(t, second, false)
		if dup := duplicateOf(t, api, second); dup != nil {
			t.Errorf("a lead is flagged a duplicate of a quarantined one (%s)", *dup)
		}
		released, err := api.Store.Release(t.Context(), &store.ReleaseParams{ClientID: "a", Keys: []string{spam}, By: &store.Who{Name: "cli", Via: store.ViaCLI}})
		if err != nil || len(released.Keys) != 1 {
			t.Fatalf("release: %+v %v", released, err)
		}
		api.send(t, api.submission(third, validBody)).requireAccepted(t, third, false)
		if dup := duplicateOf(t, api, third); dup == nil || *dup != spamLead {
			t.Errorf("after its release, a lead's duplicate_of %v, want the released %s", dup, spamLead)
		}
	})

	t.Run("WindowOff", func(t *testing.T) {
		t.Parallel()
		api := newTestAPI(t, nil)
		first, second := testkit.NewKey(), testkit.NewKey()
		api.send(t, api.submission(first, validBody)).requireAccepted(t, first, false)
		api.send(t, api.submission(second, validBody)).requireAccepted(t, second, false)
		if dup := duplicateOf(t, api, second); dup != nil {
			t.Errorf("flagged with DUPLICATE_WINDOW=0: %s", *dup)
		}
	})
}

// captchaPolicy is the spam policy of a captcha verified by sv.
func captchaPolicy(sv *siteverify) string {
	return fmt.Sprintf("{captcha: {verify_url: %q, secret: captcha-secret}}", sv.url)
}

// For a new key the order is validation, Supersedes, the rate limit, then
// the verdict: an amendment naming a key it may not amend (unknown, or
// superseded already) gets its 422 or 409 without spending a rate-limit
// token or a captcha verification.
func TestSpamOrder(t *testing.T) {
	t.Parallel()
	page := fromPage(shopOrigin)
	good := signals(`hp=?0, t=5, captcha="good"`)

	t.Run("SupersedesBeforeTheRateLimit", func(t *testing.T) {
		t.Parallel()
		sv := newSiteverify(t)
		api := newTestAPI(t, &testAPIOpts{Spam: captchaPolicy(sv), PublicRateLimit: intake.RateLimit{N: 2, Per: time.Hour}})
		first, second := testkit.NewKey(), testkit.NewKey()
		api.send(t, api.submission(first, validBody, page, good)).requireAccepted(t, first, false)
		api.send(t, api.submission(second, otherBody, page, good, withHeader("Supersedes", first))).requireAccepted(t, second, false)
		// The hour's two submissions are spent.
		for _, tt := range []struct {
			supersedes string
			status     int
			code       response.Code
		}{
			{testkit.NewKey(), http.StatusUnprocessableEntity, response.CodeSupersedesUnknown},
			{first, http.StatusConflict, response.CodeAlreadySuperseded},
		} {
			key := testkit.NewKey()
			api.send(t, api.submission(key, otherBody, page, good, withHeader("Supersedes", tt.supersedes))).requireError(t, tt.status, tt.code)
			if keyStored(t, api.Pool, "a", key) {
				t.Fatalf("the refused amendment stored %s", key)
			}
		}
		// Validation comes first of all.
		api.send(t, api.submission(testkit.NewKey(), `{"email":"ada@example.com"}`, page, good, withHeader("Supersedes", testkit.NewKey()))).
			requireError(t, http.StatusUnprocessableEntity, response.CodeValidationFailed)
		if calls := sv.calls.Load(); calls != 2 {
			t.Errorf("%d verifications, want the two claims' only", calls)
		}
		api.send(t, api.submission(testkit.NewKey(), otherBody, page, good, withHeader("Supersedes", second))).
			requireError(t, http.StatusTooManyRequests, response.CodeRateLimited)
	})

	t.Run("SupersedesBeforeTheCaptcha", func(t *testing.T) {
		t.Parallel()
		sv := newSiteverify(t)
		api := newTestAPI(t, &testAPIOpts{Spam: captchaPolicy(sv)})
		first, second := testkit.NewKey(), testkit.NewKey()
		api.send(t, api.submission(first, validBody, page, good)).requireAccepted(t, first, false)
		api.send(t, api.submission(second, otherBody, page, good, withHeader("Supersedes", first))).requireAccepted(t, second, false)
		api.send(t, api.submission(testkit.NewKey(), otherBody, page, good, withHeader("Supersedes", testkit.NewKey()))).
			requireError(t, http.StatusUnprocessableEntity, response.CodeSupersedesUnknown)
		api.send(t, api.submission(testkit.NewKey(), otherBody, page, good, withHeader("Supersedes", first))).
			requireError(t, http.StatusConflict, response.CodeAlreadySuperseded)
		if calls := sv.calls.Load(); calls != 2 {
			t.Errorf("%d verifications, want the two claims' only: a refused amendment spends no captcha token", calls)
		}
	})
}

// The captcha's verification has a time-out of its own, at most half of
// REQUEST_TIMEOUT: a siteverify service that hangs is 503
// captcha_unavailable well before the request's time is up, and the claim
// keeps its budget.
func TestSpamCaptchaTimeout(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	hung := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(hung.Close)
	t.Cleanup(func() { close(release) }) // first: Close waits for the handler
	const requestTimeout = 4 * time.Second
	api := newTestAPI(t, &testAPIOpts{
		Spam:           fmt.Sprintf("{captcha: {verify_url: %q, secret: captcha-secret}}", hung.URL),
		RequestTimeout: requestTimeout,
	})
	key := testkit.NewKey()
	start := time.Now()
	res := api.send(t, api.submission(key, validBody, fromPage(shopOrigin), signals(`hp=?0, t=5, captcha="good"`)))
	took := time.Since(start)
	res.requireError(t, http.StatusServiceUnavailable, response.CodeCaptchaUnavailable)
	if took >= requestTimeout*3/4 {
		t.Errorf("the verification took %v of a REQUEST_TIMEOUT of %v; want at most half of it", took, requestTimeout)
	}
	if keyStored(t, api.Pool, "a", key) {
		t.Fatal("an enquiry whose captcha could not be verified stored its key")
	}
}

// The siteverify form carries idempotency_key: a UUID of the client, the
// Idempotency-Key, the request's fingerprint and the token. A retry of the
// same submission after a 503 sends the same one (Turnstile answers it with
// its first verdict); another body under the same key, another key, or
// another token, another.
func TestSpamCaptchaIdempotencyKey(t *testing.T) {
	t.Parallel()
	var (
		mu   sync.Mutex
		keys []string
	)
	status := atomic.Int64{}
	status.Store(http.StatusInternalServerError)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		keys = append(keys, r.PostFormValue("idempotency_key"))
		mu.Unlock()
		if st := int(status.Load()); st != http.StatusOK {
			w.WriteHeader(st)
			return
		}
		fmt.Fprintf(w, `{"success": %t}`, strings.HasPrefix(r.PostFormValue("response"), "good"))
	}))
	t.Cleanup(srv.Close)
	api := newTestAPI(t, &testAPIOpts{Spam: fmt.Sprintf("{captcha: {verify_url: %q, secret: captcha-secret}}", srv.URL)})
	page := fromPage(shopOrigin)
	last := func() string {
		mu.Lock()
		defer mu.Unlock()
		return keys[len(keys)-1]
	}
	send := func(key, body, token string) *reply {
		return api.send(t, api.submission(key, body, page, signals(`hp=?0, t=5, captcha="`+token+`"`)))
	}
	key := testkit.NewKey()
	send(key, validBody, "good-1").requireError(t, http.StatusServiceUnavailable, response.CodeCaptchaUnavailable)
	first := last()
	if _, err := uuid.Parse(first); err != nil {
		t.Fatalf("idempotency_key %q is no UUID", first)
	}
	send(key, otherBody, "good-1").requireError(t, http.StatusServiceUnavailable, response.CodeCaptchaUnavailable)
	if last() == first {
		t.Error("another body under the same Idempotency-Key has the same idempotency_key")
	}
	send(testkit.NewKey(), validBody, "good-1").requireError(t, http.StatusServiceUnavailable, response.CodeCaptchaUnavailable)
	if last() == first {
		t.Error("another Idempotency-Key has the same idempotency_key")
	}
	send(key, validBody, "good-2").requireError(t, http.StatusServiceUnavailable, response.CodeCaptchaUnavailable)
	if last() == first {
		t.Error("another token has the same idempotency_key")
	}
	status.Store(http.StatusOK)
	send(key, validBody, "good-1").requireAccepted(t, key, false)
	if got := last(); got != first {
		t.Errorf("the retry's idempotency_key %q, want the first attempt's %q", got, first)
	}
}
