package e2e

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leadintake/leadintake/intake"
	"github.com/leadintake/leadintake/internal/testkit"
	"github.com/leadintake/leadintake/web"
)

// The demo form in a real browser, from an origin of its own, sending
// through the snippet to the real api and worker.

// enquiry is what the visitor types in every test.
var enquiry = map[string]string{
	"email":   "ada@example.com",
	"name":    "Ada Lovelace",
	"company": "Analytical Engines",
	"message": "We would like a demo.",
}

// A refused field is shown next to the field, for assistive technology too;
// the corrected enquiry is sent under a new key and completes: one lead.
func TestSnippetSubmits(t *testing.T) {
	t.Parallel()
	s := newStack(t, nil)
	site := newDemoSite(t)
	s.startAPI("CLIENTS_FILE=" + siteClientsFile(t, site.origin))
	s.startWorker()
	site.start(t, web.DemoConfig{API: s.apiURL, PublishableKey: sitePK})
	p := newPage(t)
	p.open(site.origin + "/")

	// The browser lets ftp:// through (type=url); the api does not.
	p.fill(enquiry)
	p.fill(map[string]string{"website": "ftp://files.example"})
	p.submit()
	status := p.waitState("failed")
	if !strings.Contains(status, "correct the marked fields") {
		t.Errorf("after a refused field the visitor is told %q", status)
	}
	if got := p.eval(`[document.activeElement.id, document.getElementById("website").getAttribute("aria-invalid"),
		document.getElementById("website").getAttribute("aria-describedby"), document.getElementById("website-error")?.textContent].join("|")`); got !=
		"website|true|website-hint website-error|Please enter a full web address, starting with https://." {
		t.Errorf("the refused field (focus|aria-invalid|aria-describedby|error): %q", got)
	}
	p.screenshot("refused")
	if n := s.count(`SELECT count(*) FROM idempotency_keys`); n != 0 {
		t.Fatalf("a refused enquiry stored %d keys", n)
	}
	if key, _ := p.pending(); key != "" {
		t.Errorf("a refused enquiry is still pending (%s): the corrected one must not supersede it", key)
	}

	p.fill(map[string]string{"website": "https://analytical.example"})
	p.submit()
	status = p.waitState("done")
	if !strings.Contains(status, "Thank you") {
		t.Errorf("done: the visitor is told %q", status)
	}
	if got := p.eval(`document.getElementById("website").getAttribute("aria-invalid") ?? "none"`); got != "none" {
		t.Errorf("the corrected field is still aria-invalid=%q", got)
	}
	p.screenshot("done")
	if n := s.count(`SELECT count(*) FROM leads`); n != 1 {
		t.Fatalf("%d leads, want 1", n)
	}
	if key, _ := p.pending(); key != "" {
		t.Errorf("the completed enquiry is still pending (%s)", key)
	}
	if email := p.eval(`document.getElementById("email").value`); email != "" {
		t.Errorf("the form still holds %q after the enquiry completed", email)
	}
}

// The api commits the first POST, and its answer never reaches the browser:
// the page finds the enquiry under its key and shows success. One lead.
func TestSnippetLostResponse(t *testing.T) {
	t.Parallel()
	s := newStack(t, nil)
	site := newDemoSite(t)
	s.startAPI("CLIENTS_FILE=" + siteClientsFile(t, site.origin))
	s.startWorker()
	proxy := newLossyProxy(t, s.apiURL)
	lostOne := false
	proxy.loseWhen(func(r *http.Request) bool {
		if r.Method == http.MethodPost && r.URL.Path == "/v1/leads" && !lostOne {
			lostOne = true
			return true
		}
		return false
	})
	site.start(t, web.DemoConfig{API: proxy.url, PublishableKey: sitePK})
	p := newPage(t)
	p.open(site.origin + "/")
	p.recordProgress()
	p.fill(enquiry)
	p.submit()
	status := p.waitState("done")
	p.screenshot("done")
	if !strings.Contains(status, "Thank you") {
		t.Errorf("done: the visitor is told %q", status)
	}
	t.Logf("progress events: %q", p.progress())
	if lost := proxy.lostAnswers(); len(lost) != 1 || lost[0] != "POST /v1/leads" {
		t.Fatalf("answers lost: %v, want the first POST's", lost)
	}
	if n := s.count(`SELECT count(*) FROM leads`); n != 1 {
		t.Fatalf("%d leads, want 1", n)
	}
	if keys := s.siteKeys(); len(keys) != 1 {
		t.Fatalf("keys %v, want one", keys)
	}
	if out := s.apiOutcomes(); out["claimed"] != 1 {
		t.Errorf("POST /v1/leads outcomes %v, want one claim", out)
	}
}

