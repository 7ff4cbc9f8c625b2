package teams_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/leadintake/leadintake/destination"
	"github.com/leadintake/leadintake/destination/destinationtest"
	"github.com/leadintake/leadintake/destination/teams"
	"github.com/leadintake/leadintake/destination/teams/teamsfake"
	"github.com/leadintake/leadintake/internal/standin"
)

// vendorOrigin is a trigger's origin as Power Automate hands it out; the
// tests reach the stand-in through base_url.
const vendorOrigin = "https://prod-00.westeurope.logic.azure.com:443"

// standIn drives the stand-in as the suite asks.
type standIn struct{ f *teamsfake.Server }

func (s standIn) Inject(f destinationtest.Fault) {
	switch f {
	case destinationtest.LoseAnswer:
		s.f.Script(teamsfake.TargetTrigger, standin.Fault{DropAfterApply: true})
	case destinationtest.FailServer:
		s.f.Script(teamsfake.TargetTrigger, teamsfake.ServerErrorFault())
	case destinationtest.RateLimit:
		s.f.Script(teamsfake.TargetTrigger, teamsfake.RateLimitFault())
	case destinationtest.RejectMessage:
		s.f.Script(teamsfake.TargetTrigger, teamsfake.RejectFault())
	case destinationtest.RefuseCredentials:
		s.f.SetRefuseCredentials(true)
	case destinationtest.Restore:
		s.f.SetRefuseCredentials(false)
	}
}

func (s standIn) Messages(ref string) int { return len(s.f.For(ref)) }

// Distinct: Teams cannot tell a repeated card from a new one.
func (s standIn) Distinct(ref string) int { return s.Messages(ref) }

func (s standIn) Text(ref string) string {
	ms := s.f.For(ref)
	if len(ms) == 0 {
		return ""
	}
	return ms[len(ms)-1].Text
}

// request is one call the stand-in received.
type request struct {
	Method string
	Path   string
	Query  url.Values
	Header http.Header
	Body   []byte
}

// bundle is one test's channel, stand-in and the calls it received.
type bundle struct {
	ch     destination.Channel
	f      *teamsfake.Server
	server *httptest.Server
	config *destination.Config

	mu       sync.Mutex
	requests []request
}

func (b *bundle) last(t *testing.T) request {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.requests) == 0 {
		t.Fatal("no request received")
	}
	return b.requests[len(b.requests)-1]
}

// setup starts a stand-in and configures a channel for it: webhook_url as
// Teams shows it, base_url the stand-in's.
func setup(t *testing.T, o *teamsfake.Options) *bundle {
	t.Helper()
	b := &bundle{f: teamsfake.New(o)}
	b.server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		b.mu.Lock()
		b.requests = append(b.requests, request{Method: r.Method, Path: r.URL.Path, Query: r.URL.Query(), Header: r.Header.Clone(), Body: body})
		b.mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(body))
		b.f.ServeHTTP(w, r)
	}))
	t.Cleanup(b.server.Close)
	t.Cleanup(b.f.Close)
	b.config = &destination.Config{Name: "sales-teams", Kind: teams.Kind, BaseURL: b.server.URL,
		Values: map[string]string{"webhook_url": b.f.URL(vendorOrigin)}}
	if err := teams.Spec.Validate(b.config); err != nil {
		t.Fatal(err)
	}
	ch, err := teams.Spec.NewChannel(b.config)
	if err != nil {
		t.Fatal(err)
	}
	b.ch = ch
	return b
}

func TestConformance(t *testing.T) {
	destinationtest.RunChannel(t, destinationtest.ChannelHarness{
		New: func(t *testing.T) (destination.Channel, destinationtest.ChannelSetup) {
			b := setup(t, nil)
			return b.ch, destinationtest.ChannelSetup{StandIn: standIn{b.f},
				Secrets: []string{teamsfake.DefaultSig, b.config.Value("webhook_url"), teamsfake.DefaultWorkflow}}
		},
	})
}

func record(t *testing.T) *destination.Record {
	r := destinationtest.Record(t)
	r.Owner = &destination.Owner{Name: "alice", Email: "alice@acme.example", Slack: "U123"}
	return r
}

