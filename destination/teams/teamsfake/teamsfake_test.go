package teamsfake_test

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/leadintake/leadintake/destination/teams/teamsfake"
)

const origin = "https://prod-00.westeurope.logic.azure.com:443"

// card is a message with one card whose body is body.
func card(version, body string) string {
	return `{"type":"message","attachments":[{"contentType":"application/vnd.microsoft.card.adaptive","contentUrl":null,` +
		`"content":{"type":"AdaptiveCard","version":"` + version + `","body":` + body + `}}]}`
}

var good = card("1.4", `[{"type":"TextBlock","text":"New lead: Analytical Engines"},`+
	`{"type":"FactSet","facts":[{"title":"Email","value":"ada\\@example\\.com"}]},`+
	`{"type":"Container","items":[{"type":"TextBlock","text":"ref li\\_1"}]}]`)

type bundle struct {
	f   *teamsfake.Server
	ts  *httptest.Server
	log *bytes.Buffer
}

func setup(t *testing.T) *bundle {
	t.Helper()
	b := &bundle{log: &bytes.Buffer{}}
	b.f = teamsfake.New(&teamsfake.Options{Logger: slog.New(slog.NewTextHandler(b.log, nil))})
	b.ts = httptest.NewServer(b.f)
	t.Cleanup(b.ts.Close)
	t.Cleanup(b.f.Close)
	return b
}

// hook is the trigger's URL at the stand-in.
func (b *bundle) hook() string {
	return strings.Replace(b.f.URL(origin), origin, b.ts.URL, 1)
}

func (b *bundle) post(t *testing.T, url, body string) (int, string, http.Header) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(out), resp.Header
}

func errorCode(t *testing.T, body string) string {
	t.Helper()
	var e struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	if err := json.Unmarshal([]byte(body), &e); err != nil || e.Error.Message == "" {
		t.Fatalf("body %q is not a Logic Apps error", body)
	}
	return e.Error.Code
}

func TestTakesACard(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, url := range []string{
		b.hook(),
		strings.Replace(b.hook(), "/workflows/", "/powerautomate/automations/direct/workflows/", 1),
	} {
		status, body, h := b.post(t, url, good)
		if status != http.StatusAccepted || body != "" || h.Get("x-ms-workflow-run-id") == "" {
			t.Fatalf("%d %q run %q, want 202 with a run id and no body", status, body, h.Get("x-ms-workflow-run-id"))
		}
	}
	ms := b.f.For("li_1")
	if len(ms) != 2 {
		t.Fatalf("%d messages for li_1, want 2", len(ms))
	}
	if want := "New lead: Analytical Engines\nEmail: ada@example.com\nref li_1"; ms[0].Text != want {
		t.Errorf("text %q, want %q", ms[0].Text, want)
	}
	if len(ms[0].Links)+len(ms[0].Markup)+len(ms[0].Actions) != 0 {
		t.Errorf("links %q markup %q actions %q, want none", ms[0].Links, ms[0].Markup, ms[0].Actions)
	}
	if len(b.f.For("li_10")) != 0 || len(b.f.For("li_")) != 0 {
		t.Error("For matched the start of another reference")
	}
	if st := b.f.State(); st.Messages != 2 || st.Refused != 0 || st.Requests[teamsfake.TargetTrigger] != 2 {
		t.Errorf("state %+v", st)
	}
	if strings.Contains(b.log.String(), teamsfake.DefaultSig) || !strings.Contains(b.log.String(), "status=202") {
		t.Errorf("log %q: want the status and never the sig", b.log.String())
	}
}

