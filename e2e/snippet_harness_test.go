package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/leadintake/leadintake/internal/browsertest"
	"github.com/leadintake/leadintake/internal/testkit"
	"github.com/leadintake/leadintake/web"
)

// The web page's client: a bearer token (for the test's own look at its
// keys) and the publishable key the page sends with.
const (
	siteClient = "site"
	siteToken  = "site-token-e2e-0123456789"
	sitePK     = "pk_site_e2e_0123456789abcdef"
)

// pagePatience bounds every wait on the page: a browser, an api and a
// worker share two slow cores with other tests.
const pagePatience = 2 * testkit.Patience

// siteClientsFile writes a clients file in which the site client's
// publishable key allows origins, and returns its path.
func siteClientsFile(t *testing.T, origins ...string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "clients.yaml")
	writeClientsFile(t, path, fmt.Sprintf(
		"clients:\n  - id: %s\n    tokens_sha256: [%s]\n    publishable_keys:\n      - key: %s\n        origins: [%s]\n",
		siteClient, sha256Hex(siteToken), sitePK, strings.Join(origins, ", ")))
	return path
}

// demoSite is the demo lead form (web.Demo) served from an origin of its
// own, as a customer's web site would be.
type demoSite struct {
	srv    *httptest.Server
	origin string
}

// newDemoSite reserves the site's address, so that its origin can go into
// the clients file before the api starts; start serves it.
func newDemoSite(t *testing.T) *demoSite {
	t.Helper()
	srv := httptest.NewUnstartedServer(nil)
	t.Cleanup(srv.Close)
	return &demoSite{srv: srv, origin: "http://" + srv.Listener.Addr().String()}
}

// start serves the demo page configured with cfg (the api it sends to, its
// key, the snippet's timeout and wait).
func (d *demoSite) start(t *testing.T, cfg web.DemoConfig) {
	t.Helper()
	h, err := web.Demo(cfg)
	if err != nil {
		t.Fatal(err)
	}
	d.srv.Config.Handler = h
	d.srv.Start()
}

// siteOperation is GET /v1/operations/{key} as the site client's back office
// sees it.
type siteOperation struct {
	State        string  `json:"state"`
	LeadID       string  `json:"lead_id"`
	Supersedes   *string `json:"supersedes"`
	SupersededBy *string `json:"superseded_by"`
	Response     *struct {
		Status int             `json:"status"`
		Body   json.RawMessage `json:"body"`
	} `json:"response"`
}

// siteOperation reads the operation of the site client's key.
func (s *stack) siteOperation(key string) (siteOperation, int) {
	s.t.Helper()
	req, err := http.NewRequest(http.MethodGet, s.apiURL+"/v1/operations/"+url.PathEscape(key), nil)
	if err != nil {
		s.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+siteToken)
	r := s.do(req)
	var op siteOperation
	if r.status == http.StatusOK {
		if err := json.Unmarshal(r.body, &op); err != nil {
			s.t.Fatal(err)
		}
	}
	return op, r.status
}

// waitSiteState polls the site client's key until its state is state.
func (s *stack) waitSiteState(key, state string) siteOperation {
	s.t.Helper()
	var op siteOperation
	testkit.EventuallyWithin(s.t, pagePatience, "key "+key+" "+state, func() bool {
		op, _ = s.siteOperation(key)
		return op.State == state
	})
	return op
}

// siteKeys lists the site client's keys, oldest first.
func (s *stack) siteKeys() []string {
	s.t.Helper()
	rows, err := s.pool.Query(context.Background(), `SELECT key FROM idempotency_keys WHERE client_id = $1 ORDER BY created_at, key`, siteClient)
	if err != nil {
		s.t.Fatal(err)
	}
	defer rows.Close()
	var keys []string
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			s.t.Fatal(err)
		}
		keys = append(keys, k)
	}
	if err := rows.Err(); err != nil {
		s.t.Fatal(err)
	}
	return keys
}

// apiOutcomes counts the api's request log lines for POST /v1/leads by
// outcome (claimed, in_progress, replayed, rate_limited...).
func (s *stack) apiOutcomes() map[string]int {
	s.t.Helper()
	counts := map[string]int{}
	for _, line := range s.api.Lines() {
		var l struct {
			Msg, Method, Route, Outcome string
		}
		if json.Unmarshal([]byte(line), &l) == nil && l.Msg == "request" && l.Method == http.MethodPost && l.Route == "/v1/leads" {
			counts[l.Outcome]++
		}
	}
	return counts
}

