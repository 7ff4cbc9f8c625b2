package teams

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/leadintake/leadintake/destination"
)

// CardVersion is the Adaptive Card schema version of the card: 1.4 is what
// every Teams client renders (desktop, web and mobile), and all the card
// uses (TextBlock, FactSet, Container) is older.
const CardVersion = "1.4"

// ContentType is the attachment's content type of an Adaptive Card.
const ContentType = "application/vnd.microsoft.card.adaptive"

// MaxMessageBytes bounds the JSON body the kind sends. Teams refuses a
// message over about 28 KB ("Request Entity too large"); the fields'
// bounds (maxRunes) keep the worst card, every character escaped and four
// bytes long, well under this, which Send checks all the same.
const MaxMessageBytes = 24 << 10

// Bounds on what a card shows of each visitor-supplied value, in
// characters, before escaping. A value over its bound is cut and ends with
// an ellipsis.
var maxRunes = struct {
	name, company, email, phone, source, owner, message int
}{name: 200, company: 200, email: 254, phone: 64, source: 100, owner: 100, message: 1000}

// Message is the body of the call: a Bot Framework message with one
// attachment, the card. The Workflows template posts each attachment as a
// card of its own.
type Message struct {
	Type        string       `json:"type"`
	Attachments []Attachment `json:"attachments"`
}

// Attachment is one card of a Message.
type Attachment struct {
	ContentType string `json:"contentType"`
	// ContentURL is null for a card carried inline, as Microsoft's own
	// examples send it.
	ContentURL *string `json:"contentUrl"`
	Content    *Card   `json:"content"`
}

// Card is the Adaptive Card announcing a lead.
type Card struct {
	Schema  string    `json:"$schema"`
	Type    string    `json:"type"`
	Version string    `json:"version"`
	MSTeams *MSTeams  `json:"msteams,omitempty"`
	Body    []Element `json:"body"`
	// FallbackText is shown by a client that cannot render the card's
	// version. It holds no visitor text: a client may show it as
	// Markdown.
	FallbackText string `json:"fallbackText,omitempty"`
}

// MSTeams holds Teams' own card properties.
type MSTeams struct {
	// Width "Full" lets the card use the channel's width.
	Width string `json:"width,omitempty"`
}

// Element is one element of a card's body: a TextBlock, a FactSet or a
// Container.
type Element struct {
	Type string `json:"type"`
	ID   string `json:"id,omitempty"`
	// TextBlock.
	Text     string `json:"text,omitempty"`
	Size     string `json:"size,omitempty"`
	Weight   string `json:"weight,omitempty"`
	Color    string `json:"color,omitempty"`
	IsSubtle bool   `json:"isSubtle,omitempty"`
	Wrap     bool   `json:"wrap,omitempty"`
	Spacing  string `json:"spacing,omitempty"`
	// FactSet.
	Facts []Fact `json:"facts,omitempty"`
	// Container.
	Items     []Element `json:"items,omitempty"`
	Separator bool      `json:"separator,omitempty"`
}

// Fact is one line of a FactSet; both are Markdown in Teams.
type Fact struct {
	Title string `json:"title"`
	Value string `json:"value"`
}

// FooterID is the id of the card's last TextBlock, which names the lead and
// its reference (external_ref): what a person or a test looks for to tell
// which lead a card announces.
const FooterID = "leadintake-ref"

// MessageOf is the message announcing r.
func MessageOf(r *destination.Record) *Message {
	return messageOf(r, true)
}

func messageOf(r *destination.Record, withMessage bool) *Message {
	return &Message{Type: "message", Attachments: []Attachment{{ContentType: ContentType, Content: cardOf(r, withMessage)}}}
}

// tierColors give a hot lead the colour that draws the eye.
var tierColors = map[string]string{"hot": "Attention", "warm": "Warning"}