func TestSendPostsOneCardToTheTrigger(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	r := record(t)
	r.Amendment, r.Amends, r.DuplicateOf = 1, "0190c6a2-0000-7000-8000-000000000001", "0190c6a2-0000-7000-8000-000000000002"
	rc, err := b.ch.Send(context.Background(), r, "")
	if err != nil || rc != "" {
		t.Fatalf("receipt %q, error %v; want none", rc, err)
	}

	req := b.last(t)
	if req.Method != http.MethodPost || req.Path != "/workflows/"+teamsfake.DefaultWorkflow+"/triggers/manual/paths/invoke" {
		t.Errorf("%s %s, want POST to the trigger's path", req.Method, req.Path)
	}
	for k, want := range map[string]string{"api-version": "2016-06-01", "sp": "/triggers/manual/run", "sv": "1.0", "sig": teamsfake.DefaultSig} {
		if got := req.Query.Get(k); got != want {
			t.Errorf("query %s = %q, want %q (the URL's query as given)", k, got, want)
		}
	}
	if ct := req.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q", ct)
	}

	var msg struct {
		Type        string `json:"type"`
		Attachments []struct {
			ContentType string          `json:"contentType"`
			ContentURL  *string         `json:"contentUrl"`
			Content     json.RawMessage `json:"content"`
		} `json:"attachments"`
	}
	if err := json.Unmarshal(req.Body, &msg); err != nil {
		t.Fatal(err)
	}
	if msg.Type != "message" || len(msg.Attachments) != 1 || msg.Attachments[0].ContentType != "application/vnd.microsoft.card.adaptive" || msg.Attachments[0].ContentURL != nil {
		t.Fatalf("envelope %s", req.Body)
	}
	var card map[string]any
	if err := json.Unmarshal(msg.Attachments[0].Content, &card); err != nil {
		t.Fatal(err)
	}
	if card["type"] != "AdaptiveCard" || card["version"] != "1.4" {
		t.Errorf("card type %v version %v", card["type"], card["version"])
	}
	if _, ok := card["actions"]; ok {
		t.Error("the card has actions; it must have none")
	}
	if fb, _ := card["fallbackText"].(string); !strings.Contains(fb, r.ExternalRef) || strings.Contains(fb, r.Lead.Company) {
		t.Errorf("fallbackText %q: want the reference and no visitor text", fb)
	}

	ms := b.f.For(r.ExternalRef)
	if len(ms) != 1 {
		t.Fatalf("%d messages for the reference, want 1", len(ms))
	}
	m := ms[0]
	for _, line := range []string{
		"Amended lead: Analytical Engines",
		"hot · score 85 · referral",
		"Name: Ada Lovelace",
		"Company: Analytical Engines",
		"Email: " + r.Lead.Email,
		"Phone: +44 20 7946 0000",
		"Source: referral",
		"Tier: hot",
		"Score: 85",
		"Owner: alice",
		"Amends: " + r.Amends,
		"Possible duplicate of: " + r.DuplicateOf,
		"We would like a demo.",
		"Lead " + r.LeadID + " · ref " + r.ExternalRef,
	} {
		if !hasLine(m.Text, line) {
			t.Errorf("the card does not show %q:\n%s", line, m.Text)
		}
	}
	if len(m.Links) != 0 || len(m.Markup) != 0 || len(m.Actions) != 0 {
		t.Errorf("links %q, markup %q, actions %q: want none", m.Links, m.Markup, m.Actions)
	}
	if strings.Contains(m.Text, r.Lead.Website) {
		t.Error("the card shows the lead's website; the kind puts no visitor URL on it")
	}
}

func TestANewLeadWithoutOwnerOrCompany(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	r := destinationtest.Record(t)
	l := *r.Lead
	l.Company, l.Message = "", ""
	r.Lead = &l
	if _, err := b.ch.Send(context.Background(), r, ""); err != nil {
		t.Fatal(err)
	}
	m := b.f.For(r.ExternalRef)[0]
	if !hasLine(m.Text, "New lead: Ada Lovelace") {
		t.Errorf("want the name as the headline without a company:\n%s", m.Text)
	}
	for _, absent := range []string{"Company:", "Owner:", "Amends:", "Possible duplicate of:"} {
		if strings.Contains(m.Text, absent) {
			t.Errorf("the card shows %q for a value that is not set:\n%s", absent, m.Text)
		}
	}
}