// The page is reloaded while its enquiry waits for a worker. Once the api
// acknowledged the enquiry (its 202) the browser keeps only its key: the
// reloaded page polls that key, sends nothing again, and shows success
// once a worker runs. One lead.
func TestSnippetResumesAfterReload(t *testing.T) {
	t.Parallel()
	s := newStack(t, nil)
	site := newDemoSite(t)
	s.startAPI("CLIENTS_FILE=" + siteClientsFile(t, site.origin))
	// No worker yet: the enquiry is stored and stays unfinished. The page
	// keeps trying for far longer than the test takes.
	site.start(t, web.DemoConfig{API: s.apiURL, PublishableKey: sitePK, Timeout: 30 * time.Minute, Wait: 2 * time.Second})
	p := newPage(t)
	p.open(site.origin + "/")
	p.fill(enquiry)
	p.submit()
	status := p.waitState("waiting")
	if !strings.Contains(status, "received your enquiry") {
		t.Errorf("waiting: the visitor is told %q", status)
	}
	key, body := p.pending()
	raw, acked := p.stored()
	if key == "" || body != "" || !acked || strings.Contains(raw, "ada@example.com") || strings.Contains(raw, "Lovelace") {
		t.Fatalf("after the 202 the browser keeps %s; want the key alone, acknowledged", raw)
	}

	p.reload()
	// The reloaded page has no enquiry to show, only a key to poll.
	if email := p.eval(`document.getElementById("email").value`); email != "" {
		t.Errorf("the reloaded form shows the email %q; the browser should no longer hold it", email)
	}
	p.waitState("waiting")
	if k, _ := p.pending(); k != key {
		t.Fatalf("after the reload the stored key is %q, want %q", k, key)
	}
	testkit.EventuallyWithin(t, pagePatience, "the reloaded page's poll", func() bool {
		for _, line := range s.api.Lines() {
			var l struct{ Msg, Method, Route string }
			if json.Unmarshal([]byte(line), &l) == nil && l.Msg == "request" && l.Method == http.MethodGet && l.Route == "/v1/operations/:key" {
				return true
			}
		}
		return false
	})
	p.screenshot("resumed")

	s.startWorker()
	status = p.waitState("done")
	p.screenshot("done")
	if !strings.Contains(status, "Thank you") {
		t.Errorf("done: the visitor is told %q", status)
	}
	if keys := s.siteKeys(); len(keys) != 1 || keys[0] != key {
		t.Fatalf("keys %v, want only the page's %s", keys, key)
	}
	if n := s.count(`SELECT count(*) FROM leads`); n != 1 {
		t.Fatalf("%d leads, want 1", n)
	}
	if out := s.apiOutcomes(); out["claimed"] != 1 || out["in_progress"] != 0 {
		t.Errorf("POST /v1/leads outcomes %v, want one claim and nothing sent again", out)
	}
	if raw, _ := p.stored(); raw != "" {
		t.Errorf("after the final answer the browser keeps %s", raw)
	}
}

