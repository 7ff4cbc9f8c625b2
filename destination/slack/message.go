package slack

import (
	"regexp"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/leadintake/leadintake/destination"
)

// Slack's limits, and the shares of them the message takes. Lengths are
// counted in UTF-16 code units of the text as sent (entities included),
// never less than Slack's count in characters, whichever it uses.
const (
	// MaxBlocks is the most blocks a message may have.
	MaxBlocks = 50
	// MaxSectionText is the most a section's text may hold; a field holds
	// at most MaxFieldText, a header MaxHeaderText.
	MaxSectionText = 3000
	MaxFieldText   = 2000
	MaxHeaderText  = 150
	// MaxFallbackText bounds the top-level text: chat.update refuses more
	// than 4,000 characters (msg_too_long), chat.postMessage truncates
	// past 40,000.
	MaxFallbackText = 4000

	// messageShare is what the visitor's message may take of its section,
	// and valueShare what any other visitor value may take of a field or
	// of the fallback text: together far below Slack's limit on a
	// message's blocks (msg_blocks_too_long, about 13,000 characters).
	messageShare = 2000
	valueShare   = 200
)

// Text is a Block Kit text object: plain_text (Emoji) or mrkdwn
// (Verbatim).
type Text struct {
	Type     string `json:"type"`
	Text     string `json:"text"`
	Emoji    *bool  `json:"emoji,omitempty"`
	Verbatim *bool  `json:"verbatim,omitempty"`
}

// Block is one Block Kit block of the kinds the message uses: header,
// section (Text or Fields), divider, context (Elements).
type Block struct {
	Type     string `json:"type"`
	Text     *Text  `json:"text,omitempty"`
	Fields   []Text `json:"fields,omitempty"`
	Elements []Text `json:"elements,omitempty"`
}

// Message is what a lead's message says: the fallback text (what phones
// and screen readers show) and the blocks.
type Message struct {
	Text   string  `json:"text"`
	Blocks []Block `json:"blocks"`
}

// Metadata is the message's metadata, by which Find knows a message of
// its own (bot mode).
type Metadata struct {
	EventType    string       `json:"event_type"`
	EventPayload EventPayload `json:"event_payload"`
}

// EventPayload is the metadata's payload: the lead and its reference.
type EventPayload struct {
	LeadID      string `json:"lead_id"`
	ExternalRef string `json:"external_ref"`
}

// EventType is the metadata's event type.
const EventType = "leadintake_lead"

// MetadataOf is r's metadata.
func MetadataOf(r *destination.Record) *Metadata {
	return &Metadata{EventType: EventType, EventPayload: EventPayload{LeadID: r.LeadID, ExternalRef: r.ExternalRef}}
}

var (
	no  = false
	yes = true
)

// plain is a plain_text object of visitor text (already cleaned and
// escaped): no :emoji: shortcode of the visitor becomes an emoji.
func plain(s string) Text { return Text{Type: "plain_text", Text: s, Emoji: &no} }

// mrkdwn is a mrkdwn object of the kind's own text: verbatim, so that
// nothing in it is turned into a link or a mention but what it spells out.
func mrkdwn(s string) Text { return Text{Type: "mrkdwn", Text: s, Verbatim: &yes} }

// tierMark is the emoji that opens a message of the tier.
func tierMark(tier string) string {
	switch tier {
	case "hot":
		return "🔥"
	case "warm":
		return "🌤️"
	case "cold":
		return "❄️"
	}
	return "📥"
}

// slackUserID is a member id as Slack writes it (U… or W…).
var slackUserID = regexp.MustCompile(`^[UW][A-Z0-9]{2,20}$`)

