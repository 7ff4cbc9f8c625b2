package slackfake_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leadintake/leadintake/destination/slack/slackfake"
)

// fake serves a stand-in.
func fake(t *testing.T, o *slackfake.Options) (*slackfake.Server, string) {
	t.Helper()
	f := slackfake.New(o)
	ts := httptest.NewServer(f)
	t.Cleanup(ts.Close)
	t.Cleanup(f.Close)
	return f, ts.URL
}

// answer is a Web API answer.
type answer struct {
	Status int
	Header http.Header
	Body   map[string]any
}

func (a answer) err() string {
	if ok, _ := a.Body["ok"].(bool); ok {
		return ""
	}
	e, _ := a.Body["error"].(string)
	return e
}

// api calls method with a JSON body (auth: the Authorization header, ""
// for none).
func api(t *testing.T, base, method, auth string, body any) answer {
	t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest(http.MethodPost, base+"/api/"+method, strings.NewReader(string(b)))
	req.Header.Set("Content-Type", "application/json; charset=utf-8")
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	return do(t, req)
}

func do(t *testing.T, req *http.Request) answer {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	a := answer{Status: resp.StatusCode, Header: resp.Header}
	raw, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(raw, &a.Body); err != nil {
		t.Fatalf("answer %d %q is not JSON", resp.StatusCode, raw)
	}
	return a
}

const bearer = "Bearer " + slackfake.DefaultToken

func plain(s string) map[string]any { return map[string]any{"type": "plain_text", "text": s} }

func section(s string) map[string]any { return map[string]any{"type": "section", "text": plain(s)} }

// message is a good chat.postMessage body with blocks.
func message(blocks ...map[string]any) map[string]any {
	if blocks == nil {
		blocks = []map[string]any{section("hello")}
	}
	return map[string]any{"channel": slackfake.DefaultChannel, "text": "hello", "blocks": blocks,
		"metadata": map[string]any{"event_type": "leadintake_lead", "event_payload": map[string]any{"lead_id": "l1", "external_ref": "li_1"}}}
}

func TestWebAPIRefuses(t *testing.T) {
	long := strings.Repeat("x", 3001)
	many := make([]map[string]any, 51)
	for i := range many {
		many[i] = section("b")
	}
	fields := make([]any, 11)
	for i := range fields {
		fields[i] = plain("f")
	}
	for _, tc := range []struct {
		name, auth string
		body       map[string]any
		o          *slackfake.Options
		want       string
	}{
		{"no token", "", message(), nil, "not_authed"},
		{"wrong token", "Bearer xoxb-wrong", message(), nil, "invalid_auth"},
		{"no scope", bearer, message(), &slackfake.Options{Scopes: []string{"channels:history"}}, "missing_scope"},
		{"unknown channel", bearer, func() map[string]any { m := message(); m["channel"] = "C0NONE0001"; return m }(), nil, "channel_not_found"},
		{"no channel", bearer, func() map[string]any { m := message(); delete(m, "channel"); return m }(), nil, "channel_not_found"},
		{"not a member", bearer, message(), &slackfake.Options{Channels: []slackfake.Channel{{ID: slackfake.DefaultChannel, Name: "leads"}}}, "not_in_channel"},
		{"private, not a member", bearer, message(), &slackfake.Options{Channels: []slackfake.Channel{{ID: slackfake.DefaultChannel, Name: "leads", Private: true}}}, "channel_not_found"},
		{"archived", bearer, message(), &slackfake.Options{Channels: []slackfake.Channel{{ID: slackfake.DefaultChannel, Member: true, Archived: true}}}, "is_archived"},
		{"no text", bearer, map[string]any{"channel": slackfake.DefaultChannel}, nil, "no_text"},
		{"51 blocks", bearer, message(many...), nil, "invalid_blocks"},
		{"long section", bearer, message(section(long)), nil, "invalid_blocks"},
		{"long header", bearer, message(map[string]any{"type": "header", "text": plain(strings.Repeat("h", 151))}), nil, "invalid_blocks"},
		{"mrkdwn header", bearer, message(map[string]any{"type": "header", "text": map[string]any{"type": "mrkdwn", "text": "h"}}), nil, "invalid_blocks"},
		{"11 fields", bearer, message(map[string]any{"type": "section", "fields": fields}), nil, "invalid_blocks"},
		{"long field", bearer, message(map[string]any{"type": "section", "fields": []any{plain(strings.Repeat("f", 2001))}}), nil, "invalid_blocks"},
		{"empty text", bearer, message(section("")), nil, "invalid_blocks"},
		{"empty section", bearer, message(map[string]any{"type": "section"}), nil, "invalid_blocks"},
		{"unknown block", bearer, message(map[string]any{"type": "marquee"}), nil, "invalid_blocks"},
		{"unknown member", bearer, message(map[string]any{"type": "divider", "color": "red"}), nil, "invalid_blocks"},
		{"emoji on mrkdwn", bearer, message(map[string]any{"type": "section", "text": map[string]any{"type": "mrkdwn", "text": "x", "emoji": true}}), nil, "invalid_blocks"},
		{"blocks not an array", bearer, func() map[string]any { m := message(); m["blocks"] = "{"; return m }(), nil, "invalid_blocks_format"},
		{"blocks too long together", bearer, message(section(strings.Repeat("y", 3000)), section(strings.Repeat("y", 3000)),
			section(strings.Repeat("y", 3000)), section(strings.Repeat("y", 3000)), section("y")), nil, "msg_blocks_too_long"},
		{"text too long", bearer, func() map[string]any { m := message(); m["text"] = strings.Repeat("t", 40001); return m }(), nil, "msg_too_long"},
		{"bad metadata", bearer, func() map[string]any { m := message(); m["metadata"] = map[string]any{"event_type": "x y"}; return m }(), nil, "invalid_metadata_format"},
		{"metadata too large", bearer, func() map[string]any {
			m := message()
			m["metadata"] = map[string]any{"event_type": "e", "event_payload": map[string]any{"x": strings.Repeat("m", 9000)}}
			return m
		}(), nil, "metadata_too_large"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, base := fake(t, tc.o)
			a := api(t, base, "chat.postMessage", tc.auth, tc.body)
			if a.Status != http.StatusOK || a.err() != tc.want {
				t.Errorf("%d %v, want 200 %s", a.Status, a.Body, tc.want)
			}
			if n := f.State().Messages; n != 0 {
				t.Errorf("%d messages kept", n)
			}
		})
	}
}