func hasLine(text, line string) bool {
	for l := range strings.SplitSeq(text, "\n") {
		if l == line {
			return true
		}
	}
	return false
}

// hostile are visitor values that would become markup, links, mentions,
// functions, new lines or reordered text if sent as they are.
var hostile = []string{
	"**bold** __strong__ _it_ *em* `code` ~~strike~~",
	"[click](https://evil.example) ![img](https://evil.example/x.png) [ref][1]\n\n[1]: https://evil.example",
	"<https://evil.example> https://evil.example/a?b=c www.evil.example evil@evil.example ftp://evil.example",
	"# Heading",
	"- item",
	"+ item",
	"1. item",
	"2) item",
	"> quote",
	"    indented code",
	"---",
	"===",
	"| a | b |\n|---|---|\n| c | d |",
	"- [ ] task",
	"<at>Everyone</at> <!channel> <@U1> <https://evil.example|click>",
	"&lt;b&gt; &amp; &#x41; &copy;",
	"<b>html</b> <img src=x onerror=alert(1)>",
	"{{DATE(2017-02-14T06:08:00Z, SHORT)}} {{TIME(2017-02-14T06:08:00Z)}}",
	"Eve\r\nBcc: victim@example.com \u202egnp.exe\u202c \u2066iso\u2069",
	`\*already escaped\* \\ back\slash`,
	"line\u2028sep\u2029para\x00nul\x1b[31mansi\u0085nel",
	"\tleading\t\ttabs   and   spaces  ",
}

// literal is what the card must show of a one-line value: its words, one
// space apart, without bidirectional controls or other controls.
func literal(s string) string {
	s = strings.Map(func(r rune) rune {
		switch {
		case r >= '\u202a' && r <= '\u202e', r >= '\u2066' && r <= '\u2069':
			return -1
		case r < 0x20, r >= 0x7f && r < 0xa0, r == '\u2028', r == '\u2029':
			return ' '
		}
		return r
	}, s)
	return strings.Join(strings.Fields(s), " ")
}

// cut is s as a card shows a value over its bound of n characters: its
// first n-1 and an ellipsis.
func cut(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return strings.TrimRight(string(r[:n-1]), " ") + "…"
}

func TestVisitorTextIsShownLiterally(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	for _, v := range hostile {
		r := record(t)
		l := *r.Lead
		l.Name, l.Company, l.Email, l.Phone, l.Source, l.Message = v, v, v, v, v, v
		r.Lead = &l
		r.Owner.Name = v
		if _, err := b.ch.Send(context.Background(), r, ""); err != nil {
			t.Fatalf("%q: %v", v, err)
		}
		ms := b.f.For(r.ExternalRef)
		if len(ms) != 1 {
			t.Fatalf("%q: %d messages", v, len(ms))
		}
		m := ms[0]
		if len(m.Links) != 0 || len(m.Markup) != 0 || len(m.Actions) != 0 {
			t.Errorf("%q became links %q, markup %q, actions %q", v, m.Links, m.Markup, m.Actions)
		}
		want := literal(v)
		for _, line := range []string{"Name: " + cut(want, 200), "Company: " + cut(want, 200), "Email: " + cut(want, 254),
			"Phone: " + cut(want, 64), "Source: " + cut(want, 100), "Owner: " + cut(want, 100), "New lead: " + cut(want, 200)} {
			if !hasLine(m.Text, line) {
				t.Errorf("%q: the card does not show %q literally:\n%s", v, line, m.Text)
			}
		}
		// The message keeps its lines, as paragraphs of literal text.
		for line := range strings.FieldsFuncSeq(v, func(r rune) bool { return r == '\n' || r == '\r' || r == '\u2028' || r == '\u2029' }) {
			if lit := literal(line); lit != "" && !hasLine(m.Text, lit) {
				t.Errorf("%q: the message's line %q is not shown literally:\n%s", v, lit, m.Text)
			}
		}
		if bytes.ContainsAny(m.Card, "\u202e\u2066\u2069\r") {
			t.Errorf("%q: the card holds a bidirectional control or a CR", v)
		}
	}
}