// Every answer is lost for a while: the page gives up with an uncertain
// outcome, though the api stored the enquiry and the CRM has it. The
// visitor then edits the enquiry and sends it: it goes under a new key that
// supersedes the first. The CRM's one record is updated, and the chain is
// visible in both operations.
func TestSnippetAmendsAfterUncertainOutcome(t *testing.T) {
	t.Parallel()
	s := newStack(t, nil)
	site := newDemoSite(t)
	s.startAPI("CLIENTS_FILE=" + siteClientsFile(t, site.origin))
	s.startWorker()
	proxy := newLossyProxy(t, s.apiURL)
	site.start(t, web.DemoConfig{API: proxy.url, PublishableKey: sitePK, Timeout: 6 * time.Second, Wait: 2 * time.Second})
	p := newPage(t)
	p.open(site.origin + "/")
	// Once the page has the snippet: preflights pass, so that the browser
	// sends every request, and no answer comes back.
	proxy.loseWhen(func(r *http.Request) bool { return r.Method != http.MethodOptions })
	p.recordProgress()
	p.fill(enquiry)
	p.submit()
	status := p.waitState("uncertain")
	p.screenshot("uncertain")
	if !strings.Contains(status, "could not confirm") {
		t.Errorf("uncertain: the visitor is told %q", status)
	}
	// Meanwhile it said it was trying again, and when.
	events := p.progress()
	if len(events) < 3 || events[0] != "saving" || !strings.HasPrefix(events[1], "retrying offline ") || events[len(events)-1] != "uncertain" {
		t.Errorf("progress events %q, want saving, retrying offline <wait>..., uncertain", events)
	}
	first, _ := p.pending()
	if first == "" {
		t.Fatal("no pending enquiry after an uncertain outcome")
	}
	s.waitSiteState(first, "completed")
	ref := intake.ExternalRef(siteClient, first)
	if crm, ok := s.fake.CRM(ref); !ok || crm.Records != 1 || crm.Writes != 1 {
		t.Fatalf("CRM for the first enquiry: %+v", crm)
	}

	proxy.loseWhen(nil)
	p.fill(map[string]string{"message": "We would like a demo, for twelve people."})
	p.submit()
	status = p.waitState("done")
	p.screenshot("done")
	if !strings.Contains(status, "Thank you") {
		t.Errorf("done: the visitor is told %q", status)
	}

	keys := s.siteKeys()
	if len(keys) != 2 {
		t.Fatalf("keys %v, want the first and its amendment", keys)
	}
	second := keys[0]
	if second == first {
		second = keys[1]
	}
	op1, _ := s.siteOperation(first)
	op2 := s.waitSiteState(second, "completed")
	if op1.SupersededBy == nil || *op1.SupersededBy != second || op1.Supersedes != nil {
		t.Errorf("the first key's operation: supersedes %v, superseded_by %v; want null, %s", op1.Supersedes, op1.SupersededBy, second)
	}
	if op2.Supersedes == nil || *op2.Supersedes != first || op2.SupersededBy != nil {
		t.Errorf("the amendment's operation: supersedes %v, superseded_by %v; want %s, null", op2.Supersedes, op2.SupersededBy, first)
	}
	state := s.fake.State()
	crm, _ := s.fake.CRM(ref)
	if state.Totals.CRMRecords != 1 || crm.Records != 1 || crm.Writes != 2 || !bytes.Contains(crm.LastBody, []byte("twelve people")) {
		t.Errorf("CRM: %d records in all, this one %+v (last body %s); want one record, updated by the amendment",
			state.Totals.CRMRecords, crm, crm.LastBody)
	}
}

// A page on an origin the publishable key does not allow: the browser
// refuses the api's answers, the page says the enquiry was not sent, and
// nothing is stored.
func TestSnippetDisallowedOrigin(t *testing.T) {
	t.Parallel()
	s := newStack(t, nil)
	site := newDemoSite(t)
	s.startAPI("CLIENTS_FILE=" + siteClientsFile(t, "https://www.site.example"))
	s.startWorker()
	site.start(t, web.DemoConfig{API: s.apiURL, PublishableKey: sitePK})
	p := newPage(t)
	p.open(site.origin + "/")
	p.fill(enquiry)
	p.submit()
	status := p.waitState("failed")
	p.screenshot("failed")
	if !strings.Contains(status, "cannot send enquiries from this website") || !strings.Contains(status, "not been sent") {
		t.Errorf("the visitor is told %q", status)
	}
	if n := s.count(`SELECT count(*) FROM idempotency_keys`); n != 0 {
		t.Fatalf("%d keys stored from a disallowed origin", n)
	}
	if n := s.count(`SELECT count(*) FROM leads`); n != 0 {
		t.Fatalf("%d leads stored from a disallowed origin", n)
	}
}

