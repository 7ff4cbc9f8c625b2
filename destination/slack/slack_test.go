package slack_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/leadintake/leadintake/destination"
	"github.com/leadintake/leadintake/destination/destinationtest"
	"github.com/leadintake/leadintake/destination/slack"
	"github.com/leadintake/leadintake/destination/slack/slackfake"
	"github.com/leadintake/leadintake/internal/standin"
	"github.com/leadintake/leadintake/lead"
)

const token = slackfake.DefaultToken

// standIn drives the Slack stand-in as the suite asks; webhook: the
// channel posts to an incoming webhook.
type standIn struct {
	f       *slackfake.Server
	webhook bool
}

func (s standIn) Inject(f destinationtest.Fault) {
	targets := []string{slackfake.TargetPost, slackfake.TargetUpdate}
	if s.webhook {
		targets = []string{slackfake.TargetWebhook}
	}
	for _, t := range targets {
		switch {
		case f == destinationtest.LoseAnswer:
			s.f.Script(t, standin.Fault{DropAfterApply: true})
		case f == destinationtest.FailServer:
			s.f.Script(t, standin.Fault{Status: http.StatusServiceUnavailable, Body: "<html><body>503 Service Unavailable</body></html>"})
		case f == destinationtest.RateLimit && s.webhook:
			s.f.Script(t, slackfake.WebhookFault(http.StatusTooManyRequests, "rate_limited"))
		case f == destinationtest.RateLimit:
			s.f.Script(t, slackfake.RateLimitFault(3))
		case f == destinationtest.RejectMessage && s.webhook:
			s.f.Script(t, slackfake.WebhookFault(http.StatusGone, "channel_is_archived"))
		case f == destinationtest.RejectMessage:
			s.f.Script(t, slackfake.ErrorFault("is_archived"))
		}
	}
	switch f {
	case destinationtest.RefuseCredentials:
		s.f.SetRefuseCredentials(true)
	case destinationtest.Restore:
		s.f.SetRefuseCredentials(false)
	}
}

func (s standIn) Messages(ref string) int { return len(s.f.Messages(ref)) }

// Distinct: Slack shows every message it was given; a repeat is a second
// message.
func (s standIn) Distinct(ref string) int { return s.Messages(ref) }

func (s standIn) Text(ref string) string {
	ms := s.f.Messages(ref)
	if len(ms) == 0 {
		return ""
	}
	return ms[len(ms)-1].Display
}

// serve starts a stand-in and returns it and its URL.
func serve(t *testing.T, o *slackfake.Options) (*slackfake.Server, string) {
	t.Helper()
	f := slackfake.New(o)
	ts := httptest.NewServer(f)
	t.Cleanup(ts.Close)
	t.Cleanup(f.Close)
	return f, ts.URL
}

// botConfig is a bot destination's configuration for a stand-in at base.
func botConfig(base string) *destination.Config {
	return &destination.Config{Name: "sales-slack", Kind: slack.Kind, BaseURL: base, Timeout: 5 * time.Second,
		Values: map[string]string{"token": token, "channel": slackfake.DefaultChannel}}
}

// hookConfig is a webhook destination's configuration for a stand-in at
// base.
func hookConfig(base string) *destination.Config {
	return &destination.Config{Name: "sales-slack", Kind: slack.Kind, Timeout: 5 * time.Second,
		Values: map[string]string{"webhook_url": base + slackfake.DefaultWebhook}}
}

