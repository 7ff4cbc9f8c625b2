// Package slackfake stands in for Slack as the slack destination kind
// calls it: an http.Handler (Server) that keeps channels and messages in
// memory and speaks Slack's paths, auth, answers and errors:
//
//	POST /api/chat.postMessage           a bot's message (JSON or form)
//	POST /api/chat.update                edit a bot's message
//	GET  /api/conversations.history      a channel's messages, newest first
//	                                     (oldest, latest, inclusive, limit,
//	                                     cursor, include_all_metadata)
//	GET  /api/auth.test                  who the token is (X-OAuth-Scopes)
//	POST /services/{team}/{bot}/{secret} an incoming webhook (200 "ok")
//
// Web API answers are Slack's envelope, {"ok": true, ...} or {"ok": false,
// "error": code} with HTTP 200, and 429 with Retry-After for ratelimited;
// webhooks answer plain text with Slack's statuses (400 invalid_payload,
// no_text, invalid_blocks; 404 no_service, channel_not_found; 410
// channel_is_archived; 429 rate_limited).
//
// It refuses what Slack refuses: no token (not_authed), a wrong one
// (invalid_auth), one revoked until restored (token_revoked; a webhook:
// 404 no_service), a token without the method's scope (missing_scope), an
// unknown channel (channel_not_found), one the bot is not in
// (not_in_channel), an archived one (is_archived; an edit there:
// is_inactive), a message without text or blocks (no_text), blocks Block
// Kit refuses (invalid_blocks: an unknown block, member or text type, a
// header over 150 characters, a section text over 3,000, a field over
// 2,000, more than 10 fields, more than 50 blocks, an empty text),
// blocks too long together (msg_blocks_too_long), a text too long
// (msg_too_long: 40,000 characters posted, 4,000 in an edit), bad metadata
// (invalid_metadata_format, metadata_too_large), an edit of a message that
// is not there (message_not_found) or not the bot's (cant_update_message),
// and, once switched on, more than about one message a second in a channel
// (ratelimited with Retry-After).
//
// Each message is kept with its reference: its metadata's external_ref,
// or for a message without metadata (a webhook's) the marker RefMarker; and
// with what a person reads of it (Display, entities decoded) and the
// mentions and links it makes, so that a test sees an injected ping.
//
// It misbehaves on demand through an internal/standin Kit, one target per
// endpoint (TargetPost, TargetUpdate, TargetHistory, TargetAuth,
// TargetWebhook), and is driven over HTTP under /_standin (script, chaos,
// reset, credentials, limit, channels, state). It logs method, route,
// status and fault: never a path (a webhook's holds its secret) or a text.
package slackfake

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"mime"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/leadintake/leadintake/internal/standin"
)

// The targets, one per endpoint.
const (
	TargetPost    = "post"    // POST /api/chat.postMessage
	TargetUpdate  = "update"  // POST /api/chat.update
	TargetHistory = "history" // GET /api/conversations.history
	TargetAuth    = "auth"    // GET /api/auth.test
	TargetWebhook = "webhook" // POST /services/...
)

// Targets are the stand-in's targets.
var Targets = []string{TargetPost, TargetUpdate, TargetHistory, TargetAuth, TargetWebhook}

// Defaults of a Server's Options.
const (
	DefaultToken   = "xoxb-1111111111-2222222222222-FakeFakeFakeFakeFakeFake"
	DefaultChannel = "C0LEADS0001"
	// DefaultWebhook is the path of the default incoming webhook, which
	// posts to DefaultChannel.
	DefaultWebhook = "/services/T0FAKE0001/B0FAKE0001/FakeWebhookSecret000000"
)

// DefaultScopes are the bot token's scopes by default: what the kind
// needs.
var DefaultScopes = []string{"chat:write", "channels:history", "groups:history"}

// Channel is a conversation of the workspace.
type Channel struct {
	ID   string
	Name string
	// Private: a private channel (groups:history to read it; unknown to a
	// bot that is not in it).
	Private  bool
	Archived bool
	// Member: the bot is in the channel.
	Member bool
}

