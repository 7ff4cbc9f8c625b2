package e2e

import (
	"crypto/sha512"
	"encoding/base64"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/leadintake/leadintake/intake"
	"github.com/leadintake/leadintake/internal/testkit"
	"github.com/leadintake/leadintake/web"
)

// The snippet's reading of a form (fields, map, signals), the versions a
// page may load, and what it does when the api is not there, in a real
// browser against real processes.

// testSite is a customer's web site of the test's own making: pages by
// path, and the snippet hosted beside them at /leadintake.js. Its address
// is reserved first, so that its origin can go into the clients file
// before the api starts.
type testSite struct {
	srv    *httptest.Server
	origin string
}

func newTestSite(t *testing.T) *testSite {
	t.Helper()
	srv := httptest.NewUnstartedServer(nil)
	t.Cleanup(srv.Close)
	return &testSite{srv: srv, origin: "http://" + srv.Listener.Addr().String()}
}

// start serves pages (path to HTML) and the site's copy of the snippet.
func (s *testSite) start(pages map[string]string) {
	mux := http.NewServeMux()
	for path, html := range pages {
		mux.HandleFunc("GET "+path, func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			_, _ = w.Write([]byte(html))
		})
	}
	mux.HandleFunc("GET /leadintake.js", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/javascript; charset=utf-8")
		_, _ = w.Write(web.SnippetSource())
	})
	s.srv.Config.Handler = mux
	s.srv.Start()
}

// quoteForm is a lead form with names of its own: the lead's members under
// other names (mapped), two questions, a honeypot and a captcha widget's
// token. Its ids are the ones the page helpers use.
const quoteForm = `<form id="enquiry">
  <input type="hidden" name="source" value="website">
  <input id="work_email" name="work_email" type="email">
  <input id="full_name" name="full_name">
  <input id="organisation" name="organisation">
  <input id="team" name="Team Size">
  <select id="budget" name="budget"><option value="">Not sure</option><option>10k to 50k</option><option>Over 50k</option></select>
  <input name="notes_internal" value="x" data-leadintake-ignore>
  <div data-leadintake-honeypot aria-hidden="true" style="position:absolute;left:-10000px">
    <input id="fax" name="fax" tabindex="-1" autocomplete="off">
  </div>
  <input type="hidden" name="cf-turnstile-response" value="tok-e2e-0123">
  <button type="submit">Send</button>
  <p id="status" data-leadintake-status></p>
</form>`

// quotePage is quoteForm attached with import, an expression of a promise
// of the snippet's module, and options (JSON).
func quotePage(importExpr, options, head string) string {
	return `<!doctype html><html><head><meta charset="utf-8"><title>Quote</title>` + head + `</head><body>` + quoteForm + `
<script type="module">
const form = document.getElementById("enquiry");
` + importExpr + `.then((m) => { m.attachForm(form, ` + options + `); form.dataset.leadintakeReady = "true"; })
  .catch((e) => { window.snippetError = String(e); form.dataset.leadintakeState = "failed"; });
</script></body></html>`
}

// quoteOptions are the options of quotePage: the api, the key, and the map
// of quoteForm's names.
func quoteOptions(api string) string {
	b, _ := json.Marshal(map[string]any{
		"api": api, "publishableKey": sitePK, "timeout": 60000, "wait": 2,
		"map": map[string]string{"email": "work_email", "name": "full_name", "company": "organisation"},
	})
	return string(b)
}

// crmLead is what the fake CRM received for a lead, the part the tests
// look at.
type crmLead struct {
	Email   string            `json:"email"`
	Name    string            `json:"name"`
	Company string            `json:"company"`
	Website string            `json:"website"`
	Fields  map[string]string `json:"fields"`
}

func parseCRMLead(t *testing.T, body []byte) crmLead {
	t.Helper()
	var l crmLead
	if err := json.Unmarshal(body, &l); err != nil {
		t.Fatalf("the CRM's body %s: %v", body, err)
	}
	return l
}

// formSignals matches the Form-Signals the snippet sends.
var formSignals = regexp.MustCompile(`^hp=\?([01]), t=([0-9]+)(?:, captcha="([^"\\]*)")?$`)

