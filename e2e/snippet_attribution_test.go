package e2e

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/leadintake/leadintake/intake"
)

// browsePage is a page of the site that loads the snippet, as every page of
// a site that wants the first touch does, and links to next (#next). It
// says it is ready (body[data-ready]) once it has loaded and the snippet
// has had its turn.
func browsePage(next string) string {
	return `<!doctype html><html><head><meta charset="utf-8"><title>Acme</title></head><body>
<a id="next" href="` + next + `">next</a>
<script type="module">
await import("/leadintake.js");
if (document.readyState !== "complete") await new Promise((resolve) => addEventListener("load", resolve));
await new Promise((resolve) => setTimeout(resolve, 50));
document.body.dataset.ready = "true";
</script></body></html>`
}

// checkingProxy passes the browser's requests to the api through the
// stack's client, which holds each exchange to the API description: the
// snippet's real traffic is checked as the tests' own is. The headers a
// browser adds of its own accord (Sec-Fetch-*, Sec-CH-UA*), which the
// description leaves out and the public API does not read, are dropped on
// the way.
func checkingProxy(t *testing.T, s *stack) string {
	t.Helper()
	target, err := url.Parse(s.apiURL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			r.Out.Host = target.Host
			for name := range r.Out.Header {
				if strings.HasPrefix(name, "Sec-") {
					r.Out.Header.Del(name)
				}
			}
		},
		Transport: s.client.Transport,
	}
	srv := httptest.NewServer(proxy)
	t.Cleanup(srv.Close)
	return srv.URL
}

// attributionTouch is one touch of a lead's attribution, as the CRM
// received it.
type attributionTouch struct {
	LandingPage string            `json:"landing_page"`
	Referrer    string            `json:"referrer"`
	UTM         map[string]string `json:"utm"`
	ClickIDs    map[string]string `json:"click_ids"`
	At          string            `json:"at"`
}