// Options configure a Server. The zero Options accept DefaultToken with
// DefaultScopes, have one public channel, DefaultChannel, the bot in it,
// and one webhook, DefaultWebhook, posting to it; no rate limit.
type Options struct {
	Token  string
	Scopes []string
	// Channels are the workspace's channels (DefaultChannel when none).
	Channels []Channel
	// Webhooks are the incoming webhooks: path (/services/T…/B…/secret)
	// → channel id. DefaultWebhook → the first channel when nil.
	Webhooks map[string]string
	// ChannelLimit: about one message a second per channel, as Slack
	// allows; more is ratelimited (Retry-After: 1).
	ChannelLimit bool
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	// Logger logs each request (method, route, status, fault); none when
	// nil.
	Logger *slog.Logger
}

// Message is a message the stand-in holds.
type Message struct {
	Channel string
	TS      string
	// Webhook: posted by an incoming webhook, not by the bot.
	Webhook  bool
	Text     string
	Blocks   json.RawMessage
	Metadata json.RawMessage
	// Ref is the reference the message is for: its metadata's
	// external_ref, else the RefMarker in its blocks; "" for none.
	Ref string
	// LeadID is the metadata's lead_id.
	LeadID string
	// Edits counts the chat.update calls that changed it.
	Edits int
	// Display is what a person reads: the text, then the blocks' texts,
	// one a line, entities decoded.
	Display string
	// Mentions are the mentions and pings the message makes (@U…,
	// !channel, !here, !subteam^…), Links the links (URLs, #C…).
	Mentions []string
	Links    []string
}

// State is what the stand-in holds, without personal data.
type State struct {
	Messages            int            `json:"messages"`
	ByChannel           map[string]int `json:"by_channel"`
	Requests            map[string]int `json:"requests"`
	RefusingCredentials bool           `json:"refusing_credentials"`
	ChannelLimit        bool           `json:"channel_limit"`
}

// Server is the stand-in. Its methods are safe for concurrent use.
type Server struct {
	kit  *standin.Kit
	opts Options
	mux  *http.ServeMux

	mu       sync.Mutex
	channels map[string]*Channel
	messages []*Message
	seq      int64
	refuse   bool
	limit    bool
	lastPost map[string]time.Time
	requests map[string]int
}

// New returns a Server.
func New(o *Options) *Server {
	s := &Server{kit: standin.New(Targets...)}
	if o != nil {
		s.opts = *o
	}
	if s.opts.Token == "" {
		s.opts.Token = DefaultToken
	}
	if s.opts.Scopes == nil {
		s.opts.Scopes = DefaultScopes
	}
	if len(s.opts.Channels) == 0 {
		s.opts.Channels = []Channel{{ID: DefaultChannel, Name: "leads", Member: true}}
	}
	if s.opts.Webhooks == nil {
		s.opts.Webhooks = map[string]string{DefaultWebhook: s.opts.Channels[0].ID}
	}
	if s.opts.Now == nil {
		s.opts.Now = time.Now
	}
	s.resetState()

	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/chat.postMessage", s.api(TargetPost, s.postMessage))
	mux.HandleFunc("POST /api/chat.update", s.api(TargetUpdate, s.update))
	mux.HandleFunc("/api/conversations.history", s.api(TargetHistory, s.history))
	mux.HandleFunc("/api/auth.test", s.api(TargetAuth, s.authTest))
	mux.HandleFunc("/api/{method}", func(w http.ResponseWriter, r *http.Request) {
		writeAnswer(w, r, apiFail("unknown_method"))
	})
	mux.HandleFunc("POST /services/{team}/{bot}/{secret}", s.webhook)
	s.kit.Routes(mux, "/_standin", s.resetState)
	mux.HandleFunc("POST /_standin/credentials", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Refuse bool `json:"refuse"`
		}
		if err := standin.DecodeStrict(r, &req); err != nil {
			standin.ControlError(w, err)
			return
		}
		s.SetRefuseCredentials(req.Refuse)
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("POST /_standin/limit", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			ChannelPerSecond bool `json:"channel_per_second"`
		}
		if err := standin.DecodeStrict(r, &req); err != nil {
			standin.ControlError(w, err)
			return
		}
		s.SetChannelLimit(req.ChannelPerSecond)
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("POST /_standin/channels", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Channel  string `json:"channel"`
			Archived *bool  `json:"archived"`
			Member   *bool  `json:"member"`
		}
		if err := standin.DecodeStrict(r, &req); err != nil {
			standin.ControlError(w, err)
			return
		}
		if !s.SetChannel(req.Channel, req.Archived, req.Member) {
			standin.ControlError(w, fmt.Errorf("no channel %q", req.Channel))
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET /_standin/state", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(s.State())
	})
	s.mux = mux
	return s
}