func build(t *testing.T, c *destination.Config) destination.Channel {
	t.Helper()
	if err := slack.Spec.Validate(c); err != nil {
		t.Fatal(err)
	}
	ch, err := slack.Spec.NewChannel(c)
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

func TestConformanceBot(t *testing.T) {
	destinationtest.RunChannel(t, destinationtest.ChannelHarness{
		New: func(t *testing.T) (destination.Channel, destinationtest.ChannelSetup) {
			f, base := serve(t, nil)
			return build(t, botConfig(base)), destinationtest.ChannelSetup{StandIn: standIn{f: f}, Secrets: []string{token}}
		},
	})
}

func TestConformanceWebhook(t *testing.T) {
	secret := strings.TrimPrefix(slackfake.DefaultWebhook, "/services/")
	destinationtest.RunChannel(t, destinationtest.ChannelHarness{
		New: func(t *testing.T) (destination.Channel, destinationtest.ChannelSetup) {
			f, base := serve(t, nil)
			return build(t, hookConfig(base)), destinationtest.ChannelSetup{StandIn: standIn{f: f, webhook: true},
				Secrets: []string{secret, "FakeWebhookSecret000000"}}
		},
	})
}

// call is one recorded request.
type call struct {
	Method, Path, Query, Auth, ContentType string
	Body                                   map[string]any
}

// recorder wraps a handler and keeps the requests it serves.
type recorder struct {
	h     http.Handler
	mu    sync.Mutex
	calls []call
}

func (rec *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	c := call{Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Auth: r.Header.Get("Authorization"), ContentType: r.Header.Get("Content-Type")}
	_ = json.Unmarshal(b, &c.Body)
	rec.mu.Lock()
	rec.calls = append(rec.calls, c)
	rec.mu.Unlock()
	r.Body = io.NopCloser(bytes.NewReader(b))
	rec.h.ServeHTTP(w, r)
}

func (rec *recorder) all() []call {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return slices.Clone(rec.calls)
}

func (rec *recorder) last(t *testing.T) call {
	t.Helper()
	calls := rec.all()
	if len(calls) == 0 {
		t.Fatal("no request")
	}
	return calls[len(calls)-1]
}

// recorded serves a stand-in behind a recorder.
func recorded(t *testing.T, o *slackfake.Options) (*slackfake.Server, string, *recorder) {
	t.Helper()
	f := slackfake.New(o)
	rec := &recorder{h: f}
	ts := httptest.NewServer(rec)
	t.Cleanup(ts.Close)
	t.Cleanup(f.Close)
	return f, ts.URL, rec
}

// record is a lead with every fact a message carries, and an owner.
func record() *destination.Record {
	return &destination.Record{
		LeadID: "0190c6a2-7e1a-7b3c-9d4e-000000000001", ExternalRef: "li_Ab3-def_GHIjkl",
		Lead: &lead.Lead{
			Email: "ada@ae.example", Source: "referral", Name: "Ada Lovelace", Company: "Analytical Engines",
			Phone: "+44 20 7946 0000", Website: "https://ae.example", Message: "We would like a demo.\nNext week?",
		},
		Score: 85, Tier: "hot", DuplicateOf: "0190c6a2-7e1a-7b3c-9d4e-00000000000d",
		Owner: &destination.Owner{Name: "alice", Slack: "U024BE7LH", Email: "alice@acme.example"},
	}
}

// personal are record()'s values no error may show.
var personal = []string{"ada@", "Lovelace", "Analytical", "7946", "ae.example", "demo"}

func requireClean(t *testing.T, err error, secrets ...string) {
	t.Helper()
	if err == nil {
		return
	}
	for _, s := range append(append(personal, token), secrets...) {
		if strings.Contains(err.Error(), s) {
			t.Errorf("error %q shows %q", err, s)
		}
	}
}

func asError(t *testing.T, err error) *destination.Error {
	t.Helper()
	e, ok := destination.AsError(err)
	if !ok {
		t.Fatalf("error %v is not a *destination.Error", err)
	}
	return e
}

func TestCapabilities(t *testing.T) {
	_, base := serve(t, nil)
	bot, hook := build(t, botConfig(base)), build(t, hookConfig(base))
	if got := bot.Capabilities(); got != (destination.ChannelCapabilities{Find: true, Update: true}) {
		t.Errorf("bot capabilities %+v", got)
	}
	if got := hook.Capabilities(); got != (destination.ChannelCapabilities{}) {
		t.Errorf("webhook capabilities %+v", got)
	}
	if _, ok := bot.(destination.Checker); !ok {
		t.Error("a bot is not checkable")
	}
	// worker destinations check prints "ok (not checkable without
	// sending)" for a kind without a Checker: the only call a webhook
	// can make posts a message.
	if _, ok := hook.(destination.Checker); ok {
		t.Error("a webhook is checkable: its check would post a message")
	}
}

func TestValidate(t *testing.T) {
	const hookURL = "https://hooks.slack.com/services/T0001/B0001/s3cr3tS3cr3tS3cr3t"
	secrets := []string{"s3cr3t", "xoxb-9999", "xoxp-9999"}
	for _, tc := range []struct {
		name   string
		values map[string]string
		base   string
		mapped bool
		want   string // a part of the error; "" for none
	}{
		{"bot", map[string]string{"token": "xoxb-9999-abc", "channel": "C0123ABCDEF"}, "", false, ""},
		{"bot, private channel of old", map[string]string{"token": "xoxb-9999-abc", "channel": "G0123ABCDEF"}, "", false, ""},
		{"bot with base_url", map[string]string{"token": "xoxb-9999-abc", "channel": "C0123ABCDEF"}, "http://127.0.0.1:9/", false, ""},
		{"webhook", map[string]string{"webhook_url": hookURL}, "", false, ""},
		{"both", map[string]string{"webhook_url": hookURL, "token": "xoxb-9999-abc", "channel": "C0123ABCDEF"}, "", false, "webhook_url and token"},
		{"neither", map[string]string{"channel": "C0123ABCDEF"}, "", false, "webhook_url, or token and channel, is required"},
		{"token without channel", map[string]string{"token": "xoxb-9999-abc"}, "", false, "channel is required"},
		{"channel by name", map[string]string{"token": "xoxb-9999-abc", "channel": "#sales"}, "", false, "channel must be the channel's ID"},
		{"user token", map[string]string{"token": "xoxp-9999-abc", "channel": "C0123ABCDEF"}, "", false, "token must be a bot token"},
		{"token of two lines", map[string]string{"token": "xoxb-9999-abc\nxoxb-9999-def", "channel": "C0123ABCDEF"}, "", false, "token must be one line"},
		{"webhook with channel", map[string]string{"webhook_url": hookURL, "channel": "C0123ABCDEF"}, "", false, "channel:"},
		{"webhook with base_url", map[string]string{"webhook_url": hookURL}, "http://127.0.0.1:9", false, "base_url:"},
		{"webhook not a URL", map[string]string{"webhook_url": "hooks.slack.com/services/s3cr3t"}, "", false, "webhook_url must be an absolute http(s) URL"},
		{"workflow trigger", map[string]string{"webhook_url": "https://hooks.slack.com/triggers/T0001/1/s3cr3t"}, "", false, "Workflow Builder"},
		{"bad base_url", map[string]string{"token": "xoxb-9999-abc", "channel": "C0123ABCDEF"}, "http://127.0.0.1:9/?s3cr3t=1", false, "base_url"},
		{"map", map[string]string{"token": "xoxb-9999-abc", "channel": "C0123ABCDEF"}, "", true, "map:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &destination.Config{Name: "s", Kind: slack.Kind, Values: tc.values, BaseURL: tc.base}
			if tc.mapped {
				c.Map = destination.Mapping{{Field: "x", Source: "email"}}
			}
			err := slack.Spec.Validate(c)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && err == nil:
				t.Fatal("accepted")
			case err != nil && !strings.Contains(err.Error(), tc.want):
				t.Errorf("error %q, want one with %q", err, tc.want)
			}
			if err != nil && strings.Contains(err.Error(), "\n") {
				t.Errorf("error %q is more than one line", err)
			}
			for _, s := range secrets {
				if err != nil && strings.Contains(err.Error(), s) {
					t.Errorf("error %q shows a secret", err)
				}
			}
		})
	}
	for _, m := range slack.Spec.Members {
		if (m.Name == "token" || m.Name == "webhook_url") != m.Secret {
			t.Errorf("member %s: secret %v", m.Name, m.Secret)
		}
		if m.Required {
			t.Errorf("member %s is required: the kind takes webhook_url or token", m.Name)
		}
	}
}