func TestVisitorTextBreaksNoLimit(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	r := record(t)
	l := *r.Lead
	// Every value at its worst: long, every character escaped or four
	// bytes long, and a 5,000-character message.
	worst := strings.Repeat(`"<&\*𝕏`, 2000)
	l.Name, l.Company, l.Email, l.Phone, l.Source = worst, worst, worst, worst, worst
	l.Message = strings.Repeat("x", 4990) + " <@U1>\n" + worst
	r.Lead = &l
	r.Owner.Name, r.Tier = worst, worst
	if _, err := b.ch.Send(context.Background(), r, ""); err != nil {
		t.Fatal(err)
	}
	req := b.last(t)
	if len(req.Body) > teams.MaxMessageBytes || len(req.Body) > teamsfake.DefaultMaxBytes {
		t.Errorf("%d bytes sent, over the bound", len(req.Body))
	}
	m := b.f.For(r.ExternalRef)
	if len(m) != 1 {
		t.Fatalf("%d messages", len(m))
	}
	if strings.Contains(m[0].Text, strings.Repeat("x", 1000)) || !strings.Contains(m[0].Text, strings.Repeat("x", 990)+"…") {
		t.Error("the message is not cut at 1,000 characters with an ellipsis")
	}
	for line := range strings.SplitSeq(m[0].Text, "\n") {
		if n := utf8.RuneCountInString(line); n > 1100 {
			t.Errorf("a line of %d characters: %.40q...", n, line)
		}
	}
	t.Logf("worst card: %d bytes", len(req.Body))
}

// answer is a server that answers every call with one status, headers and
// body.
func answer(t *testing.T, status int, header map[string]string, body string) destination.Channel {
	t.Helper()
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		for k, v := range header {
			w.Header().Set(k, v)
		}
		w.WriteHeader(status)
		io.WriteString(w, body)
	}))
	t.Cleanup(ts.Close)
	c := &destination.Config{Name: "t", Kind: teams.Kind, BaseURL: ts.URL,
		Values: map[string]string{"webhook_url": vendorOrigin + "/workflows/abc/triggers/manual/paths/invoke?api-version=2016-06-01&sig=s3cr3t-sig"}}
	if err := teams.Spec.Validate(c); err != nil {
		t.Fatal(err)
	}
	ch, err := teams.Spec.NewChannel(c)
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