func TestRefusesWhatTheWorkflowRefuses(t *testing.T) {
	t.Parallel()
	big := card("1.4", `[{"type":"TextBlock","text":"`+strings.Repeat("x", teamsfake.DefaultMaxBytes)+`"}]`)
	cases := []struct {
		name   string
		url    func(b *bundle) string
		before func(b *bundle)
		body   string
		status int
		code   string
	}{
		{name: "NoSig", url: func(b *bundle) string { return strings.Split(b.hook(), "&sig=")[0] }, status: 401, code: "DirectApiAuthorizationRequired"},
		{name: "WrongSig", url: func(b *bundle) string { return b.hook() + "x" }, status: 401, code: "DirectApiInvalidAuthorizationSignature"},
		{name: "RefusedCredentials", before: func(b *bundle) { b.f.SetRefuseCredentials(true) }, status: 401, code: "DirectApiInvalidAuthorizationSignature"},
		{name: "AnotherWorkflow", url: func(b *bundle) string { return strings.Replace(b.hook(), teamsfake.DefaultWorkflow, "deadbeef", 1) }, status: 404, code: "WorkflowNotFound"},
		{name: "NoAPIVersion", url: func(b *bundle) string { return strings.Replace(b.hook(), "api-version=2016-06-01&", "", 1) }, status: 400, code: "MissingApiVersionParameter"},
		{name: "TurnedOff", before: func(b *bundle) { b.f.SetWorkflowState(teamsfake.StateDisabled) }, status: 400, code: "WorkflowTriggerIsNotEnabled"},
		{name: "Suspended", before: func(b *bundle) { b.f.SetWorkflowState(teamsfake.StateSuspended) }, status: 400, code: "WorkflowTriggerIsNotEnabled"},
		{name: "Deleted", before: func(b *bundle) { b.f.SetWorkflowState(teamsfake.StateDeleted) }, status: 400, code: "WorkflowTriggerIsNotEnabled"},
		{name: "NotJSON", body: "type=message", status: 400, code: "InvalidRequestContent"},
		{name: "NotAMessage", body: `{"type":"AdaptiveCard","body":[]}`, status: 400, code: "TriggerInputSchemaMismatch"},
		{name: "NoAttachments", body: `{"type":"message","attachments":[]}`, status: 400, code: "TriggerInputSchemaMismatch"},
		{name: "NotAnAdaptiveCard", body: strings.Replace(good, "vnd.microsoft.card.adaptive", "vnd.microsoft.card.hero", 1), status: 400, code: "InvalidAdaptiveCard"},
		{name: "MessageCard", body: strings.Replace(good, `"type":"AdaptiveCard"`, `"type":"MessageCard"`, 1), status: 400, code: "InvalidAdaptiveCard"},
		{name: "Version13", body: card("1.3", `[{"type":"TextBlock","text":"x"}]`), status: 400, code: "InvalidAdaptiveCard"},
		{name: "Version20", body: card("2.0", `[{"type":"TextBlock","text":"x"}]`), status: 400, code: "InvalidAdaptiveCard"},
		{name: "EmptyBody", body: card("1.4", `[]`), status: 400, code: "InvalidAdaptiveCard"},
		{name: "UnknownElement", body: card("1.4", `[{"type":"Marquee","text":"x"}]`), status: 400, code: "InvalidAdaptiveCard"},
		{name: "UnknownElementInAContainer", body: card("1.4", `[{"type":"Container","items":[{"type":"Blink"}]}]`), status: 400, code: "InvalidAdaptiveCard"},
		{name: "TextBlockWithoutText", body: card("1.4", `[{"type":"TextBlock"}]`), status: 400, code: "InvalidAdaptiveCard"},
		{name: "FactWithoutValue", body: card("1.4", `[{"type":"FactSet","facts":[{"title":"x"}]}]`), status: 400, code: "InvalidAdaptiveCard"},
		{name: "UnknownAction", body: card("1.4", `[{"type":"ActionSet","actions":[{"type":"Action.Http"}]}]`), status: 400, code: "InvalidAdaptiveCard"},
		{name: "OverTwentyEightKB", body: big, status: 413, code: "RequestEntityTooLarge"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			if tc.before != nil {
				tc.before(b)
			}
			url, body := b.hook(), good
			if tc.url != nil {
				url = tc.url(b)
			}
			if tc.body != "" {
				body = tc.body
			}
			status, answer, _ := b.post(t, url, body)
			if status != tc.status || errorCode(t, answer) != tc.code {
				t.Fatalf("%d %s, want %d %s", status, answer, tc.status, tc.code)
			}
			if st := b.f.State(); st.Messages != 0 || st.Refused != 1 {
				t.Errorf("state %+v: want no message and one refusal", st)
			}
		})
	}
}