func TestRevokedTokenUntilRestored(t *testing.T) {
	f, base := fake(t, nil)
	f.SetRefuseCredentials(true)
	if a := api(t, base, "chat.postMessage", bearer, message()); a.err() != "token_revoked" {
		t.Errorf("revoked: %v", a.Body)
	}
	if a := api(t, base, "auth.test", bearer, nil); a.err() != "token_revoked" {
		t.Errorf("revoked: %v", a.Body)
	}
	f.SetRefuseCredentials(false)
	if a := api(t, base, "chat.postMessage", bearer, message()); a.err() != "" {
		t.Errorf("restored: %v", a.Body)
	}
}

func TestPostAndHistory(t *testing.T) {
	f, base := fake(t, nil)
	var ts []string
	for i := range 5 {
		m := message()
		m["metadata"] = map[string]any{"event_type": "leadintake_lead", "event_payload": map[string]any{"lead_id": fmt.Sprint(i), "external_ref": "li_1"}}
		a := api(t, base, "chat.postMessage", bearer, m)
		if a.err() != "" || a.Body["channel"] != slackfake.DefaultChannel {
			t.Fatal(a.Body)
		}
		ts = append(ts, a.Body["ts"].(string))
	}
	if !slices.IsSorted(ts) {
		t.Errorf("ts out of order: %v", ts)
	}
	history := func(q url.Values) answer {
		req, _ := http.NewRequest(http.MethodGet, base+"/api/conversations.history?"+q.Encode(), nil)
		req.Header.Set("Authorization", bearer)
		return do(t, req)
	}
	// Pages of two, newest first, metadata only when asked for.
	q := url.Values{"channel": {slackfake.DefaultChannel}, "limit": {"2"}, "oldest": {ts[0]}}
	var got []string
	for {
		a := history(q)
		if a.err() != "" {
			t.Fatal(a.Body)
		}
		for _, m := range a.Body["messages"].([]any) {
			m := m.(map[string]any)
			if _, ok := m["metadata"]; ok {
				t.Error("metadata without include_all_metadata")
			}
			got = append(got, m["ts"].(string))
		}
		next := a.Body["response_metadata"].(map[string]any)["next_cursor"].(string)
		more := a.Body["has_more"].(bool)
		if more != (next != "") {
			t.Fatalf("has_more %v with next_cursor %q", more, next)
		}
		if !more {
			break
		}
		q.Set("cursor", next)
	}
	// oldest is exclusive unless inclusive.
	if want := []string{ts[4], ts[3], ts[2], ts[1]}; !slices.Equal(got, want) {
		t.Errorf("history %v, want %v", got, want)
	}
	q = url.Values{"channel": {slackfake.DefaultChannel}, "oldest": {ts[0]}, "inclusive": {"true"}, "latest": {ts[1]}, "include_all_metadata": {"true"}}
	a := history(q)
	msgs := a.Body["messages"].([]any)
	if len(msgs) != 2 || msgs[1].(map[string]any)["metadata"].(map[string]any)["event_type"] != "leadintake_lead" {
		t.Errorf("inclusive history %v", a.Body)
	}
	for _, tc := range []struct {
		q    url.Values
		want string
	}{
		{url.Values{"channel": {slackfake.DefaultChannel}, "cursor": {"garbage"}}, "invalid_cursor"},
		{url.Values{"channel": {slackfake.DefaultChannel}, "oldest": {"yesterday"}}, "invalid_ts_oldest"},
		{url.Values{"channel": {"C0NONE0001"}}, "channel_not_found"},
		{url.Values{"channel": {"#leads"}}, "channel_not_found"},
	} {
		if a := history(tc.q); a.err() != tc.want {
			t.Errorf("%v: %v, want %s", tc.q, a.Body, tc.want)
		}
	}
	if n := len(f.Messages("li_1")); n != 5 {
		t.Errorf("%d messages for li_1", n)
	}
}