// A form with names of its own: map puts its fields into the lead's
// members, its questions go into fields, stored with the lead and sent to
// the CRM inside it; the honeypot and the captcha token go into
// Form-Signals, never into the lead.
func TestSnippetFormFields(t *testing.T) {
	t.Parallel()
	s := newStack(t, nil)
	site := newTestSite(t)
	s.startAPI("CLIENTS_FILE=" + siteClientsFile(t, site.origin))
	s.startWorker()
	proxy := newLossyProxy(t, s.apiURL)
	site.start(map[string]string{"/": quotePage(`import("/leadintake.js")`, quoteOptions(proxy.url), "")})
	p := newPage(t)
	p.open(site.origin + "/")
	// A person takes a while over a form.
	time.Sleep(1100 * time.Millisecond)
	p.fill(map[string]string{"work_email": "ada@example.com", "full_name": "Ada Lovelace", "organisation": "Analytical Engines", "team": "11-50", "budget": "10k to 50k"})
	p.submit()
	if status := p.waitState("done"); !strings.Contains(status, "Thank you") {
		t.Errorf("done: the visitor is told %q", status)
	}
	keys := s.siteKeys()
	if len(keys) != 1 {
		t.Fatalf("keys %v, want one", keys)
	}
	crm, ok := s.fake.CRM(intake.ExternalRef(siteClient, keys[0]))
	if !ok || crm.Records != 1 {
		t.Fatalf("the CRM has %+v", crm)
	}
	got := parseCRMLead(t, crm.LastBody)
	want := crmLead{Email: "ada@example.com", Name: "Ada Lovelace", Company: "Analytical Engines",
		Fields: map[string]string{"team_size": "11-50", "budget": "10k to 50k"}}
	if got.Email != want.Email || got.Name != want.Name || got.Company != want.Company || got.Website != "" ||
		len(got.Fields) != 2 || got.Fields["team_size"] != "11-50" || got.Fields["budget"] != "10k to 50k" {
		t.Errorf("the CRM received %s; want %+v", crm.LastBody, want)
	}
	for _, leak := range []string{"tok-e2e", "notes_internal", "fax", "work_email"} {
		if strings.Contains(string(crm.LastBody), leak) {
			t.Errorf("the CRM received %q: %s", leak, crm.LastBody)
		}
	}
	// Stored with the lead, as the body was sent.
	if n := s.count(`SELECT count(*) FROM leads WHERE submission->'fields'->>'team_size' = '11-50' AND submission->'fields'->>'budget' = '10k to 50k'`); n != 1 {
		t.Errorf("%d leads store the fields, want 1", n)
	}
	sig := proxy.formSignals()
	if len(sig) != 1 {
		t.Fatalf("Form-Signals of the POSTs: %q, want one", sig)
	}
	m := formSignals.FindStringSubmatch(sig[0])
	if m == nil || m[1] != "0" || m[3] != "tok-e2e-0123" {
		t.Fatalf("Form-Signals %q, want hp=?0, t and the widget's token", sig[0])
	}
	if n, _ := strconv.Atoi(m[2]); n < 1 {
		t.Errorf("Form-Signals %q: t %d, want at least the second the form was shown before it was sent", sig[0], n)
	}

	// A bot fills in everything, the honeypot too: hp=?1, and the
	// honeypot's content is no part of the lead.
	p.fill(map[string]string{"work_email": "bot@example.com", "fax": "https://spam.example"})
	p.submit()
	p.waitState("done")
	sig = proxy.formSignals()
	if len(sig) != 2 {
		t.Fatalf("Form-Signals of the POSTs: %q, want two", sig)
	}
	if m := formSignals.FindStringSubmatch(sig[1]); m == nil || m[1] != "1" {
		t.Errorf("with the honeypot filled, Form-Signals %q, want hp=?1", sig[1])
	}
	if n := s.count(`SELECT count(*) FROM leads WHERE submission::text LIKE '%spam.example%'`); n != 0 {
		t.Errorf("%d leads hold the honeypot's content", n)
	}
}