// ServeHTTP serves Slack's endpoints and the control API.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// Kit is the stand-in's misbehaviour: Script and SetChaos per target.
func (s *Server) Kit() *standin.Kit { return s.kit }

// Script queues faults for target's next requests.
func (s *Server) Script(target string, faults ...standin.Fault) { s.kit.Script(target, faults...) }

// Close ends hung requests (see standin.Kit.Close).
func (s *Server) Close() { s.kit.Close() }

// SetRefuseCredentials refuses every call as Slack refuses a revoked token
// (token_revoked) or a removed webhook (404 no_service), or accepts them
// again.
func (s *Server) SetRefuseCredentials(refuse bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refuse = refuse
}

// SetChannelLimit switches the limit of about one message a second per
// channel on or off.
func (s *Server) SetChannelLimit(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.limit = on
}

// SetChannel archives or restores the channel id, or takes the bot in or
// out of it (nil: unchanged). It reports whether the channel exists.
func (s *Server) SetChannel(id string, archived, member *bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.channels[id]
	if !ok {
		return false
	}
	if archived != nil {
		c.Archived = *archived
	}
	if member != nil {
		c.Member = *member
	}
	return true
}

// Reset forgets the messages, the counts, the faults, the refusal and the
// channels' changes.
func (s *Server) Reset() {
	s.kit.Reset()
	s.resetState()
}

func (s *Server) resetState() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.channels = map[string]*Channel{}
	for _, c := range s.opts.Channels {
		s.channels[c.ID] = &c
	}
	s.messages, s.seq, s.refuse, s.limit = nil, 0, false, s.opts.ChannelLimit
	s.lastPost, s.requests = map[string]time.Time{}, map[string]int{}
}

// Messages returns copies of the messages for the reference ref, oldest
// first (all of them for ref "").
func (s *Server) Messages(ref string) []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Message
	for _, m := range s.messages {
		if ref == "" || m.Ref == ref {
			c := *m
			c.Mentions, c.Links = slices.Clone(m.Mentions), slices.Clone(m.Links)
			out = append(out, c)
		}
	}
	return out
}

// State returns the counts.
func (s *Server) State() State {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := State{Messages: len(s.messages), ByChannel: map[string]int{}, Requests: maps.Clone(s.requests),
		RefusingCredentials: s.refuse, ChannelLimit: s.limit}
	for _, m := range s.messages {
		st.ByChannel[m.Channel]++
	}
	return st
}

// RateLimitFault is Slack's answer to a Web API call beyond its limit: 429,
// Retry-After, {"ok": false, "error": "ratelimited"}.
func RateLimitFault(retryAfter int) standin.Fault {
	return standin.Fault{Status: http.StatusTooManyRequests, RetryAfter: strconv.Itoa(retryAfter), Body: `{"ok":false,"error":"ratelimited"}`}
}

// ErrorFault is a Web API answer {"ok": false, "error": code} (HTTP 200),
// nothing applied.
func ErrorFault(code string) standin.Fault {
	return standin.Fault{Status: http.StatusOK, Body: `{"ok":false,"error":"` + code + `"}`}
}

// WebhookFault is a webhook's error: status and its plain-text code.
func WebhookFault(status int, code string) standin.Fault {
	f := standin.Fault{Status: status, Body: code}
	if status == http.StatusTooManyRequests {
		f.RetryAfter = "1"
	}
	return f
}

// answer is a Web API answer: its status, headers and JSON body.
type answer struct {
	status int
	header http.Header
	body   map[string]any
}

func apiOK(body map[string]any) answer {
	if body == nil {
		body = map[string]any{}
	}
	body["ok"] = true
	return answer{status: http.StatusOK, body: body}
}

func apiFail(code string) answer {
	return answer{status: http.StatusOK, body: map[string]any{"ok": false, "error": code}}
}

