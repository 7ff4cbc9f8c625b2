package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/leadintake/leadintake/internal/browsertest"
	"github.com/leadintake/leadintake/internal/testkit"
	"github.com/leadintake/leadintake/lead"
)

var operator = basicAuth{user: "operator", password: "e2e-admin-password-7Qx"}

// River UI and /metrics on the api's admin listener: behind basic auth when
// ADMIN_USER and ADMIN_PASSWORD are set; without them no River UI at all,
// /metrics open.
func TestAdminListener(t *testing.T) {
	t.Parallel()
	s := newStack(t, nil)

	t.Run("WithCredentials", func(t *testing.T) {
		api := s.startAPI("ADMIN_USER="+operator.user, "ADMIN_PASSWORD="+operator.password)
		admin := adminURL(t, api)

		paths := []string{"/riverui/", "/riverui/jobs", "/riverui/api/jobs?state=completed", "/metrics"}
		// No credentials is no guess: always the challenge.
		for _, path := range paths {
			r := get(t, admin+path, basicAuth{})
			if r.status != http.StatusUnauthorized {
				t.Errorf("GET %s without credentials: %d, want 401", path, r.status)
			}
			if path == "/riverui/" && !strings.HasPrefix(r.header.Get("WWW-Authenticate"), "Basic ") {
				t.Errorf("GET %s without credentials: WWW-Authenticate %q", path, r.header.Get("WWW-Authenticate"))
			}
		}
		// Wrong credentials are refused; after a few from this address,
		// with 429 and Retry-After, unchecked, until its budget refills.
		for name, auth := range map[string]basicAuth{
			"wrong password": {user: operator.user, password: operator.password + "x"},
			"wrong user":     {user: "admin", password: operator.password},
			"empty password": {user: operator.user},
		} {
			for _, path := range paths {
				switch r := get(t, admin+path, auth); {
				case r.status == http.StatusTooManyRequests:
					if r.header.Get("Retry-After") == "" {
						t.Errorf("GET %s with %s credentials: 429 without Retry-After", path, name)
					}
				case r.status != http.StatusUnauthorized:
					t.Errorf("GET %s with %s credentials: %d, want 401 (or 429 once this address has guessed too often)", path, name, r.status)
				case path == "/riverui/" && !strings.HasPrefix(r.header.Get("WWW-Authenticate"), "Basic "):
					t.Errorf("GET %s with %s credentials: WWW-Authenticate %q", path, name, r.header.Get("WWW-Authenticate"))
				}
			}
		}
		var wg sync.WaitGroup
		var limited atomic.Int32
		for range 20 {
			wg.Go(func() {
				req, err := http.NewRequest(http.MethodGet, admin+"/metrics", nil)
				if err != nil {
					t.Error(err)
					return
				}
				req.SetBasicAuth(operator.user, "guess")
				res, err := httpClient.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				res.Body.Close()
				if res.StatusCode == http.StatusTooManyRequests {
					limited.Add(1)
				}
			})
		}
		wg.Wait()
		if limited.Load() == 0 {
			t.Error("20 wrong passwords at once from one address, none answered 429")
		}
		// The right password works again once the address may try again.
		testkit.EventuallyWithin(t, 30*time.Second, "the right password accepted after the guesses", func() bool {
			return get(t, admin+"/metrics", operator).status == http.StatusOK
		})

		r := get(t, admin+"/riverui/", operator)
		if r.status != http.StatusOK || !strings.HasPrefix(r.header.Get("Content-Type"), "text/html") {
			t.Fatalf("GET /riverui/ with credentials: %d %q", r.status, r.header.Get("Content-Type"))
		}
		if page := string(r.body); !strings.Contains(page, "<title>River</title>") || !strings.Contains(page, `id="root"`) {
			t.Fatalf("GET /riverui/: not River UI's page:\n%s", page)
		}
		// Deep links are served the same page (the UI routes in the browser).
		if r := get(t, admin+"/riverui/jobs?state=completed", operator); r.status != http.StatusOK || !strings.Contains(string(r.body), `id="root"`) {
			t.Fatalf("GET /riverui/jobs: %d", r.status)
		}
		// The UI is told to hide job arguments in the list by default.
		r = get(t, admin+"/riverui/api/features", operator)
		var features struct {
			HideArgs *bool `json:"job_list_hide_args_by_default"`
		}
		if r.status != http.StatusOK || json.Unmarshal(r.body, &features) != nil || features.HideArgs == nil || !*features.HideArgs {
			t.Fatalf("GET /riverui/api/features: %d %s, want job_list_hide_args_by_default true", r.status, r.body)
		}
		scrape(t, admin+"/metrics", operator)
	})

	t.Run("WithoutCredentials", func(t *testing.T) {
		api := s.startAPI()
		admin := adminURL(t, api)
		for _, path := range []string{"/riverui/", "/riverui", "/riverui/jobs", "/riverui/api/features"} {
			for _, auth := range []basicAuth{{}, operator} {
				if r := get(t, admin+path, auth); r.status != http.StatusNotFound {
					t.Errorf("GET %s (auth %v): %d, want 404", path, auth != basicAuth{}, r.status)
				}
			}
		}
		m := scrape(t, admin+"/metrics", basicAuth{})
		if _, ok := m["leadintake_submissions_total"]; !ok {
			t.Fatalf("api /metrics without leadintake_submissions_total")
		}
	})
}