func TestBotPostRequest(t *testing.T) {
	ctx := context.Background()
	f, base, rec := recorded(t, nil)
	ch := build(t, botConfig(base))
	r := record()
	receipt, err := ch.Send(ctx, r, "")
	if err != nil {
		t.Fatal(err)
	}
	c := rec.last(t)
	if c.Method != http.MethodPost || c.Path != "/api/chat.postMessage" {
		t.Errorf("%s %s, want POST /api/chat.postMessage", c.Method, c.Path)
	}
	if c.Auth != "Bearer "+token {
		t.Errorf("Authorization %q", c.Auth)
	}
	if c.ContentType != "application/json; charset=utf-8" {
		t.Errorf("Content-Type %q", c.ContentType)
	}
	if c.Body["channel"] != slackfake.DefaultChannel || c.Body["parse"] != "none" || c.Body["unfurl_links"] != false || c.Body["unfurl_media"] != false {
		t.Errorf("body %v", c.Body)
	}
	md, _ := c.Body["metadata"].(map[string]any)
	payload, _ := md["event_payload"].(map[string]any)
	if md["event_type"] != "leadintake_lead" || payload["lead_id"] != r.LeadID || payload["external_ref"] != r.ExternalRef || len(payload) != 2 {
		t.Errorf("metadata %v", md)
	}
	text, _ := c.Body["text"].(string)
	for _, want := range []string{"hot", "Analytical Engines", "Ada Lovelace", "85", "<@U024BE7LH>"} {
		if !strings.Contains(text, want) {
			t.Errorf("fallback text %q lacks %q", text, want)
		}
	}
	ms := f.Messages(r.ExternalRef)
	if len(ms) != 1 || string(receipt) != ms[0].TS {
		t.Fatalf("receipt %q, messages %+v", receipt, ms)
	}
	// Every fact of the contract, as a person reads them.
	for _, want := range []string{r.LeadID, "hot", "85", "Ada Lovelace", "Analytical Engines", "ada@ae.example", "+44 20 7946 0000",
		"referral", "@U024BE7LH", "possible duplicate of lead " + r.DuplicateOf, "We would like a demo.\nNext week?"} {
		if !strings.Contains(ms[0].Display, want) {
			t.Errorf("the message lacks %q:\n%s", want, ms[0].Display)
		}
	}
	if !slices.Equal(ms[0].Mentions, []string{"@U024BE7LH", "@U024BE7LH"}) || len(ms[0].Links) != 0 {
		t.Errorf("mentions %v, links %v: want the owner's alone", ms[0].Mentions, ms[0].Links)
	}
}