func TestHistoryScopes(t *testing.T) {
	for _, tc := range []struct {
		private bool
		scopes  []string
		want    string
	}{
		{false, []string{"chat:write", "groups:history"}, "missing_scope"},
		{true, []string{"chat:write", "channels:history"}, "missing_scope"},
		{true, []string{"chat:write", "groups:history"}, ""},
	} {
		_, base := fake(t, &slackfake.Options{Scopes: tc.scopes, Channels: []slackfake.Channel{{ID: slackfake.DefaultChannel, Private: tc.private, Member: true}}})
		req, _ := http.NewRequest(http.MethodGet, base+"/api/conversations.history?channel="+slackfake.DefaultChannel, nil)
		req.Header.Set("Authorization", bearer)
		if a := do(t, req); a.err() != tc.want {
			t.Errorf("private %v, scopes %v: %v", tc.private, tc.scopes, a.Body)
		}
	}
}

func TestUpdate(t *testing.T) {
	f, base := fake(t, nil)
	a := api(t, base, "chat.postMessage", bearer, message())
	ts := a.Body["ts"].(string)
	up := func(body map[string]any) answer {
		body["channel"], body["ts"] = cmpOr(body["channel"], slackfake.DefaultChannel), cmpOr(body["ts"], ts)
		return api(t, base, "chat.update", bearer, body)
	}
	for _, tc := range []struct {
		body map[string]any
		want string
	}{
		{map[string]any{"ts": "1.000001", "text": "x"}, "message_not_found"},
		{map[string]any{"channel": "#leads", "text": "x"}, "channel_not_found"},
		{map[string]any{"text": strings.Repeat("t", 4001)}, "msg_too_long"},
		{map[string]any{"blocks": []any{section(strings.Repeat("x", 3001))}}, "invalid_blocks"},
	} {
		if a := up(tc.body); a.err() != tc.want {
			t.Errorf("%v: %v, want %s", tc.body, a.Body, tc.want)
		}
	}
	md := map[string]any{"event_type": "leadintake_lead", "event_payload": map[string]any{"lead_id": "l2", "external_ref": "li_1"}}
	if a := up(map[string]any{"text": "amended <!channel>", "blocks": []any{section("amended")}, "metadata": md, "parse": "none"}); a.err() != "" {
		t.Fatal(a.Body)
	}
	ms := f.Messages("li_1")
	if len(ms) != 1 || ms[0].Edits != 1 || ms[0].LeadID != "l2" || !strings.Contains(ms[0].Display, "amended") {
		t.Fatalf("%+v", ms)
	}
	if !slices.Equal(ms[0].Mentions, []string{"!channel"}) {
		t.Errorf("mentions %v", ms[0].Mentions)
	}
	// Without parse, an edit is parsed as the client does: a bare
	// @channel pings.
	if a := up(map[string]any{"text": "amended @channel"}); a.err() != "" {
		t.Fatal(a.Body)
	}
	if ms := f.Messages("li_1"); !slices.Equal(ms[0].Mentions, []string{"!channel"}) || ms[0].Blocks != nil {
		t.Errorf("mentions %v, blocks %s", ms[0].Mentions, ms[0].Blocks)
	}
	// A webhook's message is not the bot's.
	if resp, err := http.Post(base+slackfake.DefaultWebhook, "application/json", strings.NewReader(`{"text":"hi"}`)); err != nil || resp.StatusCode != 200 {
		t.Fatal(resp, err)
	}
	hook := f.Messages("")[1]
	if a := up(map[string]any{"ts": hook.TS, "text": "x"}); a.err() != "cant_update_message" {
		t.Errorf("%v", a.Body)
	}
	archived := true
	f.SetChannel(slackfake.DefaultChannel, &archived, nil)
	if a := up(map[string]any{"text": "x"}); a.err() != "is_inactive" {
		t.Errorf("%v", a.Body)
	}
}