func writeAnswer(w http.ResponseWriter, _ *http.Request, a answer) {
	for k, v := range a.header {
		w.Header()[k] = v
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(a.status)
	json.NewEncoder(w).Encode(a.body)
}

// call is a Web API call's arguments and token, whatever its encoding.
type call struct {
	args  map[string]json.RawMessage
	token string
	// noCharset: a JSON body whose Content-Type names no charset (Slack
	// warns missing_charset).
	noCharset bool
}

// str is the string argument name ("" when absent or not a string).
func (c *call) str(name string) string {
	raw, ok := c.args[name]
	if !ok {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	return strings.Trim(string(raw), `"`)
}

// has reports whether the argument name was given.
func (c *call) has(name string) bool { _, ok := c.args[name]; return ok }

// json is the argument name as JSON: an object or array given as such, or
// given as a string that holds it (form bodies, and JSON bodies alike).
func (c *call) json(name string) json.RawMessage {
	raw := c.args[name]
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return json.RawMessage(s)
	}
	return raw
}

// parseCall reads a call's arguments: the query, then a form or JSON body;
// the token from Authorization: Bearer, or a form's or query's token.
func parseCall(r *http.Request) (*call, string) {
	c := &call{args: map[string]json.RawMessage{}}
	set := func(vals url.Values) {
		for k, vs := range vals {
			if len(vs) > 0 {
				b, _ := json.Marshal(vs[0])
				c.args[k] = b
			}
		}
	}
	set(r.URL.Query())
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		return nil, "request_timeout"
	}
	if len(body) > 0 {
		ct := r.Header.Get("Content-Type")
		mt, params, _ := mime.ParseMediaType(ct)
		switch mt {
		case "":
			return nil, "missing_post_type"
		case "application/json":
			if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") && !strings.EqualFold(cs, "iso-8859-1") {
				return nil, "invalid_charset"
			}
			c.noCharset = params["charset"] == ""
			var m map[string]json.RawMessage
			if json.Unmarshal(body, &m) != nil {
				return nil, "invalid_json"
			}
			maps.Copy(c.args, m)
		case "application/x-www-form-urlencoded":
			vals, err := url.ParseQuery(string(body))
			if err != nil {
				return nil, "invalid_form_data"
			}
			set(vals)
		default:
			return nil, "invalid_post_type"
		}
	}
	if t, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		c.token = t
	} else if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/json" {
		c.token = c.str("token")
	}
	delete(c.args, "token")
	return c, ""
}

// api wraps a Web API method with what every call meets first: the
// target's fault, the arguments, the token.
func (s *Server) api(target string, h func(c *call) answer) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.requests[target]++
		s.mu.Unlock()
		f := s.kit.Next(target)
		if goOn, status, outcome := s.kit.Before(w, r, f); !goOn {
			s.log(r, status, outcome)
			return
		}
		c, bad := parseCall(r)
		var a answer
		switch {
		case bad != "":
			a = apiFail(bad)
		case c.token == "":
			a = apiFail("not_authed")
		default:
			s.mu.Lock()
			refuse := s.refuse
			s.mu.Unlock()
			switch {
			case c.token != s.opts.Token:
				a = apiFail("invalid_auth")
			case refuse:
				a = apiFail("token_revoked")
			default:
				a = h(c)
			}
		}
		if c != nil && c.noCharset && a.status == http.StatusOK {
			a.body["warning"] = "missing_charset"
			a.body["response_metadata"] = map[string]any{"warnings": []string{"missing_charset"}}
		}
		b, _ := json.Marshal(a.body)
		h := http.Header{"Content-Type": {"application/json; charset=utf-8"}}
		for k, v := range a.header {
			h[k] = v
		}
		s.kit.After(w, r, f, standin.Answer{Status: a.status, Header: h, Body: append(b, '\n')})
		s.log(r, a.status, f.String())
	}
}

func (s *Server) log(r *http.Request, status int, fault string) {
	if s.opts.Logger != nil {
		s.opts.Logger.Debug("slackfake", "method", r.Method, "route", r.Pattern, "status", status, "fault", fault)
	}
}

// scope is the missing_scope answer unless the token has one of needed.
func (s *Server) scope(needed ...string) (answer, bool) {
	for _, n := range needed {
		if slices.Contains(s.opts.Scopes, n) {
			return answer{}, true
		}
	}
	a := apiFail("missing_scope")
	a.body["needed"], a.body["provided"] = strings.Join(needed, ","), strings.Join(s.opts.Scopes, ",")
	return a, false
}

// channel resolves a channel argument: an id, or (byName) a name with or
// without #. s.mu is held.
func (s *Server) channel(arg string, byName bool) *Channel {
	if c, ok := s.channels[arg]; ok {
		return c
	}
	if byName {
		name := strings.TrimPrefix(arg, "#")
		for _, c := range s.channels {
			if c.Name == name {
				return c
			}
		}
	}
	return nil
}

