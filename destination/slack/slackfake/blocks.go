package slackfake

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"unicode/utf8"
)

// Slack's limits on a message, as the stand-in enforces them. Lengths are
// counted in characters.
const (
	MaxBlocks       = 50
	MaxSectionText  = 3000
	MaxFieldText    = 2000
	MaxFields       = 10
	MaxHeaderText   = 150
	MaxContextItems = 10
	MaxBlockID      = 255
	// MaxBlocksText is what the texts of a message's blocks may hold
	// together (msg_blocks_too_long: Slack refuses from about 13,000
	// characters, a limit it does not document).
	MaxBlocksText = 12000
	// MaxPostText is the top-level text chat.postMessage and webhooks
	// take (msg_too_long past 40,000), MaxUpdateText chat.update's.
	MaxPostText   = 40000
	MaxUpdateText = 4000
	// MaxMetadata bounds a message's metadata, encoded
	// (metadata_too_large).
	MaxMetadata = 8192
)

// blockError is why blocks are refused: the code, and Slack's messages
// (a rule and a JSON pointer, never the text).
type blockError struct {
	code     string
	messages []string
}

// checker walks a message's blocks.
type checker struct {
	errs  []string
	total int
	// texts are the text objects, in order, for rendering.
	texts []textObject
}

// textObject is a text object of a block.
type textObject struct {
	Type     string `json:"type"`
	Text     string `json:"text"`
	Emoji    *bool  `json:"emoji,omitempty"`
	Verbatim *bool  `json:"verbatim,omitempty"`
	// context: the block is a context block (where the webhook marker is
	// read).
	context bool
}

func (c *checker) fail(pointer, format string, args ...any) {
	c.errs = append(c.errs, fmt.Sprintf(format, args...)+" [json-pointer:"+pointer+"]")
}

// checkBlocks validates raw, a message's blocks, as Block Kit does for the
// blocks the lead message uses (header, section, divider, context): an
// unknown block, member or text type, a text too long or empty, too many
// blocks, fields or elements. It returns the text objects.
func checkBlocks(raw json.RawMessage) ([]textObject, *blockError) {
	var blocks []map[string]json.RawMessage
	if err := json.Unmarshal(raw, &blocks); err != nil {
		return nil, &blockError{code: "invalid_blocks_format"}
	}
	c := &checker{}
	if len(blocks) > MaxBlocks {
		c.fail("/blocks", "no more than %d items allowed", MaxBlocks)
	}
	for i, b := range blocks {
		p := fmt.Sprintf("/blocks/%d", i)
		var typ string
		if json.Unmarshal(b["type"], &typ) != nil {
			c.fail(p+"/type", "missing required field: type")
			continue
		}
		allowed := map[string]bool{"type": true, "block_id": true}
		switch typ {
		case "header":
			allowed["text"] = true
			c.text(p+"/text", b["text"], MaxHeaderText, true, false)
		case "section":
			allowed["text"], allowed["fields"] = true, true
			_, hasText := b["text"]
			_, hasFields := b["fields"]
			if !hasText && !hasFields {
				c.fail(p, "must provide either text or fields")
			}
			if hasText {
				c.text(p+"/text", b["text"], MaxSectionText, false, false)
			}
			if hasFields {
				c.list(p+"/fields", b["fields"], MaxFields, MaxFieldText, false)
			}
		case "divider":
		case "context":
			allowed["elements"] = true
			c.list(p+"/elements", b["elements"], MaxContextItems, MaxSectionText, true)
		default:
			c.fail(p+"/type", "unsupported type: %s", typ)
			continue
		}
		for k := range b {
			if !allowed[k] {
				c.fail(p+"/"+k, "unknown field: %s", k)
			}
		}
		if id, ok := b["block_id"]; ok {
			var s string
			if json.Unmarshal(id, &s) != nil || s == "" || utf8.RuneCountInString(s) > MaxBlockID {
				c.fail(p+"/block_id", "must be a string of 1 to %d characters", MaxBlockID)
			}
		}
	}
	if len(c.errs) > 0 {
		return nil, &blockError{code: "invalid_blocks", messages: c.errs}
	}
	if c.total > MaxBlocksText {
		return nil, &blockError{code: "msg_blocks_too_long"}
	}
	return c.texts, nil
}

// list checks a list of text objects (fields, a context's elements).
func (c *checker) list(p string, raw json.RawMessage, maxItems, maxText int, context bool) {
	var items []json.RawMessage
	if json.Unmarshal(raw, &items) != nil || len(items) == 0 {
		c.fail(p, "must be a non-empty array")
		return
	}
	if len(items) > maxItems {
		c.fail(p, "no more than %d items allowed", maxItems)
	}
	for j, it := range items {
		c.text(fmt.Sprintf("%s/%d", p, j), it, maxText, false, context)
	}
}

