package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/leadintake/leadintake/web"
)

// spamClientsFile writes a clients file in which the site client's
// publishable key allows origin and is judged under spam (a YAML flow
// mapping), and returns its path.
func spamClientsFile(t *testing.T, origin, spam string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "clients.yaml")
	writeClientsFile(t, path, fmt.Sprintf(
		"clients:\n  - id: %s\n    tokens_sha256: [%s]\n    publishable_keys:\n      - key: %s\n        origins: [%s]\n        spam: %s\n",
		siteClient, sha256Hex(siteToken), sitePK, origin, spam))
	return path
}

// spamCommand runs `api spam args...` as an operator does, with the clients
// file.
func (s *stack) spamCommand(clientsFile string, args ...string) ran {
	s.t.Helper()
	return runBinary(s.t, "api", []string{"DATABASE_URL=" + s.dbURL, piiHashKey, "CLIENTS_FILE=" + clientsFile}, append([]string{"spam"}, args...)...)
}

// quarantinedKey is one row of `api spam list --json`.
type quarantinedKey struct {
	ClientID string   `json:"client_id"`
	Key      string   `json:"key"`
	LeadID   string   `json:"lead_id"`
	Reasons  []string `json:"reasons"`
}

// newKey returns the one key of the site client that keys does not hold.
func (s *stack) newSiteKey(keys []string) string {
	s.t.Helper()
	var fresh []string
	for _, k := range s.siteKeys() {
		if !slices.Contains(keys, k) {
			fresh = append(fresh, k)
		}
	}
	if len(fresh) != 1 {
		s.t.Fatalf("new keys %v, want one", fresh)
	}
	return fresh[0]
}