func cardOf(r *destination.Record, withMessage bool) *Card {
	l := r.Lead
	verb := "New lead"
	if r.Amendment > 0 || r.Amends != "" {
		verb = "Amended lead"
	}
	headline := firstOf(l.Company, l.Name, l.Email)
	title := verb
	if headline != "" {
		title += ": " + Escape(headline, maxRunes.company)
	}
	summary := []string{Escape(r.Tier, 20), "score " + strconv.Itoa(r.Score)}
	if l.Source != "" {
		summary = append(summary, Escape(l.Source, maxRunes.source))
	}

	var facts []Fact
	add := func(title, value string, limit int) {
		if value != "" {
			facts = append(facts, Fact{Title: title, Value: Escape(value, limit)})
		}
	}
	add("Name", l.Name, maxRunes.name)
	add("Company", l.Company, maxRunes.company)
	add("Email", l.Email, maxRunes.email)
	add("Phone", l.Phone, maxRunes.phone)
	add("Source", l.Source, maxRunes.source)
	facts = append(facts, Fact{Title: "Tier", Value: Escape(r.Tier, 20)}, Fact{Title: "Score", Value: strconv.Itoa(r.Score)})
	if r.Owner != nil {
		add("Owner", r.Owner.Name, maxRunes.owner)
	}
	add("Amends", r.Amends, 64)
	add("Possible duplicate of", r.DuplicateOf, 64)

	body := []Element{
		{Type: "TextBlock", Text: title, Size: "Medium", Weight: "Bolder", Color: tierColors[r.Tier], Wrap: true},
		{Type: "TextBlock", Text: strings.Join(summary, " · "), IsSubtle: true, Spacing: "None", Wrap: true},
		{Type: "FactSet", Facts: facts},
	}
	if m := EscapeText(l.Message, maxRunes.message); withMessage && m != "" {
		body = append(body, Element{Type: "Container", Separator: true, Items: []Element{
			{Type: "TextBlock", Text: m, Wrap: true},
		}})
	}
	body = append(body, Element{Type: "TextBlock", ID: FooterID, Size: "Small", IsSubtle: true, Wrap: true,
		Text: Escape("Lead "+r.LeadID+" · ref "+r.ExternalRef, 200)})

	return &Card{
		Schema: "http://adaptivecards.io/schemas/adaptive-card.json", Type: "AdaptiveCard", Version: CardVersion,
		MSTeams: &MSTeams{Width: "Full"}, Body: body,
		FallbackText: strings.ToUpper(verb[:1]) + verb[1:] + " (" + sanitizeLine(r.Tier, 20) + ", score " + strconv.Itoa(r.Score) +
			") · ref " + sanitizeLine(r.ExternalRef, 100),
	}
}

// encode is m as JSON, without HTML escaping (<, > and & as such: the card
// is JSON, not HTML, and \u003c would triple their size).
func encode(m *Message) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(m); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

func firstOf(vs ...string) string {
	for _, v := range vs {
		if strings.TrimSpace(v) != "" {
			return v
		}
	}
	return ""
}

// Escape returns s, a visitor-supplied value, as a card's Markdown shows it
// literally, on one line: every control character, line or paragraph
// separator and run of white space becomes one space, the bidirectional
// embeddings, overrides and isolates are removed (they would reorder the
// card's text), the value is cut at limit characters (an ellipsis ends a
// cut value), and every ASCII punctuation character is escaped with a
// backslash. CommonMark lets any ASCII punctuation be escaped, and with all
// of them escaped no emphasis, code, link, autolink, image, list, heading,
// entity, table or mention (<at>) can start, no bare URL, www. address or
// e-mail address is left for a client to link (their ":", "." and "@" are
// escaped), and no {{DATE()}} or {{TIME()}} function of Adaptive Cards
// matches.
func Escape(s string, limit int) string {
	return escapeMarkdown(sanitizeLine(s, limit))
}

// EscapeText is Escape for a text of several lines (the lead's message):
// each line is escaped as Escape does, empty lines are dropped, and the
// lines are joined as Markdown paragraphs. The limit counts the whole
// text.
func EscapeText(s string, limit int) string {
	s = truncate(s, limit)
	var out []string
	for line := range strings.FieldsFuncSeq(s, func(r rune) bool { return r == '\n' || r == '\r' || r == '\u2028' || r == '\u2029' }) {
		if l := sanitizeLine(line, limit); l != "" {
			out = append(out, escapeMarkdown(l))
		}
	}
	return strings.Join(out, "\n\n")
}

// sanitizeLine cuts s at limit characters and makes it one line of plain
// characters (see Escape), without escaping it.
func sanitizeLine(s string, limit int) string {
	s = truncate(s, limit)
	var b strings.Builder
	space := false
	for _, r := range s {
		switch {
		case r == utf8.RuneError, isBidiControl(r):
			continue
		case unicode.IsControl(r), unicode.IsSpace(r), r == '\u2028', r == '\u2029':
			space = b.Len() > 0
			continue
		}
		if space {
			b.WriteByte(' ')
			space = false
		}
		b.WriteRune(r)
	}
	return b.String()
}

// truncate cuts s at limit characters, an ellipsis taking the last one.
func truncate(s string, limit int) string {
	if utf8.RuneCountInString(s) <= limit {
		return s
	}
	n := 0
	for i := range s {
		if n == limit-1 {
			return strings.TrimRightFunc(s[:i], unicode.IsSpace) + "…"
		}
		n++
	}
	return s
}

// isBidiControl reports the explicit bidirectional formatting characters
// (LRE, RLE, PDF, LRO, RLO, LRI, RLI, FSI, PDI): a visitor's right-to-left
// override would reorder what follows it in the card.
func isBidiControl(r rune) bool {
	return r >= '\u202a' && r <= '\u202e' || r >= '\u2066' && r <= '\u2069'
}

// escapeMarkdown escapes every ASCII punctuation character of s with a
// backslash.
func escapeMarkdown(s string) string {
	var b strings.Builder
	b.Grow(len(s) + len(s)/4)
	for _, r := range s {
		if r < utf8.RuneSelf && unicode.IsPunct(r) || r < utf8.RuneSelf && unicode.IsSymbol(r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