// A real browser loads River UI with the operator's credentials after a lead
// was processed: the jobs list shows the process_lead job, and not its
// arguments (the lead id) until asked to.
func TestRiverUIInBrowser(t *testing.T) {
	t.Parallel()
	browsertest.Require(t)
	s := newStack(t, nil)
	api := s.startAPI("ADMIN_USER="+operator.user, "ADMIN_PASSWORD="+operator.password)
	s.startWorker()
	admin := adminURL(t, api)

	const key = "riverui-browser-0001"
	r := s.submit(key, leadBody(7))
	if r.status != http.StatusAccepted {
		t.Fatalf("submit: %d %s", r.status, r.body)
	}
	op := s.waitState(key, time.Minute, string(lead.KeyCompleted))
	if op.LeadID == "" {
		t.Fatalf("operation without lead_id: %+v", op)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	browser, stop := browsertest.Start(t, ctx, 1400, 1000)
	defer stop()

	auth := base64.StdEncoding.EncodeToString([]byte(operator.user + ":" + operator.password))
	if _, err := chromedp.Call(browser, network.SetExtraHTTPHeaders, network.SetExtraHTTPHeadersParams{
		Headers: network.Headers{"Authorization": "Basic " + auth},
	}); err != nil {
		t.Fatalf("browser: %v", err)
	}
	if err := chromedp.Do(browser, chromedp.Navigate(admin+"/riverui/jobs?state=completed")); err != nil {
		t.Fatalf("browser: open River UI: %v", err)
	}
	// The page is a single-page app: wait until it has fetched and rendered
	// the completed jobs.
	_, err := chromedp.Run(browser, chromedp.Poll[bool](`!!document.body && document.body.innerText.includes("process_lead")`,
		chromedp.WithPollingInterval(250*time.Millisecond), chromedp.WithPollingTimeout(0)))
	if err != nil {
		page, _ := chromedp.Run(browser, chromedp.Evaluate[string](`document.body ? document.body.innerText : ""`))
		t.Fatalf("River UI shows no process_lead job: %v\npage text:\n%s", err, page)
	}
	listText, err := chromedp.Run(browser, chromedp.Evaluate[string](`document.body.innerText`))
	if err != nil {
		t.Fatalf("browser: %v", err)
	}
	t.Logf("River UI jobs list, as rendered:\n%s", listText)
	if strings.Contains(listText, op.LeadID) {
		t.Fatalf("the jobs list shows the job's arguments (lead_id %s) by default:\n%s", op.LeadID, listText)
	}

	// The check above is not vacuous: once the operator turns arguments on
	// in the settings, the same list shows the lead id.
	err = chromedp.Do(browser,
		chromedp.Navigate(admin+"/riverui/settings"),
		chromedp.Click(chromedp.CSS(`[data-testid="job-args-toggle"]`)),
		chromedp.Navigate(admin+"/riverui/jobs?state=completed"),
	)
	if err != nil {
		t.Fatalf("browser: turn job arguments on: %v", err)
	}
	_, err = chromedp.Run(browser, chromedp.Poll[bool](`!!document.body && document.body.innerText.includes(`+strconv.Quote(op.LeadID)+`)`,
		chromedp.WithPollingInterval(250*time.Millisecond), chromedp.WithPollingTimeout(0)))
	if err != nil {
		page, _ := chromedp.Run(browser, chromedp.Evaluate[string](`document.body ? document.body.innerText : ""`))
		t.Fatalf("with arguments turned on, the jobs list still shows no lead_id %s: %v\npage text:\n%s", op.LeadID, err, page)
	}
}