// The page's address has used up the publishable key's rate: the page says
// the enquiry was not sent and how long to wait, and nothing is stored.
func TestSnippetRateLimited(t *testing.T) {
	t.Parallel()
	s := newStack(t, nil)
	site := newDemoSite(t)
	s.startAPI("CLIENTS_FILE="+siteClientsFile(t, site.origin), "PUBLIC_RATE_LIMIT=1/h")
	s.startWorker()
	site.start(t, web.DemoConfig{API: s.apiURL, PublishableKey: sitePK})

	// Another page from the same address used the hour's one submission.
	req, err := http.NewRequest(http.MethodPost, s.apiURL+"/v1/leads", strings.NewReader(leadBody(1)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+sitePK)
	req.Header.Set("Origin", site.origin)
	req.Header.Set("Idempotency-Key", "earlier-page-0001")
	req.Header.Set("Content-Type", "application/json")
	if r := s.do(req); r.status != http.StatusAccepted {
		t.Fatalf("the earlier submission: %d %s", r.status, r.body)
	}

	p := newPage(t)
	p.open(site.origin + "/")
	p.fill(enquiry)
	p.submit()
	status := p.waitState("failed")
	p.screenshot("failed")
	// About an hour: a few minutes less on a machine slow enough.
	if !strings.Contains(status, "Too many enquiries") || !regexp.MustCompile(`try again in (1 hour|\d+ minutes)\.`).MatchString(status) {
		t.Errorf("the visitor is told %q", status)
	}
	if keys := s.siteKeys(); len(keys) != 1 || keys[0] != "earlier-page-0001" {
		t.Fatalf("keys %v, want only the earlier submission's", keys)
	}
	if out := s.apiOutcomes(); out["rate_limited"] != 1 {
		t.Errorf("POST /v1/leads outcomes %v, want one rate_limited", out)
	}
}

// outageProxy stands where a load balancer stands in front of the api:
// while the api is "down" it answers every request itself, preflights
// included, with a 502 error page that carries no CORS headers (which the
// browser shows the page as a network failure, exactly like a refused
// origin); once up, it passes everything on.
type outageProxy struct {
	url string
	up  atomic.Bool
	// refused counts the requests it answered 502, by "METHOD path".
	mu      sync.Mutex
	refused map[string]int
}

func newOutageProxy(t *testing.T, apiURL string) *outageProxy {
	t.Helper()
	target, err := url.Parse(apiURL)
	if err != nil {
		t.Fatal(err)
	}
	p := &outageProxy{refused: map[string]int{}}
	forward := httputil.NewSingleHostReverseProxy(target)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p.up.Load() {
			forward.ServeHTTP(w, r)
			return
		}
		p.mu.Lock()
		p.refused[r.Method+" "+r.URL.Path]++
		p.mu.Unlock()
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(http.StatusBadGateway)
		_, _ = io.WriteString(w, "<html><body><h1>502 Bad Gateway</h1></body></html>")
	}))
	t.Cleanup(srv.Close)
	p.url = srv.URL
	return p
}

// refusedCount is how many times it answered 502 to method and path.
func (p *outageProxy) refusedCount(method, path string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.refused[method+" "+path]
}

// While the api is down behind its load balancer, whose 502 error pages
// carry no CORS headers, the page cannot tell them from a refusal by its
// browser: it keeps the enquiry and keeps trying, and once the api is back
// the enquiry arrives, once.
func TestSnippetWaitsOutABadGateway(t *testing.T) {
	t.Parallel()
	s := newStack(t, nil)
	site := newDemoSite(t)
	s.startAPI("CLIENTS_FILE=" + siteClientsFile(t, site.origin))
	s.startWorker()
	proxy := newOutageProxy(t, s.apiURL)
	site.start(t, web.DemoConfig{API: proxy.url, PublishableKey: sitePK, Timeout: 5 * time.Minute, Wait: 2 * time.Second})
	p := newPage(t)
	p.open(site.origin + "/")
	p.recordProgress()
	p.fill(enquiry)
	p.submit()
	// Three attempts refused: more than the snippet once took for a
	// refusal of its origin.
	state := func() string { return p.eval(`document.getElementById("enquiry").dataset.leadintakeState ?? ""`) }
	testkit.EventuallyWithin(t, pagePatience, "three attempts met by 502", func() bool {
		return proxy.refusedCount(http.MethodOptions, "/v1/leads") >= 3 || state() == "failed"
	})
	if state := state(); state != "retrying" && state != "saving" {
		t.Fatalf("while the api is down the form is %q, want retrying\n%s", state, p.describe())
	}
	if key, body := p.pending(); key == "" || body == "" {
		t.Fatalf("while the api is down the browser keeps %q %q; want the enquiry with its key", key, body)
	}
	p.screenshot("down")
	proxy.up.Store(true)
	status := p.waitState("done")
	p.screenshot("done")
	if !strings.Contains(status, "Thank you") {
		t.Errorf("done: the visitor is told %q", status)
	}
	events := p.progress()
	t.Logf("progress events: %q", events)
	for _, e := range events {
		if strings.HasPrefix(e, "retrying lost") {
			t.Errorf("progress %q: a 502 without CORS headers is the api out of reach (offline), not a lost answer", events)
			break
		}
	}
	if keys := s.siteKeys(); len(keys) != 1 {
		t.Fatalf("keys %v, want one", keys)
	}
	if n := s.count(`SELECT count(*) FROM leads`); n != 1 {
		t.Fatalf("%d leads, want 1", n)
	}
	if out := s.apiOutcomes(); out["claimed"] != 1 {
		t.Errorf("POST /v1/leads outcomes %v, want one claim", out)
	}
	if raw, _ := p.stored(); raw != "" {
		t.Errorf("after the final answer the browser keeps %s", raw)
	}
}