// text checks one text object: its type, its members, its length.
func (c *checker) text(p string, raw json.RawMessage, max int, plainOnly, context bool) {
	var members map[string]json.RawMessage
	var t textObject
	if json.Unmarshal(raw, &members) != nil || json.Unmarshal(raw, &t) != nil {
		c.fail(p, "must be a text object")
		return
	}
	for k := range members {
		switch {
		case k == "type", k == "text":
		case k == "emoji" && t.Type == "plain_text":
		case k == "verbatim" && t.Type == "mrkdwn":
		default:
			c.fail(p+"/"+k, "unknown field: %s", k)
		}
	}
	switch {
	case t.Type != "plain_text" && t.Type != "mrkdwn":
		c.fail(p+"/type", "must be plain_text or mrkdwn")
	case plainOnly && t.Type != "plain_text":
		c.fail(p+"/type", "must be plain_text")
	}
	n := utf8.RuneCountInString(t.Text)
	switch {
	case n == 0:
		c.fail(p+"/text", "must be at least 1 character")
	case n > max:
		c.fail(p+"/text", "must be less than %d characters", max+1)
	}
	c.total += n
	t.context = context
	c.texts = append(c.texts, t)
}

// Mention and link syntax in mrkdwn and in a message's top-level text.
var (
	special  = regexp.MustCompile(`<([^<>]*)>`)
	bareSpec = regexp.MustCompile(`(^|[\s(])@(channel|here|everyone)\b`)
	bareURL  = regexp.MustCompile(`https?://[^\s<>|]+`)
	// mrkdwn's formatting, each between word boundaries: *bold*,
	// _italic_, ~strike~, `code`.
	formatting = regexp.MustCompile("(^|[\\s(])([*_~`])([^*_~`\n]+)([*_~`])($|[\\s).,!?:;])")
)

// rendering is what a person reads of some text, and what it does.
type rendering struct {
	display  []string
	mentions []string
	links    []string
}

// render reads text as Slack shows it. markup: the text is mrkdwn,
// formatted (*bold*, _italic_, ~strike~, `code` read as their words) and
// parsed for <…> (mentions, pings, links); auto: bare @channel, @here, @everyone and
// URLs are turned into pings and links too (a non-verbatim mrkdwn object,
// or a text parsed in full). Entities are decoded last.
func (r *rendering) render(text string, markup, auto bool) {
	if markup {
		text = formatting.ReplaceAllStringFunc(text, func(m string) string {
			p := formatting.FindStringSubmatch(m)
			if p[2] != p[4] {
				return m
			}
			return p[1] + p[3] + p[5]
		})
	}
	if markup {
		text = special.ReplaceAllStringFunc(text, func(m string) string {
			inner := m[1 : len(m)-1]
			target, label, hasLabel := strings.Cut(inner, "|")
			switch {
			case strings.HasPrefix(target, "@"):
				r.mentions = append(r.mentions, target)
				return "@" + target[1:]
			case strings.HasPrefix(target, "!"):
				r.mentions = append(r.mentions, target)
				if hasLabel {
					return label
				}
				return "@" + strings.TrimPrefix(target, "!")
			case strings.HasPrefix(target, "#"):
				r.links = append(r.links, target)
				return "#" + cmpOr(label, target[1:])
			case strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") || strings.HasPrefix(target, "tel:"):
				r.links = append(r.links, target)
				return cmpOr(label, target)
			}
			return m
		})
	}
	if auto {
		for _, m := range bareSpec.FindAllStringSubmatch(text, -1) {
			r.mentions = append(r.mentions, "!"+m[2])
		}
		r.links = append(r.links, bareURL.FindAllString(text, -1)...)
	}
	text = strings.NewReplacer("&lt;", "<", "&gt;", ">", "&amp;", "&").Replace(text)
	r.display = append(r.display, text)
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// renderMessage is a message as read: its top-level text (parsed in full
// when parse says so) and its text objects.
func renderMessage(text string, parseFull bool, texts []textObject) rendering {
	var r rendering
	if text != "" {
		r.render(text, true, parseFull)
	}
	for _, t := range texts {
		switch t.Type {
		case "mrkdwn":
			r.render(t.Text, true, t.Verbatim == nil || !*t.Verbatim)
		default:
			r.render(t.Text, false, false)
		}
	}
	return r
}

// RefMarker is how the stand-in knows the reference of a message that has
// no metadata (a webhook's): "ref `<external_ref>`" in a mrkdwn element of
// a context block, where no visitor text can be (visitor text is
// plain_text).
var RefMarker = regexp.MustCompile("ref `([A-Za-z0-9_-]+)`")

// markedRef is the reference texts name by RefMarker, "" for none.
func markedRef(texts []textObject) string {
	for _, t := range texts {
		if t.context && t.Type == "mrkdwn" {
			if m := RefMarker.FindStringSubmatch(t.Text); m != nil {
				return m[1]
			}
		}
	}
	return ""
}