// lossyProxy stands between the browser and the api at the HTTP level. It
// forwards every request and passes the api's answer on, except for the
// requests its rule picks: their answer is read from the api in full (the
// api has done the work) and then the browser's connection is closed
// without a byte, as when a response is lost on the way. Every answer it
// passes on closes its connection, so that the browser never reuses one:
// a request lost on a reused connection would be retried by the browser
// itself, unseen by the page.
type lossyProxy struct {
	url       string
	target    string
	transport *http.Transport

	mu   sync.Mutex
	lose func(r *http.Request) bool
	lost []string // "METHOD path" of each answer lost
	// signals is the Form-Signals header of each POST /v1/leads, in order.
	signals []string
}

func newLossyProxy(t *testing.T, apiURL string) *lossyProxy {
	t.Helper()
	p := &lossyProxy{target: apiURL, transport: &http.Transport{DisableKeepAlives: true}}
	srv := httptest.NewServer(p)
	t.Cleanup(p.transport.CloseIdleConnections)
	t.Cleanup(srv.Close)
	p.url = srv.URL
	return p
}

// loseWhen sets the rule; nil loses nothing.
func (p *lossyProxy) loseWhen(rule func(r *http.Request) bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lose = rule
}

// lostAnswers returns the requests whose answer was lost.
func (p *lossyProxy) lostAnswers() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.lost...)
}

// formSignals returns the Form-Signals header of each POST /v1/leads the
// proxy passed on ("" for one without).
func (p *lossyProxy) formSignals() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.signals...)
}

func (p *lossyProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	lose := p.lose != nil && p.lose(r)
	if r.Method == http.MethodPost && r.URL.Path == "/v1/leads" {
		p.signals = append(p.signals, r.Header.Get("Form-Signals"))
	}
	p.mu.Unlock()

	body, err := io.ReadAll(r.Body)
	if err != nil {
		hangUp(w)
		return
	}
	// The api gets the whole request even when the browser has gone.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), pagePatience)
	defer cancel()
	out, err := http.NewRequestWithContext(ctx, r.Method, p.target+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		hangUp(w)
		return
	}
	out.Header = r.Header.Clone()
	res, err := p.transport.RoundTrip(out)
	if err != nil {
		hangUp(w)
		return
	}
	answer, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil || lose {
		if lose {
			p.mu.Lock()
			p.lost = append(p.lost, r.Method+" "+r.URL.Path)
			p.mu.Unlock()
		}
		hangUp(w)
		return
	}
	for name, values := range res.Header {
		w.Header()[name] = values
	}
	w.Header().Set("Connection", "close")
	w.WriteHeader(res.StatusCode)
	_, _ = w.Write(answer)
}

// hangUp closes the client's connection without an answer.
func hangUp(w http.ResponseWriter) {
	if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
		_ = conn.Close()
	}
}

// page is one tab of a headless Chromium of the test's own, on the demo
// form.
type page struct {
	t       *testing.T
	ctx     context.Context
	console *testkit.LockedBuffer
}

// newPage starts Chromium; what the page writes to its console is shown if
// the test fails.
func newPage(t *testing.T) *page {
	t.Helper()
	ctx, stop := browsertest.Start(t, context.Background(), 1000, 1200)
	p := &page{t: t, ctx: ctx, console: &testkit.LockedBuffer{}}
	messages := chromedp.Console(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m, err := range messages {
			if err != nil {
				return
			}
			fmt.Fprintf(p.console, "%s %s: %s\n", m.Time.Format(time.TimeOnly), m.Type, m.Text)
		}
	}()
	t.Cleanup(func() {
		stop()
		<-done
		if t.Failed() {
			t.Logf("browser console:\n%s", p.console)
		}
	})
	return p
}

// do runs actions within pagePatience.
func (p *page) do(what string, actions ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, pagePatience)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		p.t.Fatalf("browser: %s: %v\n%s", what, err, p.describe())
	}
}

// eval evaluates a JavaScript expression to a string.
func (p *page) eval(expr string) string {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, pagePatience)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[string](expr))
	if err != nil {
		p.t.Fatalf("browser: %s: %v", expr, err)
	}
	return v
}

// open loads the demo form and waits until the snippet has it.
func (p *page) open(u string) {
	p.t.Helper()
	p.do("open "+u, chromedp.Navigate(u), chromedp.WaitReady(chromedp.CSS(`form[data-leadintake-ready]`)))
}

// reload reloads the page and waits until the snippet has the form again.
func (p *page) reload() {
	p.t.Helper()
	p.do("reload", chromedp.Reload(), chromedp.WaitReady(chromedp.CSS(`form[data-leadintake-ready]`)))
}

// fill sets the form's fields, by id.
func (p *page) fill(fields map[string]string) {
	p.t.Helper()
	var actions []chromedp.Action[chromedp.Void]
	for id, v := range fields {
		actions = append(actions, chromedp.SetValue(chromedp.CSS("#"+id), v))
	}
	p.do("fill the form", actions...)
}

