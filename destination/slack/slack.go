package slack

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/leadintake/leadintake/destination"
)

// Kind is the kind's name in the clients file.
const Kind = "slack"

// Origin is Slack's Web API origin; a destination's base_url replaces it.
const Origin = "https://slack.com"

// The operations, as errors name them.
const (
	opPost    = "slack post"
	opUpdate  = "slack update"
	opHistory = "slack history"
	opCheck   = "slack check"
	opWebhook = "slack webhook"
)

// Find looks at most historyPages pages of historyLimit messages each, from
// findMargin before the first attempt (for a clock of ours ahead of
// Slack's).
const (
	historyLimit = 200
	findMargin   = 2 * time.Minute
)

// historyPages is a variable for the tests alone.
var historyPages = 10

// Spec is the kind.
var Spec = destination.Spec{
	Kind:     Kind,
	Families: []destination.Family{destination.FamilyChannel},
	Members: []destination.Member{
		{Name: "webhook_url", Secret: true},
		{Name: "token", Secret: true},
		{Name: "channel"},
	},
	Validate:   validate,
	NewChannel: func(c *destination.Config) (destination.Channel, error) { return New(c), nil },
}

// channelID is a conversation's id: a public or private channel's (C…,
// G… for the oldest private ones).
var channelID = regexp.MustCompile(`^[CG][A-Z0-9]{6,20}$`)

