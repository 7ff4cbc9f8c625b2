package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/leadintake/leadintake/internal/system"
	"github.com/leadintake/leadintake/store"
)

// Personal data and secrets that the logs test submits; none may appear in
// any process's output. Each is distinctive enough not to occur by chance.
const (
	piiName1    = "Zebedee Quux"
	piiEmail1   = "zebedee.quux@unusual-domain.example"
	piiPhone1   = "+44 7700 900123"
	piiMessage1 = "Please ring me about the purple hippopotamus kazoo order"
	piiName2    = "Philippa Vanterpool"
	piiEmail2   = "philippa.vanterpool@rare-mailhost.example"
	piiPhone2   = "+1 415 555 0199"
	piiMessage2 = "marmalade zeppelin gazebo, quietly"

	crmToken        = "crm-token-Kw9Rt2"
	enrichmentToken = "enrichment-token-Vb3Ym8"
	notifyToken     = "notify-token-Jq5Hs1"
	unknownToken    = "unknown-token-Xk29dQ"
)

// Keys hold a run of letters that no hex hash contains, so that a short hash
// of a key cannot match.
var piiKeys = map[string]string{
	"ok":        "pii-key-QzWokA-0001",
	"rejected":  "pii-key-QzWrejB-0002",
	"transient": "pii-key-QzWtrnC-0003",
	"exhausted": "pii-key-QzWexhD-0004",
	"invalid":   "pii-key-QzWinvE-0005",
	"unknown":   "pii-key-QzWunkF-0006",
	"unauth":    "pii-key-QzWunaG-0007",
	"phonelike": "447700900123",
}

func leadJSON(name, email, phone, message string) string {
	b, _ := json.Marshal(map[string]any{
		"email": email, "source": "referral", "name": name, "phone": phone, "message": message,
		"company": "Quux Holdings", "website": "https://unusual-domain.example/about",
		"utm": map[string]string{"campaign": "spring"}, "consent": true,
	})
	return string(b)
}