func TestWebhookRequest(t *testing.T) {
	ctx := context.Background()
	f, base, rec := recorded(t, nil)
	ch := build(t, hookConfig(base))
	r := record()
	r.Amendment, r.Amends = 1, "0190c6a2-7e1a-7b3c-9d4e-00000000000a"
	receipt, err := ch.Send(ctx, r, "1700000000.000100")
	if err != nil || receipt != "" {
		t.Fatalf("receipt %q, error %v", receipt, err)
	}
	c := rec.last(t)
	if c.Method != http.MethodPost || c.Path != slackfake.DefaultWebhook || c.Auth != "" {
		t.Errorf("%s %s (Authorization %q)", c.Method, c.Path, c.Auth)
	}
	if _, ok := c.Body["metadata"]; ok {
		t.Error("a webhook's message carries metadata")
	}
	if c.Body["text"] == "" || c.Body["blocks"] == nil {
		t.Errorf("body %v", c.Body)
	}
	ms := f.Messages(r.ExternalRef)
	if len(ms) != 1 {
		t.Fatalf("%d messages", len(ms))
	}
	for _, want := range []string{"Amended hot lead", "amends lead " + r.Amends} {
		if !strings.Contains(ms[0].Display, want) {
			t.Errorf("the message lacks %q:\n%s", want, ms[0].Display)
		}
	}
}

// hostile is a lead whose every value tries to break out: pings, links,
// mentions, formatting, emoji shortcodes, line breaks, a right-to-left
// override, odd Unicode, and a message at the longest the api takes.
func hostile() *destination.Record {
	r := record()
	l := *r.Lead
	l.Name = "<!channel> Eve\r\nBcc: victim@example.com \u202egnp.exe <!here|here> @everyone"
	l.Company = "<https://evil.example|click> & *bold* _it_ ~s~ `code` [link](https://evil.example) :skull: <#C0SECRET|x> <!subteam^S1|@sales>"
	l.Email = "eve+<@U0ADMIN>@evil.example"
	l.Phone = "+1 555 0100\u0000\u0007"
	l.Source = "ads\u2066\u2069 <tel:+15550100|call>"
	l.Message = strings.Repeat("𝒳", 500) + strings.Repeat("x&<>", 700) + strings.Repeat("\n", 50) + " <@U1> tail"
	r.Lead = &l
	return r
}