// content is a message's text, blocks and metadata, checked.
type content struct {
	text     string
	blocks   json.RawMessage
	texts    []textObject
	metadata json.RawMessage
	payload  struct {
		LeadID      string `json:"lead_id"`
		ExternalRef string `json:"external_ref"`
	}
}

var eventType = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,255}$`)

// checkContent checks a message's text, blocks and metadata (maxText: the
// method's limit on the text). It returns the error code of a refusal,
// with Block Kit's messages.
func checkContent(c *call, maxText int) (*content, string, []string) {
	m := &content{text: c.str("text")}
	if c.has("blocks") {
		m.blocks = c.json("blocks")
		texts, berr := checkBlocks(m.blocks)
		if berr != nil {
			return nil, berr.code, berr.messages
		}
		m.texts = texts
	}
	switch n := utf8.RuneCountInString(m.text); {
	case n == 0 && len(m.texts) == 0:
		return nil, "no_text", nil
	case n > maxText:
		return nil, "msg_too_long", nil
	}
	if c.has("metadata") {
		m.metadata = c.json("metadata")
		var md struct {
			EventType    string          `json:"event_type"`
			EventPayload json.RawMessage `json:"event_payload"`
		}
		var empty map[string]any
		switch {
		case json.Unmarshal(m.metadata, &empty) == nil && len(empty) == 0:
			// {}: no metadata (an edit removes it).
		case json.Unmarshal(m.metadata, &md) != nil || !eventType.MatchString(md.EventType) || len(md.EventPayload) == 0 || md.EventPayload[0] != '{':
			return nil, "invalid_metadata_format", nil
		case len(m.metadata) > MaxMetadata:
			return nil, "metadata_too_large", nil
		default:
			_ = json.Unmarshal(md.EventPayload, &m.payload)
		}
	}
	return m, "", nil
}

// stamp is a new message's ts, later than every other. s.mu is held.
func (s *Server) stamp() string {
	s.seq++
	return fmt.Sprintf("%d.%06d", s.opts.Now().Unix(), s.seq%1000000)
}

// limited reports whether a message to channel comes within a second of
// the last one; if not, it is the last one now. s.mu is held.
func (s *Server) limited(channel string) bool {
	if !s.limit {
		return false
	}
	now := s.opts.Now()
	if last, ok := s.lastPost[channel]; ok && now.Sub(last) < time.Second {
		return true
	}
	s.lastPost[channel] = now
	return false
}

func ratelimited() answer {
	return answer{status: http.StatusTooManyRequests, header: http.Header{"Retry-After": {"1"}}, body: map[string]any{"ok": false, "error": "ratelimited"}}
}

func invalidBlocks(code string, messages []string) answer {
	a := apiFail(code)
	if len(messages) > 0 {
		a.body["errors"] = messages
		a.body["response_metadata"] = map[string]any{"messages": messages}
	}
	return a
}

// fill sets a message's content and what is read of it.
func (m *Message) fill(ct *content, parseFull bool) {
	m.Text, m.Blocks = ct.text, ct.blocks
	if ct.metadata != nil {
		m.Metadata, m.LeadID, m.Ref = ct.metadata, ct.payload.LeadID, ct.payload.ExternalRef
	}
	if m.Ref == "" {
		m.Ref = markedRef(ct.texts)
	}
	r := renderMessage(ct.text, parseFull, ct.texts)
	m.Display, m.Mentions, m.Links = strings.Join(r.display, "\n"), r.mentions, r.links
}

func (s *Server) postMessage(c *call) answer {
	if a, ok := s.scope("chat:write"); !ok {
		return a
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := s.channel(c.str("channel"), true)
	switch {
	case ch == nil || ch.Private && !ch.Member:
		return apiFail("channel_not_found")
	case ch.Archived:
		return apiFail("is_archived")
	case !ch.Member:
		return apiFail("not_in_channel")
	}
	ct, code, msgs := checkContent(c, MaxPostText)
	if code != "" {
		return invalidBlocks(code, msgs)
	}
	if s.limited(ch.ID) {
		return ratelimited()
	}
	m := &Message{Channel: ch.ID, TS: s.stamp()}
	m.fill(ct, c.str("parse") == "full" || c.str("link_names") == "true" || c.str("link_names") == "1")
	s.messages = append(s.messages, m)
	return apiOK(map[string]any{"channel": ch.ID, "ts": m.TS, "message": s.view(m, true)})
}

func (s *Server) update(c *call) answer {
	if a, ok := s.scope("chat:write"); !ok {
		return a
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := s.channel(c.str("channel"), false)
	switch {
	case ch == nil || ch.Private && !ch.Member:
		return apiFail("channel_not_found")
	case ch.Archived:
		return apiFail("is_inactive")
	}
	var m *Message
	for _, x := range s.messages {
		if x.Channel == ch.ID && x.TS == c.str("ts") {
			m = x
		}
	}
	switch {
	case m == nil:
		return apiFail("message_not_found")
	case m.Webhook:
		return apiFail("cant_update_message")
	}
	ct, code, msgs := checkContent(c, MaxUpdateText)
	if code != "" {
		return invalidBlocks(code, msgs)
	}
	if !c.has("blocks") && c.has("text") {
		ct.blocks, ct.texts = nil, nil // text alone replaces the blocks
	} else if !c.has("blocks") {
		ct.blocks = m.Blocks
	}
	if !c.has("metadata") {
		ct.metadata, ct.payload.LeadID, ct.payload.ExternalRef = m.Metadata, m.LeadID, m.Ref
	} else if string(ct.metadata) == "{}" {
		m.Metadata, m.LeadID, m.Ref, ct.metadata = nil, "", "", nil
	}
	// chat.update parses as the client does unless told none.
	parse := c.str("parse")
	m.fill(ct, parse == "" || parse == "client" || parse == "full")
	m.Edits++
	return apiOK(map[string]any{"channel": ch.ID, "ts": m.TS, "text": m.Text, "message": map[string]any{"text": m.Text}})
}

// view is a message as conversations.history shows it.
func (s *Server) view(m *Message, metadata bool) map[string]any {
	v := map[string]any{"type": "message", "text": m.Text, "ts": m.TS}
	if m.Blocks != nil {
		v["blocks"] = m.Blocks
	}
	if m.Webhook {
		v["subtype"], v["bot_id"] = "bot_message", "B0FAKE0001"
	} else {
		v["bot_id"], v["user"], v["app_id"] = "B0BOT00001", "U0BOT00001", "A0FAKE0001"
	}
	if m.Edits > 0 {
		v["edited"] = map[string]string{"user": "U0BOT00001", "ts": m.TS}
	}
	if metadata && m.Metadata != nil {
		v["metadata"] = m.Metadata
	}
	return v
}

// tsParts reads a ts ("1712345678.000123") for comparing; ok false for
// one that is not.
func tsParts(ts string) (sec, frac int64, ok bool) {
	a, b, _ := strings.Cut(ts, ".")
	sec, err := strconv.ParseInt(a, 10, 64)
	if err != nil || len(b) > 6 {
		return 0, 0, false
	}
	if b != "" {
		b += strings.Repeat("0", 6-len(b))
		if frac, err = strconv.ParseInt(b, 10, 64); err != nil {
			return 0, 0, false
		}
	}
	return sec, frac, true
}

// tsCompare compares two ts: -1, 0 or 1.
func tsCompare(a, b string) int {
	as, af, _ := tsParts(a)
	bs, bf, _ := tsParts(b)
	switch {
	case as != bs:
		return cmpInt(as, bs)
	default:
		return cmpInt(af, bf)
	}
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func (s *Server) history(c *call) answer {
	s.mu.Lock()
	ch := s.channel(c.str("channel"), false)
	var private bool
	if ch != nil {
		private = ch.Private
	}
	s.mu.Unlock()
	needed := "channels:history"
	if private {
		needed = "groups:history"
	}
	if a, ok := s.scope(needed); !ok {
		return a
	}
	oldest, latest := c.str("oldest"), c.str("latest")
	if _, _, ok := tsParts(oldest); oldest != "" && !ok {
		return apiFail("invalid_ts_oldest")
	}
	if _, _, ok := tsParts(latest); latest != "" && !ok {
		return apiFail("invalid_ts_latest")
	}
	inclusive := c.str("inclusive") == "true" || c.str("inclusive") == "1"
	withMetadata := c.str("include_all_metadata") == "true" || c.str("include_all_metadata") == "1"
	limit := 100
	if v := c.str("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return apiFail("invalid_arguments")
		}
		if n > 0 {
			limit = min(n, 999)
		}
	}
	// The cursor is the ts the next page starts below.
	before := ""
	if cur := c.str("cursor"); cur != "" {
		b, err := base64.StdEncoding.DecodeString(cur)
		ts, ok := strings.CutPrefix(string(b), "next_ts:")
		if _, _, valid := tsParts(ts); err != nil || !ok || !valid {
			return apiFail("invalid_cursor")
		}
		before = ts
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case ch == nil || ch.Private && !ch.Member:
		return apiFail("channel_not_found")
	case !ch.Member:
		return apiFail("not_in_channel")
	}
	var in []*Message
	for _, m := range s.messages {
		switch {
		case m.Channel != ch.ID:
		case oldest != "" && (tsCompare(m.TS, oldest) < 0 || tsCompare(m.TS, oldest) == 0 && !inclusive):
		case latest != "" && (tsCompare(m.TS, latest) > 0 || tsCompare(m.TS, latest) == 0 && !inclusive):
		case before != "" && tsCompare(m.TS, before) >= 0:
		default:
			in = append(in, m)
		}
	}
	slices.SortFunc(in, func(a, b *Message) int { return tsCompare(b.TS, a.TS) })
	more := len(in) > limit
	if more {
		in = in[:limit]
	}
	msgs := make([]map[string]any, len(in))
	for i, m := range in {
		msgs[i] = s.view(m, withMetadata)
	}
	next := ""
	if more {
		next = base64.StdEncoding.EncodeToString([]byte("next_ts:" + in[len(in)-1].TS))
	}
	return apiOK(map[string]any{"messages": msgs, "has_more": more, "pin_count": 0,
		"response_metadata": map[string]any{"next_cursor": next}})
}

func (s *Server) authTest(*call) answer {
	a := apiOK(map[string]any{"url": "https://leadintake-fake.slack.com/", "team": "Fake Workspace", "user": "leadintake",
		"team_id": "T0FAKE0001", "user_id": "U0BOT00001", "bot_id": "B0BOT00001", "is_enterprise_install": false})
	a.header = http.Header{"X-Oauth-Scopes": {strings.Join(s.opts.Scopes, ",")}}
	return a
}

// webhook serves an incoming webhook: its JSON body (or a form's payload)
// posted to the webhook's channel; "ok" in text/plain, or Slack's
// plain-text error.
func (s *Server) webhook(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.requests[TargetWebhook]++
	s.mu.Unlock()
	f := s.kit.Next(TargetWebhook)
	if goOn, status, outcome := s.kit.Before(w, r, f); !goOn {
		s.log(r, status, outcome)
		return
	}
	status, body := s.hook(r)
	h := http.Header{"Content-Type": {"text/plain; charset=utf-8"}}
	if status == http.StatusTooManyRequests {
		h.Set("Retry-After", "1")
	}
	s.kit.After(w, r, f, standin.Answer{Status: status, Header: h, Body: []byte(body)})
	s.log(r, status, f.String())
}

func (s *Server) hook(r *http.Request) (int, string) {
	s.mu.Lock()
	chID, known := s.opts.Webhooks[r.URL.Path]
	refuse := s.refuse
	s.mu.Unlock()
	if !known || refuse {
		return http.StatusNotFound, "no_service"
	}
	raw, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		return http.StatusBadRequest, "invalid_payload"
	}
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt == "application/x-www-form-urlencoded" {
		vals, err := url.ParseQuery(string(raw))
		if err != nil {
			return http.StatusBadRequest, "invalid_payload"
		}
		raw = []byte(vals.Get("payload"))
	}
	var args map[string]json.RawMessage
	if json.Unmarshal(raw, &args) != nil {
		return http.StatusBadRequest, "invalid_payload"
	}
	ct, code, _ := checkContent(&call{args: args}, MaxPostText)
	switch code {
	case "":
	case "invalid_metadata_format", "metadata_too_large", "invalid_blocks_format":
		return http.StatusBadRequest, "invalid_payload"
	default:
		return http.StatusBadRequest, code
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := s.channels[chID]
	switch {
	case ch == nil:
		return http.StatusNotFound, "channel_not_found"
	case ch.Archived:
		return http.StatusGone, "channel_is_archived"
	case s.limited(ch.ID):
		return http.StatusTooManyRequests, "rate_limited"
	}
	m := &Message{Channel: ch.ID, TS: s.stamp(), Webhook: true}
	c := &call{args: args}
	m.fill(ct, c.str("parse") == "full" || c.str("link_names") == "true" || c.str("link_names") == "1")
	s.messages = append(s.messages, m)
	return http.StatusOK, "ok"
}