func cmpOr(a any, b string) any {
	if a != nil {
		return a
	}
	return b
}

func TestMentionsAndLinks(t *testing.T) {
	f, base := fake(t, nil)
	blocks := []map[string]any{
		{"type": "section", "text": map[string]any{"type": "mrkdwn", "text": "<@U1> <!here> <https://a.example|a> &lt;!channel&gt; https://b.example @everyone", "verbatim": true}},
		{"type": "section", "text": plain("<@U2> <!channel> <https://c.example|c>")},
		{"type": "context", "elements": []any{map[string]any{"type": "mrkdwn", "text": "@here https://d.example"}}},
	}
	m := message(blocks...)
	m["text"] = "&lt;@U3&gt; *bold*"
	if a := api(t, base, "chat.postMessage", bearer, m); a.err() != "" {
		t.Fatal(a.Body)
	}
	got := f.Messages("li_1")[0]
	if !slices.Equal(got.Mentions, []string{"@U1", "!here", "!here"}) {
		t.Errorf("mentions %v", got.Mentions)
	}
	if !slices.Equal(got.Links, []string{"https://a.example", "https://d.example"}) {
		t.Errorf("links %v", got.Links)
	}
	for _, want := range []string{"<@U3> bold", "@U1 @here a <!channel> https://b.example @everyone", "<@U2> <!channel> <https://c.example|c>"} {
		if !strings.Contains(got.Display, want) {
			t.Errorf("display lacks %q:\n%s", want, got.Display)
		}
	}
}

func TestChannelLimit(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	f, base := fake(t, &slackfake.Options{ChannelLimit: true, Now: func() time.Time { return now }})
	if a := api(t, base, "chat.postMessage", bearer, message()); a.err() != "" {
		t.Fatal(a.Body)
	}
	a := api(t, base, "chat.postMessage", bearer, message())
	if a.Status != http.StatusTooManyRequests || a.err() != "ratelimited" || a.Header.Get("Retry-After") != "1" {
		t.Errorf("%d %v %v", a.Status, a.Header, a.Body)
	}
	resp, _ := http.Post(base+slackfake.DefaultWebhook, "application/json", strings.NewReader(`{"text":"hi"}`))
	if b, _ := io.ReadAll(resp.Body); resp.StatusCode != 429 || string(b) != "rate_limited" || resp.Header.Get("Retry-After") != "1" {
		t.Errorf("webhook: %d %q", resp.StatusCode, b)
	}
	now = now.Add(time.Second)
	if a := api(t, base, "chat.postMessage", bearer, message()); a.err() != "" {
		t.Errorf("a second later: %v", a.Body)
	}
	f.SetChannelLimit(false)
	if a := api(t, base, "chat.postMessage", bearer, message()); a.err() != "" {
		t.Errorf("limit off: %v", a.Body)
	}
}

func TestWebhook(t *testing.T) {
	post := func(t *testing.T, base, path, ct, body string) (int, string, string) {
		t.Helper()
		resp, err := http.Post(base+path, ct, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), resp.Header.Get("Content-Type")
	}
	good := `{"text":"hi","blocks":[{"type":"context","elements":[{"type":"mrkdwn","text":"Lead ` + "`l1` · ref `li_9`" + `","verbatim":true}]}]}`
	f, base := fake(t, nil)
	if status, body, ct := post(t, base, slackfake.DefaultWebhook, "application/json", good); status != 200 || body != "ok" || !strings.HasPrefix(ct, "text/plain") {
		t.Fatalf("%d %q %s", status, body, ct)
	}
	if status, body, _ := post(t, base, slackfake.DefaultWebhook, "application/x-www-form-urlencoded", "payload="+url.QueryEscape(good)); status != 200 || body != "ok" {
		t.Fatalf("form: %d %q", status, body)
	}
	if ms := f.Messages("li_9"); len(ms) != 2 || !ms[0].Webhook {
		t.Errorf("messages by the marker: %+v", ms)
	}
	for _, tc := range []struct {
		name, path, body string
		status           int
		want             string
	}{
		{"unknown webhook", "/services/T0FAKE0001/B0FAKE0001/wrong", good, 404, "no_service"},
		{"not JSON", slackfake.DefaultWebhook, "{", 400, "invalid_payload"},
		{"no text", slackfake.DefaultWebhook, `{}`, 400, "no_text"},
		{"bad blocks", slackfake.DefaultWebhook, `{"text":"x","blocks":[{"type":"marquee"}]}`, 400, "invalid_blocks"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if status, body, _ := post(t, base, tc.path, "application/json", tc.body); status != tc.status || body != tc.want {
				t.Errorf("%d %q, want %d %s", status, body, tc.status, tc.want)
			}
		})
	}
	f.SetRefuseCredentials(true)
	if status, body, _ := post(t, base, slackfake.DefaultWebhook, "application/json", good); status != 404 || body != "no_service" {
		t.Errorf("revoked: %d %q", status, body)
	}
	f.SetRefuseCredentials(false)
	archived := true
	f.SetChannel(slackfake.DefaultChannel, &archived, nil)
	if status, body, _ := post(t, base, slackfake.DefaultWebhook, "application/json", good); status != 410 || body != "channel_is_archived" {
		t.Errorf("archived: %d %q", status, body)
	}
	if n := len(f.Messages("li_9")); n != 2 {
		t.Errorf("%d messages after refusals", n)
	}
}