// submit presses the form's button.
func (p *page) submit() {
	p.t.Helper()
	p.do("submit", chromedp.Click(chromedp.CSS(`#enquiry button[type=submit]`)))
}

// status is what the form's live region tells the visitor.
func (p *page) status() string {
	p.t.Helper()
	return p.eval(`document.getElementById("status")?.textContent ?? ""`)
}

// describe tells where the page stands, for failure messages.
func (p *page) describe() string {
	ctx, cancel := context.WithTimeout(p.ctx, 10*time.Second)
	defer cancel()
	v, _ := chromedp.Run(ctx, chromedp.Evaluate[string](
		`"state " + JSON.stringify(document.getElementById("enquiry")?.dataset.leadintakeState) + ", status " + JSON.stringify(document.getElementById("status")?.textContent)`))
	return v
}

// waitState waits until the form's state is want, and returns what the
// visitor is told. A final state other than want fails the test at once.
// A final state counts once the form is no longer busy: the run is over.
func (p *page) waitState(want string) string {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, pagePatience)
	defer cancel()
	got, err := chromedp.Run(ctx, chromedp.Poll[string](
		`(() => { const form = document.getElementById("enquiry"), s = form?.dataset.leadintakeState;
		  const final = ["done", "failed", "uncertain"].includes(s);
		  return (s === `+jsString(want)+` || final) && !(final && form.hasAttribute("aria-busy")) ? s : false; })()`,
		chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(0)))
	if err != nil {
		p.t.Fatalf("browser: waiting for the state %q: %v\n%s", want, err, p.describe())
	}
	if got != want {
		p.t.Fatalf("browser: the form went %q, want %q\n%s", got, want, p.describe())
	}
	return p.status()
}

// recordProgress keeps every progress event of the form from now on, in
// the page (until it is reloaded).
func (p *page) recordProgress() {
	p.t.Helper()
	p.eval(`window.progress = []; document.getElementById("enquiry").addEventListener("leadintake:progress",
		(e) => window.progress.push([e.detail.state, e.detail.reason ?? "", e.detail.wait ?? ""].join(" ").trim())); ""`)
}

// progress returns the events recordProgress kept: "state reason wait".
func (p *page) progress() []string {
	p.t.Helper()
	var events []string
	if err := json.Unmarshal([]byte(p.eval(`JSON.stringify(window.progress ?? [])`)), &events); err != nil {
		p.t.Fatal(err)
	}
	return events
}

// pending returns the enquiry the snippet keeps in localStorage (its key
// and body), or "" for none.
func (p *page) pending() (key, body string) {
	p.t.Helper()
	rec := p.eval(`localStorage.getItem(` + jsString("leadintake:"+sitePK+":enquiry") + `) ?? ""`)
	if rec == "" {
		return "", ""
	}
	var r struct{ Key, Body string }
	if err := json.Unmarshal([]byte(rec), &r); err != nil {
		p.t.Fatalf("the pending enquiry %s: %v", rec, err)
	}
	return r.Key, r.Body
}

// stored returns the snippet's localStorage record of the form's enquiry
// as it is, "" for none, and whether it marks the enquiry acknowledged.
func (p *page) stored() (raw string, acked bool) {
	p.t.Helper()
	raw = p.eval(`localStorage.getItem(` + jsString("leadintake:"+sitePK+":enquiry") + `) ?? ""`)
	if raw == "" {
		return "", false
	}
	var r struct{ Acked bool }
	if err := json.Unmarshal([]byte(raw), &r); err != nil {
		p.t.Fatalf("the stored enquiry %s: %v", raw, err)
	}
	return raw, r.Acked
}

// screenshot keeps a PNG of the demo form as a test artefact, under
// $TEST_ARTIFACTS_DIR (default: leadintake-artifacts in the temporary
// directory), and logs its path.
func (p *page) screenshot(name string) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, pagePatience)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.Screenshot(chromedp.CSS("main")))
	if err != nil {
		p.t.Errorf("screenshot %s: %v", name, err)
		return
	}
	dir := os.Getenv("TEST_ARTIFACTS_DIR")
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "leadintake-artifacts")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		p.t.Errorf("screenshot %s: %v", name, err)
		return
	}
	path := filepath.Join(dir, unsafeChars.ReplaceAllString(p.t.Name(), "_")+"-"+name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		p.t.Errorf("screenshot %s: %v", name, err)
		return
	}
	p.t.Logf("screenshot of the form, %s: %s", name, path)
}

var unsafeChars = regexp.MustCompile(`[^A-Za-z0-9_.-]+`)

// jsString quotes s as a JavaScript string literal.
func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