// limits checks a message's blocks against Slack's limits, and that the
// visitor's values are only ever in plain_text objects.
func limits(t *testing.T, raw json.RawMessage, text string) {
	t.Helper()
	var blocks []slack.Block
	if err := json.Unmarshal(raw, &blocks); err != nil {
		t.Fatal(err)
	}
	if len(blocks) > slack.MaxBlocks {
		t.Errorf("%d blocks", len(blocks))
	}
	if n := utf8.RuneCountInString(text); n > slack.MaxFallbackText {
		t.Errorf("fallback text of %d characters", n)
	}
	check := func(what string, x slack.Text, max int) {
		if n := len(utf16.Encode([]rune(x.Text))); n > max || n == 0 {
			t.Errorf("%s of %d UTF-16 units (at most %d)", what, n, max)
		}
		for _, bad := range []string{"\u202e", "\u2066", "\r", "\u0000", "\u0007"} {
			if strings.Contains(x.Text, bad) {
				t.Errorf("%s holds %q", what, bad)
			}
		}
		if x.Type == "mrkdwn" {
			for _, v := range []string{"Eve", "evil", "skull", "bold", "victim", "ads", "xxx", "tail"} {
				if strings.Contains(x.Text, v) {
					t.Errorf("visitor text %q in a mrkdwn object: %q", v, x.Text)
				}
			}
		}
		if x.Type == "plain_text" && (x.Emoji == nil || *x.Emoji) {
			t.Errorf("%s: a plain_text object that turns :shortcodes: into emoji", what)
		}
		if x.Type == "mrkdwn" && (x.Verbatim == nil || !*x.Verbatim) {
			t.Errorf("%s: a mrkdwn object that is not verbatim", what)
		}
	}
	for i, b := range blocks {
		switch b.Type {
		case "header":
			check(fmt.Sprintf("header %d", i), *b.Text, slack.MaxHeaderText)
		case "section":
			if b.Text != nil {
				check(fmt.Sprintf("section %d", i), *b.Text, slack.MaxSectionText)
			}
			if len(b.Fields) > 10 {
				t.Errorf("section %d has %d fields", i, len(b.Fields))
			}
			for j, f := range b.Fields {
				check(fmt.Sprintf("section %d field %d", i, j), f, slack.MaxFieldText)
			}
		case "context":
			for j, e := range b.Elements {
				check(fmt.Sprintf("context %d element %d", i, j), e, slack.MaxSectionText)
			}
		}
	}
}

// requireInert checks that the visitor's values made no ping, mention or
// link, and show as they were typed.
func requireInert(t *testing.T, m slackfake.Message) {
	t.Helper()
	for _, mention := range m.Mentions {
		if mention != "@U024BE7LH" {
			t.Errorf("the message makes the mention or ping %q", mention)
		}
	}
	if len(m.Links) > 0 {
		t.Errorf("the message makes links %v", m.Links)
	}
	for _, want := range []string{"<!channel> Eve Bcc: victim@example.com gnp.exe <!here|here> @everyone",
		"<https://evil.example|click> & *bold* _it_ ~s~ `code` [link](https://evil.example) :skull:",
		"eve+<@U0ADMIN>@evil.example", "x&<>x&<>", "…"} {
		if !strings.Contains(m.Display, want) {
			t.Errorf("the message does not show %q as typed:\n%.600s", want, m.Display)
		}
	}
}

func TestVisitorTextIsInert(t *testing.T) {
	ctx := context.Background()
	for _, mode := range []string{"bot", "webhook"} {
		t.Run(mode, func(t *testing.T) {
			f, base, rec := recorded(t, nil)
			c := botConfig(base)
			if mode == "webhook" {
				c = hookConfig(base)
			}
			ch := build(t, c)
			r := hostile()
			receipt, err := ch.Send(ctx, r, "")
			if err != nil {
				t.Fatal(err)
			}
			call := rec.last(t)
			raw, _ := json.Marshal(call.Body["blocks"])
			limits(t, raw, call.Body["text"].(string))
			ms := f.Messages(r.ExternalRef)
			if len(ms) != 1 {
				t.Fatalf("%d messages", len(ms))
			}
			requireInert(t, ms[0])
			if mode == "webhook" {
				return
			}
			// The same for an amendment, which updates the message (an
			// edit Slack parses as its client would, unless told not to).
			amended := hostile()
			amended.LeadID, amended.Amendment, amended.Amends = "0190c6a2-7e1a-7b3c-9d4e-0000000000a1", 1, r.LeadID
			if _, err := ch.Send(ctx, amended, receipt); err != nil {
				t.Fatal(err)
			}
			if call := rec.last(t); call.Path != "/api/chat.update" || call.Body["parse"] != "none" {
				t.Fatalf("%s with parse %v", call.Path, call.Body["parse"])
			}
			ms = f.Messages(r.ExternalRef)
			if len(ms) != 1 || ms[0].Edits != 1 {
				t.Fatalf("%d messages, %d edits", len(ms), ms[0].Edits)
			}
			requireInert(t, ms[0])
		})
	}
}