func validate(c *destination.Config) error {
	hook, token, channel := c.Value("webhook_url"), c.Value("token"), c.Value("channel")
	switch {
	case hook != "" && token != "":
		return errors.New("webhook_url and token: give one (an incoming webhook, or a bot token with channel), not both")
	case hook == "" && token == "":
		return errors.New("webhook_url, or token and channel, is required")
	case len(c.Map) > 0:
		return errors.New("map: a Slack message is the kind's own; map is for the CRM kinds")
	}
	if hook != "" {
		if err := destination.CheckHTTPURL("webhook_url", hook, false); err != nil {
			return err
		}
		if u, _ := url.Parse(hook); strings.HasPrefix(u.Path, "/triggers/") || strings.HasPrefix(u.Path, "/workflows/") {
			return errors.New("webhook_url must be an incoming webhook (…/services/…), not a Workflow Builder trigger")
		}
		switch {
		case channel != "":
			return errors.New("channel: an incoming webhook posts to the channel it was made for; channel goes with token")
		case c.BaseURL != "":
			return errors.New("base_url: an incoming webhook's URL is whole; base_url goes with token")
		}
		return nil
	}
	switch {
	case strings.IndexFunc(token, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0:
		return errors.New("token must be one line without spaces (the Bot User OAuth Token as Slack shows it)")
	case !strings.HasPrefix(token, "xoxb-"):
		return errors.New("token must be a bot token (xoxb-…: the app's Bot User OAuth Token)")
	case channel == "":
		return errors.New("channel is required with token")
	case !channelID.MatchString(channel):
		return errors.New("channel must be the channel's ID (such as C0123ABCDEF: at the bottom of the channel's details), not its name")
	}
	if c.BaseURL != "" {
		return destination.CheckHTTPURL("base_url", c.BaseURL, true)
	}
	return nil
}

// New returns the channel c configures (c passed Validate): a *Webhook for
// webhook_url, else a *Bot.
func New(c *destination.Config) destination.Channel {
	client := destination.NewHTTPClient(Kind, c.Timeout)
	if hook := c.Value("webhook_url"); hook != "" {
		return &Webhook{http: client, url: hook, now: time.Now}
	}
	return &Bot{http: client, api: c.Base(Origin) + "/api/", token: c.Value("token"), channel: c.Value("channel"), now: time.Now}
}

// Bot posts with a bot token: chat.postMessage, chat.update for an
// amendment, conversations.history to find a message after a lost answer.
// It implements destination.Channel and destination.Checker.
type Bot struct {
	http    *http.Client
	api     string // {base}/api/
	token   string
	channel string
	now     func() time.Time
}

// Capabilities: the bot finds its messages by their metadata (exactly
// once), and an amendment updates its chain's message.
func (b *Bot) Capabilities() destination.ChannelCapabilities {
	return destination.ChannelCapabilities{Find: true, Update: true}
}

// post is the body of chat.postMessage and chat.update.
type post struct {
	Channel string `json:"channel"`
	TS      string `json:"ts,omitempty"`
	*Message
	Metadata *Metadata `json:"metadata"`
	// Parse none: nothing in the text is turned into a mention or a link
	// but what it spells out (chat.update's default is client).
	Parse       string `json:"parse"`
	UnfurlLinks *bool  `json:"unfurl_links,omitempty"`
	UnfurlMedia *bool  `json:"unfurl_media,omitempty"`
}

// Send posts r's message; for an amendment whose chain has a message
// (chain, its ts), it updates that message instead, or posts a new one
// when Slack no longer has it or will not let it be edited. The receipt is
// the message's ts.
func (b *Bot) Send(ctx context.Context, r *destination.Record, chain destination.Receipt) (destination.Receipt, error) {
	m := NewMessage(r)
	if chain != "" {
		ts, err := b.call(ctx, opUpdate, "chat.update", post{Channel: b.channel, TS: string(chain), Message: m, Metadata: MetadataOf(r), Parse: "none"})
		e, _ := destination.AsError(err)
		switch {
		case err == nil:
			return destination.Receipt(cmp.Or(ts, string(chain))), nil
		case e == nil || (e.Code != "message_not_found" && e.Code != "cant_update_message" && e.Code != "edit_window_closed"):
			return "", err
		}
		// The chain's message is gone, or may not be edited: the
		// amendment is announced in a message of its own.
	}
	ts, err := b.call(ctx, opPost, "chat.postMessage", post{Channel: b.channel, Message: m, Metadata: MetadataOf(r), Parse: "none",
		UnfurlLinks: &no, UnfurlMedia: &no})
	if err != nil {
		return "", err
	}
	if ts == "" {
		// Posted, by Slack's word, but with nothing to update it by.
		return "", &destination.Error{Op: opPost, Status: http.StatusOK, Class: destination.Transient, Uncertain: true,
			Err: errors.New("answer has no ts")}
	}
	return destination.Receipt(ts), nil
}

// call posts body to a write method and returns the answer's ts.
func (b *Bot) call(ctx context.Context, op, method string, body any) (string, error) {
	req := &destination.Request{Op: op, Step: "notification", Method: http.MethodPost, URL: b.api + method, Header: b.header(), NoResend: true}
	if err := req.JSON(body); err != nil {
		return "", err
	}
	// Slack warns of a JSON body without its charset.
	req.Header.Set("Content-Type", "application/json; charset=utf-8")
	resp, err := destination.Do(ctx, b.http, req)
	if err != nil {
		return "", err
	}
	if ok, e := apiError(op, resp, b.now()); !ok {
		return "", e
	}
	var a struct {
		TS string `json:"ts"`
	}
	_ = json.Unmarshal(resp.Body, &a)
	return a.TS, nil
}

// historyAnswer is conversations.history's answer, as far as Find reads it.
type historyAnswer struct {
	Messages []struct {
		TS       string `json:"ts"`
		Metadata *struct {
			EventType    string          `json:"event_type"`
			EventPayload json.RawMessage `json:"event_payload"`
		} `json:"metadata"`
	} `json:"messages"`
	HasMore          bool `json:"has_more"`
	ResponseMetadata struct {
		NextCursor string `json:"next_cursor"`
	} `json:"response_metadata"`
}

// Find looks for the bot's message of r in the channel's history since
// since (less findMargin): a message whose metadata names r's reference
// and r's lead id. For an amendment, that is the chain's message once the
// update was applied (its metadata the amendment's), or a message of its
// own. A history longer than Find reads is an error, never "not found".
func (b *Bot) Find(ctx context.Context, r *destination.Record, since time.Time) (destination.Receipt, bool, error) {
	q := url.Values{
		"channel":              {b.channel},
		"limit":                {strconv.Itoa(historyLimit)},
		"include_all_metadata": {"true"},
	}
	if oldest := since.Add(-findMargin).Unix(); oldest > 0 {
		q.Set("oldest", strconv.FormatInt(oldest, 10))
	}
	for page := 0; page < historyPages; page++ {
		req := &destination.Request{Op: opHistory, Step: "notification_lookup", Method: http.MethodGet,
			URL: b.api + "conversations.history?" + q.Encode(), Header: b.header()}
		resp, err := destination.Do(ctx, b.http, req)
		if err != nil {
			return "", false, err
		}
		if ok, e := apiError(opHistory, resp, b.now()); !ok {
			return "", false, e
		}
		var a historyAnswer
		if err := resp.Decode(opHistory, &a); err != nil {
			return "", false, err
		}
		for _, m := range a.Messages {
			if m.Metadata == nil || m.Metadata.EventType != EventType || m.TS == "" {
				continue
			}
			var p EventPayload
			if json.Unmarshal(m.Metadata.EventPayload, &p) == nil && p.ExternalRef == r.ExternalRef && p.LeadID == r.LeadID {
				return destination.Receipt(m.TS), true, nil
			}
		}
		if !a.HasMore || a.ResponseMetadata.NextCursor == "" {
			return "", false, nil
		}
		q.Set("cursor", a.ResponseMetadata.NextCursor)
	}
	return "", false, destination.Errorf(opHistory, destination.Transient,
		"more than %d messages since the first attempt: the history is too long to tell", historyPages*historyLimit)
}

// Check calls auth.test, and reads the token's scopes from its answer's
// X-OAuth-Scopes: chat:write to post, and channels:history (a public
// channel) or groups:history (a private one) to find a message after a
// lost answer.
func (b *Bot) Check(ctx context.Context) error {
	// No step: a check is nobody's delivery.
	req := &destination.Request{Op: opCheck, Method: http.MethodPost, URL: b.api + "auth.test", Header: b.header()}
	resp, err := destination.Do(ctx, b.http, req)
	if err != nil {
		return err
	}
	if ok, e := apiError(opCheck, resp, b.now()); !ok {
		return e
	}
	header := resp.Header.Get("X-OAuth-Scopes")
	if header == "" {
		return nil // a proxy that drops it: the token is good, its scopes untold
	}
	scopes := map[string]bool{}
	for s := range strings.SplitSeq(header, ",") {
		scopes[strings.TrimSpace(s)] = true
	}
	switch {
	case !scopes["chat:write"]:
		return &destination.Error{Op: opCheck, Class: destination.Unauthorized, Code: "missing_scope", Err: errors.New("the token lacks chat:write")}
	case !scopes["channels:history"] && !scopes["groups:history"]:
		return &destination.Error{Op: opCheck, Class: destination.Unauthorized, Code: "missing_scope",
			Err: errors.New("the token lacks channels:history (a public channel) or groups:history (a private one)")}
	}
	return nil
}

func (b *Bot) header() http.Header {
	return http.Header{"Authorization": {"Bearer " + b.token}}
}

// Webhook posts to an incoming webhook. Slack answers it with ok and keeps
// no trace a caller could find: after a lost answer it posts again (at
// least once). It has no check: the only call it can make posts a message.
type Webhook struct {
	http *http.Client
	url  string
	now  func() time.Time
}

// Capabilities: none; at least once.
func (w *Webhook) Capabilities() destination.ChannelCapabilities {
	return destination.ChannelCapabilities{}
}

// hookPost is the body of a webhook's message.
type hookPost struct {
	*Message
	UnfurlLinks bool `json:"unfurl_links"`
	UnfurlMedia bool `json:"unfurl_media"`
}

// Send posts r's message (an amendment too: a webhook cannot update). Any
// 2xx is the acceptance (Slack answers 200 ok).
func (w *Webhook) Send(ctx context.Context, r *destination.Record, _ destination.Receipt) (destination.Receipt, error) {
	req := &destination.Request{Op: opWebhook, Step: "notification", Method: http.MethodPost, URL: w.url, NoResend: true}
	if err := req.JSON(hookPost{Message: NewMessage(r)}); err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/json; charset=utf-8")
	req.Header.Set("Accept", "text/plain")
	resp, err := destination.Do(ctx, w.http, req)
	if err != nil {
		return "", err
	}
	if !resp.OK() {
		return "", webhookError(opWebhook, resp, w.now())
	}
	return "", nil
}

// Find is not a capability of the kind in webhook mode.
func (w *Webhook) Find(context.Context, *destination.Record, time.Time) (destination.Receipt, bool, error) {
	return "", false, nil
}