// NewMessage is r's message. Every value that comes from the visitor is
// cleaned (no control or bidirectional-override character, no line break
// where it would start a new line), escaped (&, < and >, so that no
// mention, channel ping or link can be spelled), written only in
// plain_text objects (no mrkdwn formatting, no emoji shortcode), and cut to
// its share of Slack's limits with an ellipsis: whatever the visitor sent,
// the message stays within every limit. The owner's mention (<@ID>, from
// the clients file) is the one mention the message makes.
func NewMessage(r *destination.Record) *Message {
	l := r.Lead
	name, company := value(l.Name), value(l.Company)
	email, phone, source := value(l.Email), value(l.Phone), value(l.Source)
	tier := value(r.Tier)

	verb := "New"
	if r.Amendment > 0 {
		verb = "Amended"
	}
	lead := strings.TrimSpace(verb + " " + tier + " lead")
	mark := tierMark(r.Tier)
	if r.Amendment > 0 {
		mark = "✏️"
	}
	who := company
	if who == "" {
		who = name
	}
	if who == "" {
		who = email
	}

	head := mark + " " + lead
	if who != "" {
		head += ": " + who
	}
	m := &Message{Blocks: []Block{{Type: "header", Text: ptr(plain(cut(head, MaxHeaderText)))}}}

	var about []Text
	for _, f := range []struct{ label, value string }{
		{"Name", name}, {"Company", company}, {"Email", email}, {"Phone", phone}, {"Source", source},
	} {
		if f.value != "" {
			about = append(about, mrkdwn("*"+f.label+"*"), plain(cut(f.value, MaxFieldText)))
		}
	}
	if len(about) > 0 {
		m.Blocks = append(m.Blocks, Block{Type: "section", Fields: about})
	}
	score := []Text{mrkdwn("*Score*"), plain(strconv.Itoa(r.Score) + " / 100")}
	if tier != "" {
		score = append(score, mrkdwn("*Tier*"), plain(tier))
	}
	if o := r.Owner; o != nil {
		switch {
		case slackUserID.MatchString(o.Slack):
			score = append(score, mrkdwn("*Owner*"), mrkdwn("<@"+o.Slack+">"))
		case o.Name != "":
			score = append(score, mrkdwn("*Owner*"), plain(cut(value(o.Name), MaxFieldText)))
		}
	}
	m.Blocks = append(m.Blocks, Block{Type: "section", Fields: score})

	if msg := clean(l.Message, true); msg != "" {
		m.Blocks = append(m.Blocks, Block{Type: "divider"},
			Block{Type: "section", Text: ptr(plain(cut(escape(msg), messageShare)))})
	}

	ctx := "Lead `" + escape(r.LeadID) + "` · ref `" + escape(r.ExternalRef) + "`"
	if r.Amends != "" {
		ctx += " · amends lead `" + escape(r.Amends) + "`"
	}
	if r.DuplicateOf != "" {
		ctx += " · ⚠️ possible duplicate of lead `" + escape(r.DuplicateOf) + "`"
	}
	m.Blocks = append(m.Blocks, Block{Type: "context", Elements: []Text{mrkdwn(cut(ctx, MaxSectionText))}})

	// The fallback: tier, company, name and score, all a phone shows.
	text := mark + " " + lead + ":"
	switch {
	case company != "" && name != "":
		text += " " + company + " — " + name
	case who != "":
		text += " " + who
	}
	text += ", score " + strconv.Itoa(r.Score)
	if o := r.Owner; o != nil && slackUserID.MatchString(o.Slack) {
		text += " (<@" + o.Slack + ">)"
	}
	m.Text = cut(text, MaxFallbackText)
	return m
}

func ptr[T any](v T) *T { return &v }

// value is a visitor's one-line value, cleaned, escaped and cut to its
// share.
func value(s string) string { return cut(escape(clean(s, false)), valueShare) }

// escape escapes Slack's control characters &, < and >: what follows can
// spell no mention, channel ping or link. Slack decodes the three entities
// for display, and only them.
func escape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}

// clean makes visitor text safe to show: invalid UTF-8 replaced, control
// characters dropped, bidirectional embeddings, overrides and isolates
// dropped (they would turn the text after them around), line breaks kept
// only in multiline text (at most one blank line in a row) and tabs made
// spaces; surrounding space trimmed.
func clean(s string, multiline bool) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	var b strings.Builder
	newlines := 0
	for i, r := range s {
		switch {
		case r == '\r' && i+1 < len(s) && s[i+1] == '\n':
			continue
		case r == '\n' || r == '\r' || r == '\u2028' || r == '\u2029' || r == '\u0085':
			if !multiline {
				b.WriteByte(' ')
				continue
			}
			if newlines++; newlines > 2 {
				continue
			}
			b.WriteByte('\n')
			continue
		case r == '\t':
			b.WriteByte(' ')
		case unicode.IsControl(r), bidiControl(r):
			continue
		default:
			b.WriteRune(r)
		}
		newlines = 0
	}
	return strings.TrimSpace(b.String())
}

// bidiControl reports whether r is one of the explicit bidirectional
// formatting characters (embeddings, overrides, isolates, marks).
func bidiControl(r rune) bool {
	return r >= '\u202A' && r <= '\u202E' || r >= '\u2066' && r <= '\u2069' || r == '\u200E' || r == '\u200F' || r == '\u061C'
}

// cut returns s (escaped text) within max UTF-16 code units, ending in an
// ellipsis when it had to be cut; never inside an entity or a surrogate
// pair.
func cut(s string, max int) string {
	if units(s) <= max {
		return s
	}
	const ellipsis = "…"
	n, end := 0, 0
	for i, r := range s {
		w := utf16.RuneLen(r)
		if w < 0 {
			w = 1
		}
		if n+w > max-1 {
			break
		}
		n += w
		end = i + utf8.RuneLen(r)
	}
	s = s[:end]
	// An entity cut in two would show its beginning.
	if amp := strings.LastIndexByte(s, '&'); amp >= 0 && !strings.Contains(s[amp:], ";") {
		s = s[:amp]
	}
	return strings.TrimRightFunc(s, unicode.IsSpace) + ellipsis
}

// units is the length of s in UTF-16 code units.
func units(s string) int {
	n := 0
	for _, r := range s {
		if w := utf16.RuneLen(r); w > 0 {
			n += w
		} else {
			n++
		}
	}
	return n
}