// The demo form's own questions arrive in the CRM as fields, and go with
// the lead through an amendment and an erasure. The first enquiry waits
// for a worker until the page gives up (the api acknowledged it, so the
// browser keeps its key alone); the visitor then changes the budget, which
// supersedes that key: the CRM's one record is updated, and the erasure
// removes both leads' fields with the rest.
func TestSnippetFieldsAmendedAndErased(t *testing.T) {
	t.Parallel()
	s := newStack(t, nil)
	site := newDemoSite(t)
	clientsFile := siteClientsFile(t, site.origin)
	s.startAPI("CLIENTS_FILE=" + clientsFile)
	site.start(t, web.DemoConfig{API: s.apiURL, PublishableKey: sitePK, Timeout: 20 * time.Second, Wait: 2 * time.Second})
	p := newPage(t)
	p.open(site.origin + "/")
	p.fill(enquiry)
	p.fill(map[string]string{"budget": "Under 10k", "team_size": "1 to 10"})
	p.submit()
	p.waitState("uncertain")
	first, body := p.pending()
	if raw, acked := p.stored(); first == "" || body != "" || !acked {
		t.Fatalf("after the page gave up on an acknowledged enquiry the browser keeps %s; want its key alone", raw)
	}

	s.startWorker()
	s.waitSiteState(first, "completed")
	ref := intake.ExternalRef(siteClient, first)
	crm, _ := s.fake.CRM(ref)
	if got := parseCRMLead(t, crm.LastBody); got.Fields["budget"] != "Under 10k" || got.Fields["team_size"] != "1 to 10" || len(got.Fields) != 2 {
		t.Fatalf("the CRM received %s; want the demo's two questions in fields", crm.LastBody)
	}

	p.fill(map[string]string{"budget": "Over 50k"})
	p.submit()
	p.waitState("done")
	keys := s.siteKeys()
	if len(keys) != 2 {
		t.Fatalf("keys %v, want the first and its amendment", keys)
	}
	second := keys[0]
	if second == first {
		second = keys[1]
	}
	if op := s.waitSiteState(second, "completed"); op.Supersedes == nil || *op.Supersedes != first {
		t.Fatalf("the amendment's operation supersedes %v, want %s", op.Supersedes, first)
	}
	crm, _ = s.fake.CRM(ref)
	if crm.Records != 1 || crm.Writes != 2 || len(crm.Bodies) != 2 {
		t.Fatalf("the CRM has %+v for the enquiry; want one record, written twice", crm)
	}
	before, after := parseCRMLead(t, crm.Bodies[0]), parseCRMLead(t, crm.Bodies[1])
	if before.Fields["budget"] != "Under 10k" || after.Fields["budget"] != "Over 50k" || after.Fields["team_size"] != "1 to 10" {
		t.Errorf("the CRM's writes: fields %v, then %v; want the budget amended", before.Fields, after.Fields)
	}

	// The command knows the site's client from the same clients file.
	r := runBinary(t, "api", []string{"DATABASE_URL=" + s.dbURL, piiHashKey, "CLIENTS_FILE=" + clientsFile},
		"erase", "--client", siteClient, "--email", enquiry["email"])
	if r.code != 0 || r.stdout != "erased 2\n" {
		t.Fatalf("api erase: exit %d\nstdout: %q\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	if n := s.count(`SELECT count(*) FROM leads WHERE client_id = $1 AND erased_at IS NOT NULL AND submission IS NULL`, siteClient); n != 2 {
		t.Errorf("%d erased leads without their submission, want 2", n)
	}
	if n := s.count(`SELECT count(*) FROM leads l WHERE row_to_json(l)::text ~ '(Under 10k|Over 50k|1 to 10)'`); n != 0 {
		t.Errorf("%d leads still hold the fields after the erasure", n)
	}
}

// The api is down when the page loads: the page's own copy of the snippet
// loads all the same, keeps the visitor's enquiry with its key, and sends
// it once the api is back. One lead.
func TestSnippetSelfHostedWhileTheAPIIsDown(t *testing.T) {
	t.Parallel()
	s := newStack(t, nil)
	site := newDemoSite(t)
	// The api's address, reserved and given up: nothing listens there
	// until the api starts on it.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	apiAddr := ln.Addr().String()
	ln.Close()
	clients := siteClientsFile(t, site.origin)
	s.startWorker()
	site.start(t, web.DemoConfig{API: "http://" + apiAddr, PublishableKey: sitePK, Timeout: 30 * time.Minute, Wait: 2 * time.Second})
	p := newPage(t)
	p.open(site.origin + "/")
	p.recordProgress()
	p.fill(enquiry)
	p.fill(map[string]string{"budget": "10k to 50k"})
	p.submit()
	testkit.EventuallyWithin(t, pagePatience, "the page retrying while the api is down", func() bool {
		for _, e := range p.progress() {
			if strings.HasPrefix(e, "retrying offline ") {
				return true
			}
		}
		return false
	})
	p.screenshot("offline")
	// Not acknowledged: the browser keeps the key with the body.
	key, body := p.pending()
	if raw, acked := p.stored(); key == "" || acked || !strings.Contains(body, `"email":"ada@example.com"`) || !strings.Contains(body, `"budget":"10k to 50k"`) {
		t.Fatalf("while the api is down the browser keeps %s; want the key with the enquiry", raw)
	}

	s.startAPI("CLIENTS_FILE="+clients, "API_ADDR="+apiAddr)
	if status := p.waitState("done"); !strings.Contains(status, "Thank you") {
		t.Errorf("done: the visitor is told %q", status)
	}
	p.screenshot("done")
	if keys := s.siteKeys(); len(keys) != 1 || keys[0] != key {
		t.Fatalf("keys %v, want only the page's %s", keys, key)
	}
	if n := s.count(`SELECT count(*) FROM leads`); n != 1 {
		t.Fatalf("%d leads, want 1", n)
	}
	if state := s.fake.State(); state.Totals.CRMRecords != 1 {
		t.Errorf("%d CRM records, want 1", state.Totals.CRMRecords)
	}
	if raw, _ := p.stored(); raw != "" {
		t.Errorf("after the final answer the browser keeps %s", raw)
	}
}

// A page pins the api's versioned URL with its integrity hash, computed
// here from the package's file and compared with docs/forms.md's: the page
// loads the snippet and sends. A wrong hash, and the browser refuses the
// module.
func TestSnippetPinnedVersion(t *testing.T) {
	t.Parallel()
	s := newStack(t, nil)
	site := newTestSite(t)
	s.startAPI("CLIENTS_FILE=" + siteClientsFile(t, site.origin))
	s.startWorker()

	src, err := os.ReadFile("../web/sdk/leadintake.js")
	if err != nil {
		t.Fatal(err)
	}
	sum := sha512.Sum384(src)
	integrity := "sha384-" + base64.StdEncoding.EncodeToString(sum[:])
	page, err := os.ReadFile("../docs/forms.md")
	if err != nil {
		t.Fatal(err)
	}
	if given := regexp.MustCompile(`sha384-[A-Za-z0-9+/]{64}`).FindString(string(page)); given != integrity {
		t.Fatalf("docs/forms.md gives the integrity %q; the snippet's is %s", given, integrity)
	}

	// The unversioned file names its version; the versioned one is the
	// same bytes, for good.
	current := s.get("/v1/sdk/leadintake.js")
	version := current.header.Get("Leadintake-Snippet-Version")
	if current.status != http.StatusOK || version != web.SnippetVersion || string(current.body) != string(src) {
		t.Fatalf("GET /v1/sdk/leadintake.js: %d, version %q (want %q), %d bytes", current.status, version, web.SnippetVersion, len(current.body))
	}
	pinned := "/v1/sdk/leadintake@" + version + ".js"
	if r := s.get(pinned); r.status != http.StatusOK || string(r.body) != string(src) || r.header.Get("Cache-Control") != "public, max-age=31536000, immutable" {
		t.Fatalf("GET %s: %d, Cache-Control %q, %d bytes", pinned, r.status, r.header.Get("Cache-Control"), len(r.body))
	}
	if r := s.get("/v1/sdk/leadintake@0.0.0-none.js"); r.status != http.StatusNotFound || !strings.Contains(string(r.body), `"code":"not_found"`) {
		t.Errorf("an unknown version: %d %s, want 404 not_found", r.status, r.body)
	}
	// A public route: a page's publishable key, from an origin it does not
	// allow, changes nothing.
	req, err := http.NewRequest(http.MethodGet, s.apiURL+pinned, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+sitePK)
	req.Header.Set("Origin", "https://elsewhere.example")
	if r := s.do(req); r.status != http.StatusOK || string(r.body) != string(src) {
		t.Errorf("GET %s with a publishable key from another origin: %d %.100s", pinned, r.status, r.body)
	}

	url := s.apiURL + pinned
	importMap := func(hash string) string {
		b, _ := json.Marshal(map[string]any{"imports": map[string]string{"leadintake": url}, "integrity": map[string]string{url: hash}})
		return `<script type="importmap">` + string(b) + `</script>`
	}
	wrong := "sha384-" + base64.StdEncoding.EncodeToString(make([]byte, 48))
	site.start(map[string]string{
		"/":         quotePage(`import("leadintake")`, quoteOptions(s.apiURL), importMap(integrity)),
		"/tampered": quotePage(`import("leadintake")`, quoteOptions(s.apiURL), importMap(wrong)),
	})
	p := newPage(t)
	p.open(site.origin + "/")
	p.fill(map[string]string{"work_email": "ada@example.com", "budget": "Over 50k"})
	p.submit()
	p.waitState("done")
	if keys := s.siteKeys(); len(keys) != 1 {
		t.Fatalf("keys %v, want one", keys)
	}

	p.do("open the page with a wrong hash", chromedp.Navigate(site.origin+"/tampered"), chromedp.WaitReady(chromedp.CSS(`form[data-leadintake-state=failed]`)))
	if e := p.eval(`window.snippetError ?? ""`); e == "" {
		t.Error("with a wrong integrity hash the snippet loaded")
	}
	if ready := p.eval(`document.getElementById("enquiry").dataset.leadintakeReady ?? ""`); ready != "" {
		t.Errorf("with a wrong integrity hash the form is ready (%q)", ready)
	}
}