func TestSeesMarkupAndLinks(t *testing.T) {
	t.Parallel()
	b := setup(t)
	body := card("1.5", `[{"type":"TextBlock","text":"**bold** [click](https://a.example) https://b.example x@c.example"},`+
		`{"type":"FactSet","facts":[{"title":"_t_","value":"{{DATE(2017-02-14T06:08:00Z, SHORT)}} - item"}]},`+
		`{"type":"TextBlock","text":"- list\r- items"},`+
		`{"type":"ActionSet","actions":[{"type":"Action.OpenUrl","url":"https://d.example"}]}]`)
	if status, answer, _ := b.post(t, b.hook(), body); status != http.StatusAccepted {
		t.Fatalf("%d %s", status, answer)
	}
	m := b.f.Messages()[0]
	for _, want := range []string{"https://a.example", "https://b.example", "mailto:x@c.example"} {
		if !slices.Contains(m.Links, want) && !slices.Contains(m.Links, strings.TrimPrefix(want, "mailto:")) {
			t.Errorf("links %q miss %s", m.Links, want)
		}
	}
	for _, want := range []string{"strong", "emphasis", "date-function", "list"} {
		if !slices.Contains(m.Markup, want) {
			t.Errorf("markup %q misses %s", m.Markup, want)
		}
	}
	if !slices.Equal(m.Actions, []string{"https://d.example"}) {
		t.Errorf("actions %q", m.Actions)
	}
	// The same text escaped is literal.
	escaped := card("1.4", `[{"type":"TextBlock","text":"\\*\\*bold\\*\\* \\[click\\]\\(https\\:\\/\\/a\\.example\\) https\\:\\/\\/b\\.example x\\@c\\.example"}]`)
	if status, answer, _ := b.post(t, b.hook(), escaped); status != http.StatusAccepted {
		t.Fatalf("%d %s", status, answer)
	}
	m = b.f.Messages()[1]
	if len(m.Links)+len(m.Markup) != 0 || m.Text != "**bold** [click](https://a.example) https://b.example x@c.example" {
		t.Errorf("escaped: text %q links %q markup %q", m.Text, m.Links, m.Markup)
	}
}

func TestControlAPI(t *testing.T) {
	t.Parallel()
	b := setup(t)
	control := func(path, body string, want int) {
		t.Helper()
		resp, err := http.Post(b.ts.URL+"/_standin/"+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("%s %s: %d, want %d", path, body, resp.StatusCode, want)
		}
	}
	state := func() teamsfake.State {
		t.Helper()
		resp, err := http.Get(b.ts.URL + "/_standin/state")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var s teamsfake.State
		if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}

	control("credentials", `{"refuse":true}`, 204)
	if status, _, _ := b.post(t, b.hook(), good); status != 401 {
		t.Errorf("refusing credentials: %d, want 401", status)
	}
	control("credentials", `{"refuse":false}`, 204)
	control("workflow", `{"state":"Disabled"}`, 204)
	if status, _, _ := b.post(t, b.hook(), good); status != 400 {
		t.Errorf("turned off: %d, want 400", status)
	}
	control("workflow", `{"state":"Sleeping"}`, 400)
	control("workflow", `{"state":"Enabled"}`, 204)
	control("script", `{"target":"trigger","faults":[{"status":429,"retry_after":"3"}]}`, 204)
	resp, err := http.Post(b.hook(), "application/json", strings.NewReader(good))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "3" {
		t.Errorf("scripted: %d Retry-After %q", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if status, _, _ := b.post(t, b.hook(), good); status != 202 {
		t.Errorf("after the script: %d, want 202", status)
	}
	if s := state(); s.Messages != 1 || s.Refused != 2 || s.Requests["trigger"] != 4 || s.WorkflowState != "Enabled" || s.RefusingCredentials {
		t.Errorf("state %+v", s)
	}
	control("reset", ``, 204)
	if s := state(); s.Messages != 0 || s.Requests["trigger"] != 0 {
		t.Errorf("after reset: %+v", s)
	}
	control("credentials", `{"refuse":true,"extra":1}`, 400)
}

func TestFaults(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.f.Script(teamsfake.TargetTrigger, teamsfake.RateLimitFault(), teamsfake.ServerErrorFault(), teamsfake.RejectFault())
	for _, want := range []struct {
		status int
		code   string
	}{{429, "WorkflowRequestsThrottled"}, {502, "BadGateway"}, {400, "TriggerInputSchemaMismatch"}} {
		status, body, h := b.post(t, b.hook(), good)
		if status != want.status || errorCode(t, body) != want.code {
			t.Errorf("%d %s, want %d %s", status, body, want.status, want.code)
		}
		if status == 429 && h.Get("Retry-After") == "" {
			t.Error("429 without Retry-After")
		}
	}
	if n := b.f.State().Messages; n != 0 {
		t.Errorf("%d messages taken by failed calls", n)
	}
}