func TestClassification(t *testing.T) {
	t.Parallel()
	logicApps := func(code string) string { return teamsfake.ErrorBody(code, "a message quoting ada@example.com") }
	cases := []struct {
		name       string
		status     int
		header     map[string]string
		body       string
		class      destination.Class // 0: accepted
		code       string
		uncertain  bool
		retryAfter time.Duration
		holdAll    bool
	}{
		{name: "Accepted", status: 202},
		{name: "OKFromAFlowThatAnswers", status: 200, body: `{"ok":true}`},
		{name: "SchemaMismatchRejects", status: 400, body: logicApps("TriggerInputSchemaMismatch"), class: destination.Rejected, code: "TriggerInputSchemaMismatch"},
		{name: "BadRequestWithoutBodyRejects", status: 400, class: destination.Rejected},
		{name: "FlowTurnedOffHolds", status: 400, body: logicApps("WorkflowTriggerIsNotEnabled"), class: destination.Unauthorized, code: "WorkflowTriggerIsNotEnabled"},
		{name: "NoSignature", status: 401, body: logicApps("DirectApiAuthorizationRequired"), class: destination.Unauthorized, code: "DirectApiAuthorizationRequired"},
		{name: "WrongSignature", status: 401, body: logicApps("DirectApiInvalidAuthorizationSignature"), class: destination.Unauthorized, code: "DirectApiInvalidAuthorizationSignature"},
		{name: "Forbidden", status: 403, class: destination.Unauthorized},
		{name: "WorkflowDeleted", status: 404, body: logicApps("WorkflowNotFound"), class: destination.Unauthorized, code: "WorkflowNotFound"},
		{name: "NotFoundWithoutBody", status: 404, body: "<html>not found</html>", class: destination.Unauthorized},
		{name: "Timeout", status: 408, class: destination.Transient},
		{name: "Conflict", status: 409, class: destination.Transient, uncertain: true},
		{name: "TooLargeRejects", status: 413, body: "Request Entity too large", class: destination.Rejected},
		{name: "ThrottledHolds", status: 429, header: map[string]string{"Retry-After": "7"}, body: logicApps("WorkflowRequestsThrottled"),
			class: destination.Transient, code: "WorkflowRequestsThrottled", retryAfter: 7 * time.Second, holdAll: true},
		{name: "ThrottledWithoutRetryAfter", status: 429, class: destination.Transient, retryAfter: teams.DefaultThrottle, holdAll: true},
		{name: "ServerError", status: 500, body: logicApps("InternalServerError"), class: destination.Transient, code: "InternalServerError", uncertain: true},
		{name: "BadGateway", status: 502, body: "<html>Bad Gateway</html>", class: destination.Transient, uncertain: true},
		{name: "UnavailableWithRetryAfter", status: 503, header: map[string]string{"Retry-After": "30"}, class: destination.Transient,
			uncertain: true, retryAfter: 30 * time.Second, holdAll: true},
		{name: "GatewayTimeout", status: 504, class: destination.Transient, uncertain: true},
		{name: "AnotherSuccess", status: 204, class: destination.Transient, uncertain: true},
		{name: "Redirect", status: 302, header: map[string]string{"Location": "https://login.example/"}, class: destination.Transient, uncertain: true},
		{name: "CodeThatIsNotAnIdentifier", status: 400, body: `{"error":{"code":"Ada Lovelace <ada@example.com>"}}`, class: destination.Rejected},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ch := answer(t, tc.status, tc.header, tc.body)
			_, err := ch.Send(context.Background(), destinationtest.Record(t), "")
			if tc.class == 0 {
				if err != nil {
					t.Fatalf("error %v, want accepted", err)
				}
				return
			}
			e, ok := destination.AsError(err)
			if !ok {
				t.Fatalf("error %v, want a *destination.Error", err)
			}
			if e.Class != tc.class || e.Code != tc.code || e.Uncertain != tc.uncertain || e.RetryAfter != tc.retryAfter || e.HoldAll != tc.holdAll || e.Status != tc.status {
				t.Errorf("got %s code %q uncertain %v retry-after %v hold-all %v status %d; want %s %q %v %v %v %d",
					e.Class, e.Code, e.Uncertain, e.RetryAfter, e.HoldAll, e.Status, tc.class, tc.code, tc.uncertain, tc.retryAfter, tc.holdAll, tc.status)
			}
			for _, secret := range []string{"s3cr3t-sig", "/workflows/abc", "ada@example.com", "Ada Lovelace"} {
				if strings.Contains(err.Error(), secret) {
					t.Errorf("error %q shows %q", err, secret)
				}
			}
		})
	}
}