func TestAuthTest(t *testing.T) {
	_, base := fake(t, &slackfake.Options{Scopes: []string{"chat:write", "groups:history"}})
	req, _ := http.NewRequest(http.MethodPost, base+"/api/auth.test", nil)
	req.Header.Set("Authorization", bearer)
	a := do(t, req)
	if a.err() != "" || a.Header.Get("X-OAuth-Scopes") != "chat:write,groups:history" || a.Body["bot_id"] == nil {
		t.Errorf("%v %v", a.Header, a.Body)
	}
	// The token as a form's argument.
	req, _ = http.NewRequest(http.MethodPost, base+"/api/auth.test", strings.NewReader("token="+url.QueryEscape(slackfake.DefaultToken)))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if a := do(t, req); a.err() != "" {
		t.Errorf("form token: %v", a.Body)
	}
	// A JSON body without its charset: accepted, with Slack's warning.
	req, _ = http.NewRequest(http.MethodPost, base+"/api/auth.test", strings.NewReader("{}"))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", bearer)
	if a := do(t, req); a.err() != "" || a.Body["warning"] != "missing_charset" {
		t.Errorf("no charset: %v", a.Body)
	}
}

func TestControlAPI(t *testing.T) {
	f, base := fake(t, nil)
	post := func(path, body string) int {
		resp, err := http.Post(base+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if s := post("/_standin/script", `{"target":"post","faults":[{"status":429,"retry_after":"2","body":"{\"ok\":false,\"error\":\"ratelimited\"}"}]}`); s != 204 {
		t.Fatalf("script: %d", s)
	}
	if a := api(t, base, "chat.postMessage", bearer, message()); a.Status != 429 || a.err() != "ratelimited" {
		t.Errorf("scripted: %d %v", a.Status, a.Body)
	}
	if s := post("/_standin/script", `{"target":"nope","faults":[]}`); s != 400 {
		t.Errorf("unknown target: %d", s)
	}
	if s := post("/_standin/credentials", `{"refuse":true}`); s != 204 || !f.State().RefusingCredentials {
		t.Errorf("credentials: %d", s)
	}
	if s := post("/_standin/credentials", `{"refuse":false,"typo":1}`); s != 400 {
		t.Errorf("a typo: %d", s)
	}
	if s := post("/_standin/limit", `{"channel_per_second":true}`); s != 204 || !f.State().ChannelLimit {
		t.Errorf("limit: %d", s)
	}
	if s := post("/_standin/channels", `{"channel":"`+slackfake.DefaultChannel+`","archived":true}`); s != 204 {
		t.Errorf("channels: %d", s)
	}
	if s := post("/_standin/channels", `{"channel":"C0NONE0001","archived":true}`); s != 400 {
		t.Errorf("an unknown channel: %d", s)
	}
	if s := post("/_standin/reset", ``); s != 204 {
		t.Errorf("reset: %d", s)
	}
	if a := api(t, base, "chat.postMessage", bearer, message()); a.err() != "" {
		t.Errorf("after the reset: %v", a.Body)
	}
	resp, err := http.Get(base + "/_standin/state")
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var st slackfake.State
	if err := json.Unmarshal(raw, &st); err != nil || st.Messages != 1 || st.ByChannel[slackfake.DefaultChannel] != 1 || st.Requests["post"] != 1 {
		t.Errorf("state %s", raw)
	}
	if strings.Contains(string(raw), "hello") {
		t.Errorf("the state shows a message's text: %s", raw)
	}
}