// Real api, worker and fakedownstream processes, at LOG_LEVEL=debug, go
// through successes, refusals, downstream failures of every kind and
// retries with distinctive personal data and secrets; then their whole
// output is searched for them.
func TestLogsHoldNoPersonalData(t *testing.T) {
	t.Parallel()
	s := newStack(t, nil)

	// The fakedownstream binary, not the in-process fake: its logs count too.
	fake, err := system.Start(bins.Path("fakedownstream"), []string{
		"FAKE_ADDR=127.0.0.1:0", "LOG_LEVEL=debug",
		"CRM_TOKEN=" + crmToken, "ENRICHMENT_TOKEN=" + enrichmentToken, "NOTIFY_TOKEN=" + notifyToken,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fake.Stop(15 * time.Second) })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	fakeAddr, err := fake.Addr(ctx, "addr")
	if err != nil {
		t.Fatal(err)
	}
	fakeURL := "http://" + fakeAddr
	s.fakeURL = fakeURL // startWorker points the worker at it

	api := s.startAPI("LOG_LEVEL=debug", "JOB_MAX_ATTEMPTS=8",
		"ADMIN_USER="+operator.user, "ADMIN_PASSWORD="+operator.password)
	worker := s.startWorker("LOG_LEVEL=debug", "JOB_MAX_ATTEMPTS=8", "DOWNSTREAM_TIMEOUT=2s",
		"CRM_TOKEN="+crmToken, "ENRICHMENT_TOKEN="+enrichmentToken, "NOTIFY_TOKEN="+notifyToken)
	admin := adminURL(t, api)

	body1 := leadJSON(piiName1, piiEmail1, piiPhone1, piiMessage1)
	body2 := leadJSON(piiName2, piiEmail2, piiPhone2, piiMessage2)
	// A downstream that echoes the lead in its error body, as real ones do.
	echo := fmt.Sprintf(`{"error":"rejected %s <%s> %s: %s"}`, piiName1, piiEmail1, piiPhone1, piiMessage1)

	// 1. A lead that goes through, replayed, polled, mismatched.
	req := s.leadRequest(piiKeys["ok"], body1)
	req.Header.Set("X-Request-Id", "req-logs-test-0001")
	if r := s.do(req); r.status != http.StatusAccepted {
		t.Fatalf("lead ok: %d %s", r.status, r.body)
	}
	s.waitState(piiKeys["ok"], time.Minute, string(store.KeyCompleted))
	if r := s.submit(piiKeys["ok"], body1); r.status != http.StatusCreated {
		t.Fatalf("replay: %d %s", r.status, r.body)
	}
	if r := s.operation(piiKeys["ok"]); r.status != http.StatusOK {
		t.Fatalf("operation: %d %s", r.status, r.body)
	}
	if r := s.submit(piiKeys["ok"], body2); r.status != http.StatusUnprocessableEntity {
		t.Fatalf("mismatch: %d %s", r.status, r.body)
	}

	// 2. Refusals, each carrying personal data where it is refused.
	refusals := []struct {
		name   string
		key    string
		ctype  string
		body   string
		status int
	}{
		{"bad email", piiKeys["invalid"], "application/json",
			leadJSON(piiName1, "zebedee.quux@@unusual-domain.example", piiPhone1, piiMessage1), http.StatusUnprocessableEntity},
		{"long name", piiKeys["invalid"], "application/json",
			leadJSON(piiName1+strings.Repeat(" Quux", 50), piiEmail1, piiPhone1, piiMessage1), http.StatusUnprocessableEntity},
		{"unknown field", piiKeys["invalid"], "application/json",
			`{"email":"` + piiEmail1 + `","source":"referral","passport":"` + piiName1 + `"}`, http.StatusUnprocessableEntity},
		{"bad source", piiKeys["invalid"], "application/json",
			`{"email":"` + piiEmail1 + `","source":"` + piiName1 + `"}`, http.StatusUnprocessableEntity},
		{"truncated JSON", piiKeys["invalid"], "application/json", body1[:len(body1)-3], http.StatusBadRequest},
		{"duplicate member", piiKeys["invalid"], "application/json",
			`{"email":"` + piiEmail1 + `","email":"` + piiEmail2 + `","source":"referral"}`, http.StatusBadRequest},
		{"wrong content type", piiKeys["invalid"], "text/plain", body1, http.StatusUnsupportedMediaType},
		{"body too large", piiKeys["invalid"], "application/json",
			`{"email":"` + piiEmail1 + `","source":"referral","message":"` + strings.Repeat(piiMessage1+" ", 2000) + `"}`, http.StatusRequestEntityTooLarge},
		{"phone-like key", piiKeys["phonelike"], "application/json", body1, http.StatusBadRequest},
		{"email as key", piiEmail1, "application/json", body1, http.StatusBadRequest},
	}
	for _, rf := range refusals {
		req := s.leadRequest(rf.key, rf.body)
		req.Header.Set("Content-Type", rf.ctype)
		if r := s.do(req); r.status != rf.status {
			t.Fatalf("%s: %d %s, want %d", rf.name, r.status, r.body, rf.status)
		}
	}
	req = s.leadRequest(piiKeys["unauth"], body1)
	req.Header.Set("Authorization", "Bearer "+unknownToken)
	if r := s.do(req); r.status != http.StatusUnauthorized {
		t.Fatalf("unknown token: %d %s", r.status, r.body)
	}
	req, _ = http.NewRequest(http.MethodGet, s.apiURL+"/v1/operations/"+piiKeys["unknown"], nil)
	req.Header.Set("Authorization", "Bearer "+unknownToken)
	if r := s.do(req); r.status != http.StatusUnauthorized {
		t.Fatalf("operation with an unknown token: %d %s", r.status, r.body)
	}
	if r := s.operation(piiKeys["unknown"]); r.status != http.StatusNotFound {
		t.Fatalf("unknown operation: %d %s", r.status, r.body)
	}
	// Personal data in a path and a query string.
	req, _ = http.NewRequest(http.MethodGet, s.apiURL+"/v1/leads/"+piiEmail1+"?phone="+strings.ReplaceAll(piiPhone1, " ", "%20"), nil)
	req.Header.Set("Authorization", "Bearer "+s.token)
	if r := s.do(req); r.status != http.StatusNotFound && r.status != http.StatusMethodNotAllowed {
		t.Fatalf("unknown route: %d %s", r.status, r.body)
	}

	// 3. The CRM rejects a lead for good, echoing it.
	fakeScript(t, fakeURL, "crm_upsert", map[string]any{"status": 400, "body": echo})
	if r := s.submit(piiKeys["rejected"], body2); r.status != http.StatusAccepted {
		t.Fatalf("lead rejected: %d %s", r.status, r.body)
	}
	if op := s.waitState(piiKeys["rejected"], time.Minute, string(store.KeyFailed), string(store.KeyCompleted)); op.State != string(store.KeyFailed) {
		t.Fatalf("lead the CRM rejects: %+v", op)
	}

	// 4. Transient failures everywhere: enrichment fails until given up, the
	// CRM answers 503 with Retry-After, hangs past DOWNSTREAM_TIMEOUT, drops
	// the connection after applying; the notification is refused.
	fakeScript(t, fakeURL, "enrichment",
		map[string]any{"status": 500, "body": echo}, map[string]any{"status": 502}, map[string]any{"drop_before_apply": true})
	fakeScript(t, fakeURL, "crm_upsert",
		map[string]any{"status": 503, "body": echo, "retry_after": "1"},
		map[string]any{"hang": true},
		map[string]any{"drop_after_apply": true})
	fakeScript(t, fakeURL, "notify", map[string]any{"status": 400, "body": echo})
	if r := s.submit(piiKeys["transient"], body1); r.status != http.StatusAccepted {
		t.Fatalf("lead transient: %d %s", r.status, r.body)
	}
	op := s.waitState(piiKeys["transient"], 2*time.Minute, string(store.KeyCompleted), string(store.KeyFailed))
	if op.State != string(store.KeyCompleted) || op.Response == nil ||
		!bytes.Contains(op.Response.Body, []byte("enrichment_unavailable")) || !bytes.Contains(op.Response.Body, []byte("notification_failed")) {
		t.Fatalf("lead after transient failures: %+v %s", op, responseBody(op))
	}

	// 5. The CRM stays unavailable past the job's attempts; a retry re-opens
	// the key and goes through.
	faults := make([]map[string]any, 8)
	for i := range faults {
		faults[i] = map[string]any{"status": 503, "body": echo}
	}
	fakeScript(t, fakeURL, "crm_upsert", faults...)
	if r := s.submit(piiKeys["exhausted"], body2); r.status != http.StatusAccepted {
		t.Fatalf("lead exhausted: %d %s", r.status, r.body)
	}
	if op := s.waitState(piiKeys["exhausted"], 2*time.Minute, string(store.KeyFailed), string(store.KeyCompleted)); op.State != string(store.KeyFailed) {
		t.Fatalf("lead whose CRM stays down: %+v", op)
	}
	if r := s.submit(piiKeys["exhausted"], body2); r.status != http.StatusAccepted || r.header.Get("Idempotent-Replayed") != "false" {
		t.Fatalf("re-open: %d %s", r.status, r.body)
	}
	s.waitState(piiKeys["exhausted"], time.Minute, string(store.KeyCompleted))

	// 6. The operators' side: River UI with wrong and right credentials.
	if r := get(t, admin+"/riverui/api/jobs?state=completed", basicAuth{user: operator.user, password: "wrong-" + operator.password}); r.status != http.StatusUnauthorized {
		t.Fatalf("River UI with a wrong password: %d", r.status)
	}
	if r := get(t, admin+"/riverui/api/jobs?state=completed", operator); r.status != http.StatusOK {
		t.Fatalf("River UI API: %d %s", r.status, r.body)
	}

	// Job arguments hold the lead id and nothing else.
	rows, err := s.pool.Query(context.Background(), `SELECT args FROM river_job WHERE kind = 'process_lead'`)
	if err != nil {
		t.Fatal(err)
	}
	jobs := 0
	for rows.Next() {
		var args map[string]any
		if err := rows.Scan(&args); err != nil {
			t.Fatal(err)
		}
		if _, ok := args["lead_id"]; !ok || len(args) != 1 {
			t.Errorf("process_lead args %v, want only lead_id", args)
		}
		jobs++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if jobs != 5 { // four leads, one re-opened
		t.Errorf("process_lead jobs: %d, want 5", jobs)
	}

	// Everything stops gracefully, so that shutdown logs count too.
	for name, p := range map[string]*system.Process{"api": api, "worker": worker, "fakedownstream": fake} {
		if err := p.Stop(30 * time.Second); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}

	secrets := []string{
		piiName1, piiEmail1, piiPhone1, piiMessage1, piiName2, piiEmail2, piiPhone2, piiMessage2,
		// Parts and other spellings of them.
		"Zebedee", "Quux", "zebedee.quux", "Vanterpool", "7700 900123", "7700900123", "900123", "415 555 0199",
		"hippopotamus", "marmalade",
		// Secrets.
		s.token, unknownToken, crmToken, enrichmentToken, notifyToken, operator.password,
	}
	for _, k := range piiKeys {
		secrets = append(secrets, k)
	}
	secrets = append(secrets, "QzWokA", "QzWrejB", "QzWtrnC", "QzWexhD", "QzWinvE", "QzWunkF", "QzWunaG")

	outputs := map[string]string{"api": api.Output(), "worker": worker.Output(), "fakedownstream": fake.Output()}
	for name, out := range outputs {
		lower := strings.ToLower(out)
		for _, secret := range secrets {
			if i := strings.Index(lower, strings.ToLower(secret)); i >= 0 {
				t.Errorf("%s's output holds %q:\n%s", name, secret, lineAround(out, i))
			}
		}
		// Structured logs: every line is one JSON object with time, level
		// and msg.
		for line := range strings.SplitSeq(strings.TrimRight(out, "\n"), "\n") {
			var ev map[string]any
			if err := json.Unmarshal([]byte(line), &ev); err != nil || ev["time"] == nil || ev["level"] == nil || ev["msg"] == nil {
				t.Errorf("%s: not a structured JSON log line: %s", name, line)
			}
		}
	}
	t.Logf("scanned %d, %d and %d bytes of api, worker and fakedownstream output",
		len(outputs["api"]), len(outputs["worker"]), len(outputs["fakedownstream"]))

	// One line per request, with its id, client, status, outcome and latency.
	found := false
	for line := range strings.SplitSeq(outputs["api"], "\n") {
		var ev map[string]any
		if json.Unmarshal([]byte(line), &ev) != nil || ev["msg"] != "request" || ev["request_id"] != "req-logs-test-0001" {
			continue
		}
		found = true
		for _, attr := range []string{"client_id", "status", "outcome", "latency_ms", "route", "method"} {
			if _, ok := ev[attr]; !ok {
				t.Errorf("request line without %s: %s", attr, line)
			}
		}
		if ev["client_id"] != "e2e" || ev["status"] != float64(http.StatusAccepted) || ev["outcome"] != "claimed" {
			t.Errorf("request line: %s", line)
		}
	}
	if !found {
		t.Errorf("no request line with request_id req-logs-test-0001 in the api's output")
	}
}

// leadRequest builds a POST /v1/leads with the stack's token.
func (s *stack) leadRequest(key, body string) *http.Request {
	s.t.Helper()
	req, err := http.NewRequest(http.MethodPost, s.apiURL+"/v1/leads", strings.NewReader(body))
	if err != nil {
		s.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+s.token)
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Content-Type", "application/json")
	return req
}

// fakeScript queues faults for target through the fakedownstream's control
// API.
func fakeScript(t *testing.T, fakeURL, target string, faults ...map[string]any) {
	t.Helper()
	body, err := json.Marshal(map[string]any{"target": target, "faults": faults})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := httpClient.Post(fakeURL+"/_fake/script", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("POST /_fake/script %s: %d", body, resp.StatusCode)
	}
}

func responseBody(op operationState) string {
	if op.Response == nil {
		return "(no response)"
	}
	return string(op.Response.Body)
}

// lineAround returns the line of out that holds byte i.
func lineAround(out string, i int) string {
	start := strings.LastIndexByte(out[:i], '\n') + 1
	end := strings.IndexByte(out[i:], '\n')
	if end < 0 {
		return out[start:]
	}
	return out[start : i+end]
}