// TestTheWorkflowsRefusals sends to the stand-in in each state in which
// the workflow refuses a call, as the trigger answers it.
func TestTheWorkflowsRefusals(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		setup func(b *bundle) destination.Channel
		code  string
		class destination.Class
	}{
		{name: "TurnedOff", code: "WorkflowTriggerIsNotEnabled", class: destination.Unauthorized, setup: func(b *bundle) destination.Channel {
			b.f.SetWorkflowState(teamsfake.StateDisabled)
			return b.ch
		}},
		{name: "Suspended", code: "WorkflowTriggerIsNotEnabled", class: destination.Unauthorized, setup: func(b *bundle) destination.Channel {
			b.f.SetWorkflowState(teamsfake.StateSuspended)
			return b.ch
		}},
		{name: "SignatureRegenerated", code: "DirectApiInvalidAuthorizationSignature", class: destination.Unauthorized, setup: func(b *bundle) destination.Channel {
			return b.with(t, strings.Replace(b.config.Value("webhook_url"), teamsfake.DefaultSig, "an-older-signature", 1))
		}},
		{name: "AnotherWorkflow", code: "WorkflowNotFound", class: destination.Unauthorized, setup: func(b *bundle) destination.Channel {
			return b.with(t, strings.Replace(b.config.Value("webhook_url"), teamsfake.DefaultWorkflow, "0000deleted", 1))
		}},
		{name: "URLWithoutItsSig", code: "DirectApiAuthorizationRequired", class: destination.Unauthorized, setup: func(b *bundle) destination.Channel {
			// Validate refuses such a URL; a channel built without it
			// still meets the trigger's answer.
			ch, err := teams.NewChannel(&destination.Config{BaseURL: b.server.URL, Values: map[string]string{
				"webhook_url": vendorOrigin + "/workflows/" + teamsfake.DefaultWorkflow + "/triggers/manual/paths/invoke?api-version=2016-06-01"}})
			if err != nil {
				t.Fatal(err)
			}
			return ch
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, nil)
			ch := tc.setup(b)
			_, err := ch.Send(context.Background(), destinationtest.Record(t), "")
			e, ok := destination.AsError(err)
			if !ok || e.Class != tc.class || e.Code != tc.code {
				t.Fatalf("error %v, want %s %s", err, tc.class, tc.code)
			}
			if strings.Contains(err.Error(), teamsfake.DefaultSig) || strings.Contains(err.Error(), "/workflows/") {
				t.Errorf("error %q shows the URL", err)
			}
			if n := b.f.State().Messages; n != 0 {
				t.Errorf("%d messages taken", n)
			}
		})
	}
}

