package web_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/leadintake/leadintake/internal/testkit"
)

// touchKey is where the snippet keeps the first touch.
const touchKey = "leadintake-first-touch"

// touch is one touch of a body's attribution.
type touch struct {
	LandingPage string            `json:"landing_page,omitempty"`
	Referrer    string            `json:"referrer,omitempty"`
	UTM         map[string]string `json:"utm,omitempty"`
	ClickIDs    map[string]string `json:"click_ids,omitempty"`
	At          string            `json:"at,omitempty"`
}

// sentLead is the part of a sent body these tests look at.
type sentLead struct {
	Email       string `json:"email"`
	Attribution *struct {
		First *touch `json:"first"`
		Last  *touch `json:"last"`
	} `json:"attribution"`
}

// attributionSite is a customer's web site whose every path is a page that
// loads the snippet from api's module URL, and says it is ready
// (body[data-ready]) once the page has loaded and the snippet has had its
// turn. A page under /off/ attaches its form with attribution: false, in
// the script that imports the module, as a site that turns attribution off
// does. Every page links to /next (#next) and to the URL of its query's
// out, if any (#out).
func attributionSite(t *testing.T, api *scriptedAPI) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		out := r.URL.Query().Get("out")
		fmt.Fprintf(w, `<!doctype html><html><head><meta charset="utf-8"><title>%s</title></head><body>
<form id="f"><input name="email" value="ada@example.com"><button>Send</button><p data-leadintake-status></p></form>
<a id="next" href="/next">next</a> <a id="out" href="%s">out</a>
<script type="module">
const m = await import(%s);
window.m = m;
if (location.pathname.startsWith("/off/")) m.attachForm(document.getElementById("f"), { api: %s, publishableKey: %s, timeout: 30000, wait: 3, attribution: false });
if (document.readyState !== "complete") await new Promise((resolve) => addEventListener("load", resolve));
await new Promise((resolve) => setTimeout(resolve, 50));
document.body.dataset.ready = "true";
</script></body></html>`, r.URL.Path, out, jsQuote(api.module), jsQuote(api.url), jsQuote(testPK))
	}))
	t.Cleanup(srv.Close)
	return srv
}

// visit loads u in the tab and waits until the page is ready.
func visit(t *testing.T, tab context.Context, u string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(tab, 2*testkit.Patience)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.Navigate(u), chromedp.WaitReady(chromedp.CSS(`body[data-ready]`))); err != nil {
		t.Fatalf("browser: visit %s: %v", u, err)
	}
}

// follow clicks the page's link sel and waits until the next page is
// ready: the browser sends the referrer a visitor's click sends.
func follow(t *testing.T, tab context.Context, sel string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(tab, 2*testkit.Patience)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(sel)), chromedp.WaitReady(chromedp.CSS(`body[data-ready]`))); err != nil {
		t.Fatalf("browser: follow %s: %v", sel, err)
	}
}

// storedTouch returns the first touch the snippet keeps; nil for none.
func storedTouch(t *testing.T, tab context.Context) *touch {
	t.Helper()
	raw := evalIn(t, tab, `localStorage.getItem(`+jsQuote(touchKey)+`) ?? ""`)
	if raw == "" {
		return nil
	}
	var got touch
	dec := json.NewDecoder(strings.NewReader(raw))
	dec.DisallowUnknownFields() // nothing else is kept
	if err := dec.Decode(&got); err != nil {
		t.Fatalf("the stored first touch %s: %v", raw, err)
	}
	return &got
}