func TestAmendmentUpdatesTheChainsMessage(t *testing.T) {
	ctx := context.Background()
	f, base, rec := recorded(t, nil)
	ch := build(t, botConfig(base))
	r := record()
	first, err := ch.Send(ctx, r, "")
	if err != nil {
		t.Fatal(err)
	}
	amended := record()
	amended.LeadID, amended.Amendment, amended.Amends = "0190c6a2-7e1a-7b3c-9d4e-0000000000a1", 1, r.LeadID
	amended.Lead.Company = "Difference Engines"
	got, err := ch.Send(ctx, amended, first)
	if err != nil || got != first {
		t.Fatalf("receipt %q (the chain's %q), error %v", got, first, err)
	}
	c := rec.last(t)
	md, _ := c.Body["metadata"].(map[string]any)
	payload, _ := md["event_payload"].(map[string]any)
	if c.Path != "/api/chat.update" || c.Body["channel"] != slackfake.DefaultChannel || c.Body["ts"] != string(first) ||
		payload["lead_id"] != amended.LeadID || payload["external_ref"] != r.ExternalRef {
		t.Errorf("%s %v", c.Path, c.Body)
	}
	ms := f.Messages(r.ExternalRef)
	if len(ms) != 1 || ms[0].LeadID != amended.LeadID || !strings.Contains(ms[0].Display, "Difference Engines") {
		t.Fatalf("messages %+v", ms)
	}
	// Found by the amendment's lead id now, no longer by the first's.
	since := time.Now().Add(-time.Minute)
	if rc, found, err := ch.Find(ctx, amended, since); err != nil || !found || rc != first {
		t.Errorf("the amendment: found %v (%q), error %v", found, rc, err)
	}
	if _, found, err := ch.Find(ctx, r, since); err != nil || found {
		t.Errorf("the first lead: found %v, error %v", found, err)
	}
}

func TestAmendmentPostsWhenTheChainsMessageCannotBeUpdated(t *testing.T) {
	ctx := context.Background()
	for _, code := range []string{"message_not_found", "cant_update_message", "edit_window_closed"} {
		t.Run(code, func(t *testing.T) {
			f, base, rec := recorded(t, nil)
			ch := build(t, botConfig(base))
			r := record()
			first, err := ch.Send(ctx, r, "")
			if err != nil {
				t.Fatal(err)
			}
			f.Script(slackfake.TargetUpdate, slackfake.ErrorFault(code))
			amended := record()
			amended.LeadID, amended.Amendment, amended.Amends = "0190c6a2-7e1a-7b3c-9d4e-0000000000a1", 1, r.LeadID
			got, err := ch.Send(ctx, amended, first)
			if err != nil || got == "" || got == first {
				t.Fatalf("receipt %q (the chain's %q), error %v", got, first, err)
			}
			if c := rec.last(t); c.Path != "/api/chat.postMessage" {
				t.Errorf("then %s", c.Path)
			}
			if n := len(f.Messages(r.ExternalRef)); n != 2 {
				t.Errorf("%d messages", n)
			}
		})
	}
	t.Run("archived", func(t *testing.T) {
		f, base, rec := recorded(t, nil)
		ch := build(t, botConfig(base))
		r := record()
		first, err := ch.Send(ctx, r, "")
		if err != nil {
			t.Fatal(err)
		}
		archived := true
		f.SetChannel(slackfake.DefaultChannel, &archived, nil)
		amended := record()
		amended.Amendment = 1
		_, err = ch.Send(ctx, amended, first)
		if e := asError(t, err); e.Class != destination.Rejected || e.Code != "is_inactive" {
			t.Errorf("error %v", err)
		}
		if c := rec.last(t); c.Path != "/api/chat.update" {
			t.Errorf("then %s: an archived channel takes no message", c.Path)
		}
	})
}