// A bot on the demo form: sent at once, and with the honeypot filled. The
// page shows its thank-you as for any enquiry; the enquiries are stored,
// quarantined, with their reasons, and reach no downstream. An operator
// lists them (no personal data), looks at one and releases it: it then
// reaches the CRM and sales once, under its lead id. A retry of the other
// is replayed, never judged again.
func TestSpamQuarantinedOnTheDemoForm(t *testing.T) {
	t.Parallel()
	s := newStack(t, nil)
	site := newDemoSite(t)
	// Nobody fills the form in under an hour here.
	clients := spamClientsFile(t, site.origin, "{min_seconds: 3600}")
	s.startAPI("CLIENTS_FILE=" + clients)
	s.startWorker()
	site.start(t, web.DemoConfig{API: s.apiURL, PublishableKey: sitePK})
	p := newPage(t)

	p.open(site.origin + "/")
	p.fill(enquiry)
	p.submit()
	if status := p.waitState("done"); !strings.Contains(status, "Thank you") {
		t.Errorf("quarantined: the visitor is told %q", status)
	}
	fast := s.newSiteKey(nil)

	p.reload()
	p.fill(map[string]string{"email": "bot@example.com", "name": "Bot", "message": "Buy now", "fax": "0123 456"})
	p.submit()
	if status := p.waitState("done"); !strings.Contains(status, "Thank you") {
		t.Errorf("honeypot: the visitor is told %q", status)
	}
	honeypot := s.newSiteKey([]string{fast})
	p.screenshot("quarantined")

	for _, key := range []string{fast, honeypot} {
		op := s.waitSiteState(key, "quarantined")
		if op.Response == nil || op.Response.Status != http.StatusOK || !strings.Contains(string(op.Response.Body), `"status":"received"`) {
			t.Errorf("key %s: response %+v, want 200 received", key, op.Response)
		}
	}
	if n := s.count(`SELECT count(*) FROM river_job WHERE kind = 'process_lead'`); n != 0 {
		t.Fatalf("%d jobs for quarantined enquiries, want none", n)
	}

	list := s.spamCommand(clients, "list", "--client", siteClient, "--json")
	if list.code != 0 {
		t.Fatalf("spam list: exit %d, %s", list.code, list.stderr)
	}
	if strings.Contains(list.stdout, "@example.com") || strings.Contains(list.stdout, "Ada") {
		t.Errorf("spam list shows personal data: %s", list.stdout)
	}
	var listed []quarantinedKey
	if err := json.Unmarshal([]byte(list.stdout), &listed); err != nil {
		t.Fatalf("spam list --json: %v\n%s", err, list.stdout)
	}
	reasons := map[string][]string{}
	for _, k := range listed {
		reasons[k.Key] = k.Reasons
	}
	if len(listed) != 2 || !slices.Equal(reasons[fast], []string{"too_fast"}) || !slices.Equal(reasons[honeypot], []string{"honeypot", "too_fast"}) {
		t.Fatalf("spam list: %+v; want %s too_fast and %s honeypot,too_fast", listed, fast, honeypot)
	}

	show := s.spamCommand(clients, "show", "--client", siteClient, "--json", honeypot)
	var shown struct {
		Enquiry json.RawMessage `json:"enquiry"`
	}
	if show.code != 0 || json.Unmarshal([]byte(show.stdout), &shown) != nil || !strings.Contains(string(shown.Enquiry), "bot@example.com") {
		t.Fatalf("spam show: exit %d, %s %s", show.code, show.stdout, show.stderr)
	}

	// Its retry, as a page would send it (other signals): replayed.
	req, err := http.NewRequest(http.MethodPost, s.apiURL+"/v1/leads", strings.NewReader(string(shown.Enquiry)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+sitePK)
	req.Header.Set("Origin", site.origin)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", honeypot)
	req.Header.Set("Form-Signals", "hp=?0, t=7200")
	if r := s.do(req); r.status != http.StatusOK || r.header.Get("Idempotent-Replayed") != "true" || !strings.Contains(string(r.body), `"received"`) {
		t.Fatalf("retry of a quarantined key: %d %v %s, want its 200 received replayed", r.status, r.header, r.body)
	}

	was := s.waitSiteState(fast, "quarantined")
	rel := s.spamCommand(clients, "release", "--client", siteClient, fast)
	if rel.code != 0 || rel.stdout != "released 1\n" {
		t.Fatalf("spam release: exit %d, stdout %q, stderr %q", rel.code, rel.stdout, rel.stderr)
	}
	done := s.waitSiteState(fast, "completed")
	if done.LeadID != was.LeadID || done.Response == nil || done.Response.Status != http.StatusCreated {
		t.Fatalf("released: %+v, want 201 under lead %s", done, was.LeadID)
	}
	st := s.fake.State()
	if st.Totals.CRMRecords != 1 || st.Totals.CRMWrites != 1 || st.Totals.Notifications != 1 {
		t.Fatalf("after one release: %+v, want one CRM record, one write, one notification", st.Totals)
	}
	// Released once: again changes nothing, and says so.
	again := s.spamCommand(clients, "release", "--client", siteClient, fast)
	if again.code != 1 || !strings.Contains(again.stderr, fast) {
		t.Fatalf("second release: exit %d, stdout %q, stderr %q", again.code, again.stdout, again.stderr)
	}
	if n := s.count(`SELECT count(*) FROM leads`); n != 2 {
		t.Fatalf("%d leads, want 2", n)
	}
	// Each release is in the audit, by the command line (the second
	// released none); so is the look at the honeypot's enquiry.
	if n := s.count(`SELECT count(*) FROM audit WHERE action = 'show_enquiry' AND actor = 'cli' AND keys @> jsonb_build_array(jsonb_build_object('key', $1::text))`, honeypot); n != 1 {
		t.Errorf("%d looks at the enquiry recorded, want 1", n)
	}
	if n := s.count(`SELECT count(*) FROM audit WHERE action = 'release' AND actor = 'cli' AND client_id = $1`, siteClient); n != 2 {
		t.Errorf("%d releases recorded, want 2", n)
	}
	if n := s.count(`SELECT count(*) FROM audit WHERE action = 'release' AND count = 1 AND keys @> jsonb_build_array(jsonb_build_object('key', $1::text))`, fast); n != 1 {
		t.Errorf("%d releases of %s recorded, want 1", n, fast)
	}
	if st := s.fake.State(); st.Totals.CRMWrites != 1 || st.Totals.Notifications != 1 {
		t.Fatalf("the honeypot's enquiry reached a downstream: %+v", st.Totals)
	}
}

// siteverify is a stand-in for a captcha's siteverify service: a token is
// good when it starts with "good"; it keeps what it was asked.
type siteverify struct {
	srv *httptest.Server

	mu    sync.Mutex
	asked []url.Values
}

func newSiteverify(t *testing.T) *siteverify {
	t.Helper()
	v := &siteverify{}
	v.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		form, err := url.ParseQuery(string(body))
		if r.Method != http.MethodPost || err != nil {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		v.mu.Lock()
		v.asked = append(v.asked, form)
		v.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"success": %t}`, form.Get("secret") == "captcha-secret" && strings.HasPrefix(form.Get("response"), "good"))
	}))
	t.Cleanup(v.srv.Close)
	return v
}

func (v *siteverify) requests() []url.Values {
	v.mu.Lock()
	defer v.mu.Unlock()
	return slices.Clone(v.asked)
}

// A person on a form with a captcha: the form sent a few seconds after it
// was shown, with the widget's good token, becomes a lead as ever, also
// with hCaptcha's token of several KiB. The same form with a token that
// fails verification is quarantined.
func TestSpamCaptchaOnTheDemoForm(t *testing.T) {
	t.Parallel()
	s := newStack(t, nil)
	site := newDemoSite(t)
	verify := newSiteverify(t)
	clients := spamClientsFile(t, site.origin, fmt.Sprintf("{captcha: {verify_url: %s, secret: captcha-secret}}", verify.srv.URL))
	s.startAPI("CLIENTS_FILE=" + clients)
	s.startWorker()
	site.start(t, web.DemoConfig{API: s.apiURL, PublishableKey: sitePK})
	p := newPage(t)

	// The widget leaves its token in a hidden field of the form, as
	// Turnstile (cf-turnstile-response) and hCaptcha (h-captcha-response)
	// do.
	widget := func(field, token string) {
		p.eval(`(() => { const f = document.getElementById("enquiry"); let el = f.querySelector("[name=` + field + `]");
		  if (!el) { el = document.createElement("input"); el.type = "hidden"; el.name = "` + field + `"; f.append(el); }
		  el.value = ` + jsString(token) + `; return ""; })()`)
	}
	// A person takes longer than the default two seconds.
	person := func(token string) {
		field := "cf-turnstile-response"
		if len(token) > 2048 {
			field = "h-captcha-response"
		}
		p.fill(enquiry)
		widget(field, token)
		time.Sleep(3 * time.Second)
		p.submit()
		if status := p.waitState("done"); !strings.Contains(status, "Thank you") {
			t.Errorf("token %q: the visitor is told %q", token, status)
		}
	}

	p.open(site.origin + "/")
	person("good")
	good := s.newSiteKey(nil)
	s.waitSiteState(good, "completed")

	p.reload()
	person("forged")
	forged := s.newSiteKey([]string{good})
	s.waitSiteState(forged, "quarantined")

	// hCaptcha's tokens run to several KiB.
	hcaptcha := "good-P1_" + strings.Repeat("eyJ0eXAiOiJKV1Qi", 375)
	p.reload()
	person(hcaptcha)
	long := s.newSiteKey([]string{good, forged})
	s.waitSiteState(long, "completed")

	asked := verify.requests()
	if len(asked) != 3 {
		t.Fatalf("siteverify asked %d times, want once per new key", len(asked))
	}
	for i, want := range []string{"good", "forged", hcaptcha} {
		f := asked[i]
		if f.Get("response") != want || f.Get("secret") != "captcha-secret" || f.Get("remoteip") != "127.0.0.1" {
			t.Errorf("siteverify request %d: %.200v, want response %.20s... (%d bytes), the secret and remoteip 127.0.0.1", i, f, want, len(want))
		}
		if _, err := uuid.Parse(f.Get("idempotency_key")); err != nil {
			t.Errorf("siteverify request %d: idempotency_key %q, want a UUID", i, f.Get("idempotency_key"))
		}
	}
	list := s.spamCommand(clients, "list", "--json")
	var listed []quarantinedKey
	if err := json.Unmarshal([]byte(list.stdout), &listed); err != nil || len(listed) != 1 || listed[0].Key != forged || !slices.Equal(listed[0].Reasons, []string{"captcha_failed"}) {
		t.Fatalf("spam list: %s %s, want %s captcha_failed", list.stdout, list.stderr, forged)
	}
	if st := s.fake.State(); st.Totals.CRMWrites != 2 || st.Totals.Notifications != 2 {
		t.Fatalf("downstream: %+v, want the two good enquiries alone", st.Totals)
	}
}