// A visitor lands on the site from an ad, browses two pages of it, and
// sends the form of a third: the lead, in the database and in the CRM,
// has the ad's page as its first touch (its campaign and click id, without
// the URL's other parameters and fragment) and the form's page as its
// last. A form attached with attribution: false sends none, and the
// browser keeps no first touch.
func TestSnippetAttribution(t *testing.T) {
	t.Parallel()
	s := newStack(t, nil)
	site := newTestSite(t)
	s.startAPI("CLIENTS_FILE=" + siteClientsFile(t, site.origin))
	s.startWorker()
	api := checkingProxy(t, s)
	options := func(attribution bool) string {
		o := map[string]any{
			"api": api, "publishableKey": sitePK, "timeout": 60000, "wait": 5,
			"map": map[string]string{"email": "work_email", "name": "full_name", "company": "organisation"},
		}
		if !attribution {
			o["attribution"] = false
		}
		b, _ := json.Marshal(o)
		return string(b)
	}
	site.start(map[string]string{
		"/landing":       browsePage("/about"),
		"/about":         browsePage("/pricing"),
		"/pricing":       browsePage("/contact"),
		"/contact":       quotePage(`import("/leadintake.js")`, options(true), ""),
		"/contact-quiet": quotePage(`import("/leadintake.js")`, options(false), ""),
	})
	p := newPage(t)
	browse := func(what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		p.do(what, append(actions, chromedp.WaitReady(chromedp.CSS(`body[data-ready]`)))...)
	}
	storedTouch := func() string {
		t.Helper()
		return p.eval(`localStorage.getItem("leadintake-first-touch") ?? ""`)
	}

	landed := time.Now()
	browse("land from the ad", chromedp.Navigate(site.origin+"/landing?utm_source=google&utm_medium=cpc&utm_campaign=spring&gclid=abc123&other=secret#frag"))
	if storedTouch() == "" {
		t.Fatal("the landing page recorded no first touch")
	}
	browse("the second page", chromedp.Click(chromedp.CSS("#next")))
	browse("the third page", chromedp.Click(chromedp.CSS("#next")))
	formShown := time.Now()
	p.do("the form's page", chromedp.Click(chromedp.CSS("#next")), chromedp.WaitReady(chromedp.CSS(`form[data-leadintake-ready]`)))
	p.fill(map[string]string{"work_email": "ada@example.com", "full_name": "Ada Lovelace"})
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
	var received struct {
		Email       string `json:"email"`
		Attribution struct {
			First *attributionTouch `json:"first"`
			Last  *attributionTouch `json:"last"`
		} `json:"attribution"`
	}
	if err := json.Unmarshal(crm.LastBody, &received); err != nil {
		t.Fatalf("the CRM's body %s: %v", crm.LastBody, err)
	}
	first, last := received.Attribution.First, received.Attribution.Last
	if first == nil || last == nil {
		t.Fatalf("the CRM received %s; want a first and a last touch", crm.LastBody)
	}
	wantFirst := attributionTouch{
		LandingPage: site.origin + "/landing?utm_source=google&utm_medium=cpc&utm_campaign=spring&gclid=abc123",
		UTM:         map[string]string{"source": "google", "medium": "cpc", "campaign": "spring"},
		ClickIDs:    map[string]string{"gclid": "abc123"},
	}
	wantLast := attributionTouch{LandingPage: site.origin + "/contact"}
	for _, tc := range []struct {
		name       string
		got        *attributionTouch
		want       attributionTouch
		from, till time.Time
	}{
		{"first", first, wantFirst, landed, formShown},
		{"last", last, wantLast, formShown, time.Now()},
	} {
		at, err := time.Parse(time.RFC3339, tc.got.At)
		if err != nil || at.Before(tc.from.Add(-time.Second)) || at.After(tc.till.Add(time.Second)) {
			t.Errorf("the %s touch at %q (%v), want a time between %s and %s", tc.name, tc.got.At, err, tc.from.Format(time.RFC3339Nano), tc.till.Format(time.RFC3339Nano))
		}
		got := *tc.got
		got.At = ""
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("the %s touch %+v, want %+v", tc.name, got, tc.want)
		}
	}
	for _, private := range []string{"secret", "frag"} {
		if strings.Contains(string(crm.LastBody), private) {
			t.Errorf("the CRM received %q: %s", private, crm.LastBody)
		}
	}
	// Stored with the lead as the CRM received it.
	var stored json.RawMessage
	if err := s.pool.QueryRow(context.Background(), `SELECT submission->'attribution' FROM leads WHERE idempotency_key = $1`, keys[0]).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	var storedAttribution struct{ First, Last *attributionTouch }
	if err := json.Unmarshal(stored, &storedAttribution); err != nil || !reflect.DeepEqual(storedAttribution.First, first) || !reflect.DeepEqual(storedAttribution.Last, last) {
		t.Errorf("the lead stores the attribution %s (%v); the CRM received %s", stored, err, crm.LastBody)
	}

	// A form attached with attribution: false: nothing sent, nothing kept.
	browse("land from another ad", chromedp.Navigate(site.origin+"/landing?utm_source=bing&msclkid=ms-1"))
	p.open(site.origin + "/contact-quiet?utm_source=newsletter")
	if got := storedTouch(); got != "" {
		t.Errorf("with attribution: false the browser keeps the first touch %s", got)
	}
	p.fill(map[string]string{"work_email": "grace@example.com", "full_name": "Grace Hopper"})
	p.submit()
	p.waitState("done")
	keys = s.siteKeys()
	if len(keys) != 2 {
		t.Fatalf("keys %v, want two", keys)
	}
	if n := s.count(`SELECT count(*) FROM leads WHERE client_id = $1 AND submission ? 'attribution'`, siteClient); n != 1 {
		t.Errorf("%d leads store an attribution, want 1: the first's alone", n)
	}
	// (The keys in the order they were claimed: the second is Grace's.)
	crm, ok = s.fake.CRM(intake.ExternalRef(siteClient, keys[1]))
	if !ok || !strings.Contains(string(crm.LastBody), "grace@example.com") || strings.Contains(string(crm.LastBody), "attribution") {
		t.Errorf("with attribution: false the CRM received %s; want Grace's lead without attribution", crm.LastBody)
	}
	if got := storedTouch(); got != "" {
		t.Errorf("after the enquiry the browser keeps the first touch %s", got)
	}
}