func (b *bundle) with(t *testing.T, webhookURL string) destination.Channel {
	t.Helper()
	c := *b.config
	c.Values = map[string]string{"webhook_url": webhookURL}
	if err := teams.Spec.Validate(&c); err != nil {
		t.Fatal(err)
	}
	ch, err := teams.Spec.NewChannel(&c)
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

func TestAConnectionThatFailsShowsTheOriginAlone(t *testing.T) {
	t.Parallel()
	ts := httptest.NewServer(http.NotFoundHandler())
	base := ts.URL
	ts.Close() // nothing listens there now
	const hook = vendorOrigin + "/workflows/abc/triggers/manual/paths/invoke?api-version=2016-06-01&sig=s3cr3t-sig"
	ch, err := teams.Spec.NewChannel(&destination.Config{BaseURL: base, Values: map[string]string{"webhook_url": hook}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = ch.Send(context.Background(), destinationtest.Record(t), "")
	if destination.Classify(err) != destination.Transient {
		t.Fatalf("error %v, want transient", err)
	}
	if strings.Contains(err.Error(), "s3cr3t-sig") || strings.Contains(err.Error(), "/workflows/") {
		t.Errorf("error %q shows the URL beyond its origin", err)
	}
}

func TestSendIsObservedForTheDeliveryLog(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	var got []destination.Observation
	ctx := destination.WithObserver(context.Background(), func(o destination.Observation) { got = append(got, o) })
	if _, err := b.ch.Send(ctx, destinationtest.Record(t), ""); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Step != "notification" || got[0].Outcome != "202" {
		t.Errorf("observations %+v, want one notification call answered 202", got)
	}
}

func TestNoCheck(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	if _, ok := b.ch.(destination.Checker); ok {
		t.Error("the teams kind cannot be checked without posting a card, so it must not be a destination.Checker")
	}
	if caps := b.ch.Capabilities(); caps != (destination.ChannelCapabilities{}) {
		t.Errorf("capabilities %+v, want none: the trigger neither finds, updates nor dedupes", caps)
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	const (
		secret = "Zq9-secret_SIG"
		good   = "https://prod-00.westeurope.logic.azure.com:443/workflows/abc/triggers/manual/paths/invoke?api-version=2016-06-01&sp=%2Ftriggers%2Fmanual%2Frun&sv=1.0&sig=" + secret
	)
	cases := []struct {
		name    string
		config  destination.Config
		wantErr string
	}{
		{name: "LogicApps", config: destination.Config{Values: map[string]string{"webhook_url": good}}},
		{name: "PowerPlatform", config: destination.Config{Values: map[string]string{"webhook_url": "https://default0a1b2c3d.0e.environment.api.powerplatform.com:443/powerautomate/automations/direct/workflows/abc/triggers/manual/paths/invoke?api-version=1&sp=%2Ftriggers%2Fmanual%2Frun&sv=1.0&sig=" + secret}}},
		{name: "WithBaseURL", config: destination.Config{BaseURL: "http://127.0.0.1:8089", Values: map[string]string{"webhook_url": good}}},
		{name: "Missing", config: destination.Config{Values: map[string]string{}}, wantErr: "webhook_url must be an absolute http(s) URL"},
		{name: "NotAURL", config: destination.Config{Values: map[string]string{"webhook_url": "teams " + secret}}, wantErr: "webhook_url must be an absolute http(s) URL"},
		{name: "PlainHTTP", config: destination.Config{Values: map[string]string{"webhook_url": strings.Replace(good, "https:", "http:", 1)}}, wantErr: "webhook_url must be an https URL"},
		{name: "NoSig", config: destination.Config{Values: map[string]string{"webhook_url": strings.Replace(good, "&sig="+secret, "", 1)}}, wantErr: "webhook_url has no sig parameter"},
		{name: "RetiredConnector", config: destination.Config{Values: map[string]string{"webhook_url": "https://acme.webhook.office.com/webhookb2/" + secret + "/IncomingWebhook/x/y"}}, wantErr: "Office 365 connector"},
		{name: "RetiredOutlookConnector", config: destination.Config{Values: map[string]string{"webhook_url": "https://outlook.office.com/webhook/" + secret + "/IncomingWebhook/x/y"}}, wantErr: "Office 365 connector"},
		{name: "Fragment", config: destination.Config{Values: map[string]string{"webhook_url": good + "#" + secret}}, wantErr: "no user-info or fragment"},
		{name: "BadBaseURL", config: destination.Config{BaseURL: "http://127.0.0.1:8089/?" + secret, Values: map[string]string{"webhook_url": good}}, wantErr: "base_url must be"},
		{name: "Map", config: destination.Config{Map: destination.Mapping{{Field: "x", Source: "email"}}, Values: map[string]string{"webhook_url": good}}, wantErr: "map:"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := teams.Spec.Validate(&tc.config)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("error %v, want none", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("error %v, want %q", err, tc.wantErr)
			case err != nil && (strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), "logic.azure.com")):
				t.Errorf("error %q shows the URL", err)
			}
		})
	}
	if !teams.Spec.Serves(destination.FamilyChannel) || teams.Spec.Serves(destination.FamilyCRM) || teams.Spec.NewCRM != nil {
		t.Error("the teams kind is a channel, and only a channel")
	}
	if len(teams.Spec.Members) != 1 || teams.Spec.Members[0] != (destination.Member{Name: "webhook_url", Required: true, Secret: true}) {
		t.Errorf("members %+v, want webhook_url, required and secret", teams.Spec.Members)
	}
}

func TestEscape(t *testing.T) {
	t.Parallel()
	cases := map[string]string{
		"Ada Lovelace":            "Ada Lovelace",
		"**x** _y_":               `\*\*x\*\* \_y\_`,
		"[a](http://b.c)":         `\[a\]\(http\:\/\/b\.c\)`,
		"a@b.co":                  `a\@b\.co`,
		"{{DATE(x)}}":             `\{\{DATE\(x\)\}\}`,
		`\`:                       `\\`,
		"a\r\nb\tc\u202ed  e":     "a b cd e",
		"  x  ":                   "x",
		"O'Brien & Söhne <GmbH>":  `O\'Brien \& Söhne \<GmbH\>`,
		"$5 + 1 = 6 ^ ~ | `":      "\\$5 \\+ 1 \\= 6 \\^ \\~ \\| \\`",
		"\xff invalid \x00 bytes": "invalid bytes",
	}
	for in, want := range cases {
		if got := teams.Escape(in, 100); got != want {
			t.Errorf("Escape(%q) = %q, want %q", in, got, want)
		}
	}
	if got := teams.Escape("abcdef", 4); got != "abc…" {
		t.Errorf("Escape cut at 4 = %q, want abc…", got)
	}
	if got := teams.EscapeText("first *line*\r\n\r\n  second\nthird", 100); got != "first \\*line\\*\n\nsecond\n\nthird" {
		t.Errorf("EscapeText = %q", got)
	}
}