func TestUncertainUpdateIsFoundOnlyOnceApplied(t *testing.T) {
	ctx := context.Background()
	f, base := serve(t, nil)
	ch := build(t, botConfig(base))
	r := record()
	first, err := ch.Send(ctx, r, "")
	if err != nil {
		t.Fatal(err)
	}
	amended := record()
	amended.LeadID, amended.Amendment, amended.Amends = "0190c6a2-7e1a-7b3c-9d4e-0000000000a1", 1, r.LeadID
	since := time.Now()

	f.Script(slackfake.TargetUpdate, standin.Fault{DropBeforeApply: true})
	if _, err := ch.Send(ctx, amended, first); err == nil || !asError(t, err).Uncertain {
		t.Fatalf("a dropped connection: %v", err)
	}
	if _, found, err := ch.Find(ctx, amended, since); err != nil || found {
		t.Fatalf("an update that was not applied: found %v, error %v", found, err)
	}
	f.Script(slackfake.TargetUpdate, standin.Fault{DropAfterApply: true})
	if _, err := ch.Send(ctx, amended, first); err == nil {
		t.Fatal("a lost answer: no error")
	}
	if rc, found, err := ch.Find(ctx, amended, since); err != nil || !found || rc != first {
		t.Fatalf("an update that was applied: found %v (%q), error %v", found, rc, err)
	}
}

func TestFindRequest(t *testing.T) {
	ctx := context.Background()
	f, base, rec := recorded(t, nil)
	ch := build(t, botConfig(base))
	r := record()
	since := time.Now()
	rc, err := ch.Send(ctx, r, "")
	if err != nil {
		t.Fatal(err)
	}
	// Another lead of the same reference (a key submitted again), and
	// 450 messages of others after it: the message is on the third page.
	other := record()
	other.LeadID = "0190c6a2-7e1a-7b3c-9d4e-0000000000ff"
	if _, err := ch.Send(ctx, other, ""); err != nil {
		t.Fatal(err)
	}
	flood(t, base, 450)
	got, found, err := ch.Find(ctx, r, since)
	if err != nil || !found || got != rc {
		t.Fatalf("found %v (%q, want %q), error %v", found, got, rc, err)
	}
	var pages []call
	for _, c := range rec.all() {
		if c.Path == "/api/conversations.history" {
			pages = append(pages, c)
		}
	}
	if len(pages) != 3 {
		t.Fatalf("%d pages read, want 3", len(pages))
	}
	for i, c := range pages {
		q, _ := url.ParseQuery(c.Query)
		oldest, _ := strconv.ParseInt(q.Get("oldest"), 10, 64)
		if c.Method != http.MethodGet || c.Auth != "Bearer "+token || q.Get("channel") != slackfake.DefaultChannel ||
			q.Get("include_all_metadata") != "true" || q.Get("limit") != "200" || oldest != since.Add(-2*time.Minute).Unix() ||
			(i == 0) != (q.Get("cursor") == "") {
			t.Errorf("page %d: %s %s", i, c.Method, c.Query)
		}
	}
	// Nothing since a later time; nothing for an unknown reference.
	for _, tc := range []struct {
		r     *destination.Record
		since time.Time
	}{{r, time.Now().Add(time.Hour)}, {func() *destination.Record { x := record(); x.ExternalRef = "li_none"; return x }(), since}} {
		if _, found, err := ch.Find(ctx, tc.r, tc.since); err != nil || found {
			t.Errorf("found %v, error %v", found, err)
		}
	}
	if n := len(f.Messages(r.ExternalRef)); n != 2 {
		t.Errorf("%d messages", n)
	}
}

func TestFindGivesUpOnAHistoryTooLongToTell(t *testing.T) {
	ctx := context.Background()
	_, base := serve(t, nil)
	ch := build(t, botConfig(base))
	defer slack.SetHistoryPages(2)()
	since := time.Now()
	flood(t, base, 401)
	_, found, err := ch.Find(ctx, record(), since)
	if e := asError(t, err); found || e.Class != destination.Transient {
		t.Errorf("found %v, error %v: want a transient error, never \"not found\"", found, err)
	}
}

// flood posts n messages of others to the channel, through its webhook.
func flood(t *testing.T, base string, n int) {
	t.Helper()
	for i := range n {
		resp, err := http.Post(base+slackfake.DefaultWebhook, "application/json", strings.NewReader(fmt.Sprintf(`{"text":"lead %d"}`, i)))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("webhook: %d", resp.StatusCode)
		}
	}
}