// submitHere sends lead (JavaScript) with the page's module and options
// (JavaScript, spread over the api, the key, timeout and wait), and
// returns the outcome's name: the answer's status, or the rejection's name.
func submitHere(t *testing.T, tab context.Context, api *scriptedAPI, lead, options string, timeout time.Duration) string {
	t.Helper()
	script := fmt.Sprintf(`(async () => {
		try {
			return (await window.m.submitLead({ api: %s, publishableKey: %s, timeout: %d, wait: 3, lead: %s, ...%s })).status;
		} catch (e) {
			return e.name;
		}
	})()`, jsQuote(api.url), jsQuote(testPK), timeout.Milliseconds(), lead, options)
	ctx, cancel := context.WithTimeout(tab, 2*testkit.Patience)
	defer cancel()
	res, err := chromedp.Run(ctx, chromedp.Evaluate[string](script, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatalf("submitLead in the browser: %v", err)
	}
	return res
}

// parseSent reads a body the api was sent.
func parseSent(t *testing.T, body string) sentLead {
	t.Helper()
	var l sentLead
	if err := json.Unmarshal([]byte(body), &l); err != nil {
		t.Fatalf("the body %s: %v", body, err)
	}
	return l
}

// requireTouch checks a touch against want, its time apart: that must be
// a time in RFC 3339 within the test's run.
func requireTouch(t *testing.T, what string, got *touch, want touch, since time.Time) {
	t.Helper()
	if got == nil {
		t.Errorf("%s: none, want %+v", what, want)
		return
	}
	at, err := time.Parse(time.RFC3339, got.At)
	if err != nil || at.Before(since.Add(-time.Second)) || at.After(time.Now().Add(time.Second)) {
		t.Errorf("%s: at %q (%v), want an RFC 3339 time since %s", what, got.At, err, since.Format(time.RFC3339))
	}
	g := *got
	g.At = ""
	if !reflect.DeepEqual(g, want) {
		t.Errorf("%s: %+v, want %+v", what, g, want)
	}
}

const created = `{"status":"completed","lead_id":"L1"}`

// The snippet's attribution in a real browser: the first touch recorded
// where the visitor landed from a campaign, a click or another site, kept
// while they browse the site, for 90 days; the page of the form as the last
// touch; nothing recorded nor sent with attribution: false; and the
// attribution fixed with the enquiry, so that a retry sends the same bytes.
// The cases run one after another in one tab: they share its localStorage.
func TestSnippetAttribution(t *testing.T) {
	t.Parallel()
	tab := browserTab(t)
	api := newScriptedAPI(t)
	site := attributionSite(t, api)
	// Another site: the same server under another host name (Chromium
	// resolves *.localhost to the loopback address itself).
	siteURL, err := url.Parse(site.URL)
	if err != nil {
		t.Fatal(err)
	}
	news := "http://news.localhost:" + siteURL.Port()
	start := func(t *testing.T) {
		t.Helper()
		visit(t, tab, site.URL+"/")
		evalIn(t, tab, `localStorage.clear(), ""`)
	}

	t.Run("FirstTouchFromAnAd", func(t *testing.T) {
		start(t)
		since := time.Now()
		visit(t, tab, site.URL+"/landing?utm_source=google&utm_medium=cpc&utm_campaign=spring&gclid=abc123&other=secret&fbclid=#frag")
		first := touch{
			LandingPage: site.URL + "/landing?utm_source=google&utm_medium=cpc&utm_campaign=spring&gclid=abc123&fbclid=",
			UTM:         map[string]string{"source": "google", "medium": "cpc", "campaign": "spring"},
			ClickIDs:    map[string]string{"gclid": "abc123"},
		}
		requireTouch(t, "the first touch recorded on the landing page", storedTouch(t, tab), first, since)
		landed := storedTouch(t, tab)

		// Browsing the site, even a page with another campaign, keeps it.
		follow(t, tab, "#next")
		visit(t, tab, site.URL+"/pricing?utm_source=newsletter&ref=home")
		if got := storedTouch(t, tab); !reflect.DeepEqual(got, landed) {
			t.Fatalf("after two more pages the first touch is %+v, want %+v", got, landed)
		}
		formPage := time.Now()
		visit(t, tab, site.URL+"/contact?utm_source=newsletter&session=s3cr3t#form")
		api.answer(scripted{status: http.StatusCreated, body: created})
		if got := submitHere(t, tab, api, `{email: "ada@example.com", source: "website"}`, `{}`, time.Minute); got != "completed" {
			t.Fatalf("submitLead: %s", got)
		}
		got := api.requests()
		sent := parseSent(t, got[len(got)-1].Body)
		if sent.Attribution == nil {
			t.Fatalf("the body %s has no attribution", got[len(got)-1].Body)
		}
		if !reflect.DeepEqual(sent.Attribution.First, landed) {
			t.Errorf("first touch sent %+v, want the landing page's %+v", sent.Attribution.First, landed)
		}
		requireTouch(t, "the last touch", sent.Attribution.Last,
			touch{LandingPage: site.URL + "/contact?utm_source=newsletter", UTM: map[string]string{"source": "newsletter"}}, formPage)
		for _, private := range []string{"secret", "s3cr3t", "frag", "#form", "ref=home"} {
			if strings.Contains(got[len(got)-1].Body, private) {
				t.Errorf("the body holds %q: %s", private, got[len(got)-1].Body)
			}
		}
	})

	t.Run("FirstTouchFromAnotherSite", func(t *testing.T) {
		start(t)
		since := time.Now()
		visit(t, tab, news+"/story?out="+url.QueryEscape(site.URL+"/blog?msclkid=ms-9&id=7#top"))
		follow(t, tab, "#out")
		requireTouch(t, "the first touch from another site", storedTouch(t, tab),
			touch{LandingPage: site.URL + "/blog?msclkid=ms-9", Referrer: news + "/", ClickIDs: map[string]string{"msclkid": "ms-9"}}, since)
		landed := storedTouch(t, tab)

		// A link of the site itself is no referrer from another site.
		follow(t, tab, "#next")
		api.answer(scripted{status: http.StatusCreated, body: created})
		if got := submitHere(t, tab, api, `{email: "ada@example.com", source: "website"}`, `{}`, time.Minute); got != "completed" {
			t.Fatalf("submitLead: %s", got)
		}
		got := api.requests()
		sent := parseSent(t, got[len(got)-1].Body)
		if sent.Attribution == nil || !reflect.DeepEqual(sent.Attribution.First, landed) {
			t.Fatalf("the body %s; want the first touch %+v", got[len(got)-1].Body, landed)
		}
		requireTouch(t, "the last touch", sent.Attribution.Last, touch{LandingPage: site.URL + "/next"}, since)
	})

	// A visitor who came straight to the site has no first touch; the page
	// of the form is the last one all the same.
	t.Run("NoFirstTouch", func(t *testing.T) {
		start(t)
		since := time.Now()
		visit(t, tab, site.URL+"/contact")
		if got := storedTouch(t, tab); got != nil {
			t.Fatalf("a direct visit recorded %+v", got)
		}
		api.answer(scripted{status: http.StatusCreated, body: created})
		submitHere(t, tab, api, `{email: "ada@example.com", source: "website"}`, `{}`, time.Minute)
		got := api.requests()
		sent := parseSent(t, got[len(got)-1].Body)
		if sent.Attribution == nil || sent.Attribution.First != nil || strings.Contains(got[len(got)-1].Body, `"first"`) {
			t.Fatalf("the body %s; want no first touch", got[len(got)-1].Body)
		}
		requireTouch(t, "the last touch", sent.Attribution.Last, touch{LandingPage: site.URL + "/contact"}, since)
	})

	// The first touch is kept 90 days: an older one is forgotten when a
	// page loads (and a page with a campaign is the first touch again).
	t.Run("KeptFor90Days", func(t *testing.T) {
		for _, tc := range []struct {
			age  time.Duration
			kept bool
		}{{89 * 24 * time.Hour, true}, {91 * 24 * time.Hour, false}} {
			start(t)
			old := touch{LandingPage: site.URL + "/old?utm_source=old", UTM: map[string]string{"source": "old"},
				At: time.Now().Add(-tc.age).UTC().Format(time.RFC3339)}
			b, _ := json.Marshal(old)
			evalIn(t, tab, `localStorage.setItem(`+jsQuote(touchKey)+`, `+jsQuote(string(b))+`), ""`)
			visit(t, tab, site.URL+"/about")
			got := storedTouch(t, tab)
			if tc.kept != (got != nil && reflect.DeepEqual(*got, old)) {
				t.Errorf("a first touch %v old after a page load: %+v, want kept %t", tc.age, got, tc.kept)
			}
			api.answer(scripted{status: http.StatusCreated, body: created})
			submitHere(t, tab, api, `{email: "ada@example.com", source: "website"}`, `{}`, time.Minute)
			requests := api.requests()
			sent := parseSent(t, requests[len(requests)-1].Body)
			if sent.Attribution == nil || tc.kept != (sent.Attribution.First != nil && reflect.DeepEqual(*sent.Attribution.First, old)) {
				t.Errorf("a first touch %v old: the body %s, want it sent %t", tc.age, requests[len(requests)-1].Body, tc.kept)
			}
			if !tc.kept {
				visit(t, tab, site.URL+"/again?utm_source=new")
				if got := storedTouch(t, tab); got == nil || got.UTM["source"] != "new" {
					t.Errorf("after the old one expired, a campaign's page recorded %+v", got)
				}
			}
		}
	})

	// attribution: false: a page that says so when it attaches its form
	// records nothing, forgets the touch kept, and sends none; submitLead
	// with it sends none either.
	t.Run("TurnedOff", func(t *testing.T) {
		start(t)
		visit(t, tab, site.URL+"/landing?utm_source=google")
		if storedTouch(t, tab) == nil {
			t.Fatal("no first touch to forget")
		}
		visit(t, tab, site.URL+"/off/contact?utm_source=bing&gclid=g-off")
		if got := storedTouch(t, tab); got != nil {
			t.Fatalf("with attribution: false the page keeps %+v", got)
		}
		api.answer(scripted{status: http.StatusCreated, body: created})
		before := len(api.requests())
		evalIn(t, tab, `document.getElementById("f").requestSubmit(), ""`)
		testkit.EventuallyWithin(t, testkit.Patience, "the form's enquiry done", func() bool {
			return evalIn(t, tab, `document.getElementById("f").dataset.leadintakeState ?? ""`) == "done"
		})
		if len(api.requests()) != before+1 {
			t.Fatalf("the form sent %d requests, want 1", len(api.requests())-before)
		}
		got := api.requests()
		if body := got[len(got)-1].Body; body != `{"email":"ada@example.com","source":"website"}` {
			t.Errorf("with attribution: false the form sent %s", body)
		}
		if got := storedTouch(t, tab); got != nil {
			t.Errorf("after the enquiry the page keeps %+v", got)
		}
		// Nor is its touch recorded as the visitor leaves it.
		follow(t, tab, "#next")
		if got := storedTouch(t, tab); got != nil {
			t.Errorf("after the visitor left the page the site keeps %+v", got)
		}

		start(t)
		visit(t, tab, site.URL+"/landing?utm_source=google")
		api.answer(scripted{status: http.StatusCreated, body: created})
		submitHere(t, tab, api, `{email: "ada@example.com", source: "website"}`, `{attribution: false}`, time.Minute)
		got = api.requests()
		if body := got[len(got)-1].Body; body != `{"email":"ada@example.com","source":"website"}` || storedTouch(t, tab) != nil {
			t.Errorf("submitLead with attribution: false sent %s and keeps %+v", body, storedTouch(t, tab))
		}
	})

	// The attribution is fixed when the enquiry is first stored: the same
	// enquiry sent again from another page, after the first sending had no
	// answer, goes under the same key with the same bytes.
	t.Run("ARetrySendsTheSameBytes", func(t *testing.T) {
		start(t)
		visit(t, tab, site.URL+"/landing?utm_campaign=retry")
		busy := scripted{status: http.StatusServiceUnavailable, header: map[string]string{"Retry-After": "1"}, body: `{"error":{"code":"store_unavailable","message":"x"}}`}
		api.answer(busy, busy, busy, busy, busy, busy)
		before := len(api.requests())
		if got := submitHere(t, tab, api, `{email: "ada@example.com", source: "website"}`, `{}`, 1500*time.Millisecond); got != "OutcomeUnknown" {
			t.Fatalf("submitLead against a busy api: %s, want OutcomeUnknown", got)
		}
		first := api.requests()[before]
		if !strings.Contains(first.Body, `"landing_page":"`+site.URL+`/landing?utm_campaign=retry"`) {
			t.Fatalf("the first POST %s", first.Body)
		}
		follow(t, tab, "#next")
		api.answer(scripted{status: http.StatusCreated, body: created})
		if got := submitHere(t, tab, api, `{email: "ada@example.com", source: "website"}`, `{}`, time.Minute); got != "completed" {
			t.Fatalf("submitLead again: %s", got)
		}
		got := api.requests()
		last := got[len(got)-1]
		if last.Key != first.Key || last.Body != first.Body || last.Supersedes != "" {
			t.Errorf("sent again from another page: key %s, body %s; want the key %s and the bytes %s", last.Key, last.Body, first.Key, first.Body)
		}
		// Another enquiry from this page is another body, with this page.
		api.answer(scripted{status: http.StatusCreated, body: created})
		submitHere(t, tab, api, `{email: "ada@example.com", source: "website", message: "and one more thing"}`, `{}`, time.Minute)
		got = api.requests()
		if other := got[len(got)-1]; other.Key == first.Key || !strings.Contains(other.Body, `"last":{"landing_page":"`+site.URL+`/next"`) {
			t.Errorf("another enquiry: key %s, body %s; want a new key and this page as the last touch", other.Key, other.Body)
		}
	})

	// What the api would refuse is left out of a touch, never the enquiry:
	// a value over its bound, more than 20 utm, a URL over 2048 characters.
	t.Run("BoundsHeld", func(t *testing.T) {
		start(t)
		q := []string{"utm_long=" + strings.Repeat("x", 201), "gclid=" + strings.Repeat("g", 513), "fbclid=f1"}
		for i := range 25 {
			q = append(q, fmt.Sprintf("utm_k%02d=v", i))
		}
		visit(t, tab, site.URL+"/landing?"+strings.Join(q, "&"))
		got := storedTouch(t, tab)
		if got == nil || len(got.UTM) != 20 || got.UTM["long"] != "" || got.ClickIDs["gclid"] != "" || got.ClickIDs["fbclid"] != "f1" {
			t.Fatalf("the first touch %+v; want 20 utm, no value over 200 characters, no gclid over 512", got)
		}
		visit(t, tab, site.URL+"/x"+strings.Repeat("y", 2100)+"?utm_source=long")
		api.answer(scripted{status: http.StatusCreated, body: created})
		submitHere(t, tab, api, `{email: "ada@example.com", source: "website"}`, `{}`, time.Minute)
		requests := api.requests()
		sent := parseSent(t, requests[len(requests)-1].Body)
		if sent.Attribution == nil || sent.Attribution.Last == nil || sent.Attribution.Last.LandingPage != "" || sent.Attribution.Last.UTM["source"] != "long" {
			t.Errorf("a page whose URL is over 2048 characters: the body %.300s", requests[len(requests)-1].Body)
		}
	})
}

// answer replaces the answers api has left with these.
func (a *scriptedAPI) answer(answers ...scripted) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.answers = answers
}
