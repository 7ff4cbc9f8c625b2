package email

import (
	"bytes"
	"io"
	"net/mail"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/emersion/go-message"
	gomail "github.com/emersion/go-message/mail"

	"github.com/leadintake/leadintake/destination"
)

// MessageID is the Message-ID of r's message (without angle brackets),
// derived from the reference alone, the same on every attempt:
// external_ref.notify@domain, or external_ref.notify.N@domain for the
// amendment N.
func MessageID(r *destination.Record, domain string) string {
	id := r.ExternalRef + ".notify"
	if r.Amendment > 0 {
		id += "." + strconv.Itoa(r.Amendment)
	}
	return id + "@" + domain
}

// FirstMessageID is the Message-ID of the message that announced the
// first lead of r's chain: an amendment's message replies to it.
func FirstMessageID(r *destination.Record, domain string) string {
	return r.ExternalRef + ".notify@" + domain
}

// dotAtom is RFC 5322's dot-atom-text: what the left of a Message-ID may
// be without quoting.
func dotAtom(s string) bool {
	if s == "" || s[0] == '.' || s[len(s)-1] == '.' || strings.Contains(s, "..") {
		return false
	}
	for _, c := range []byte(s) {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'*+-/=?^_`{|}~.", c) >= 0) {
			return false
		}
	}
	return true
}

// Compose writes r's message: text/plain in UTF-8 (quoted-printable), from
// from to every to and r's owner, Reply-To the lead's email, a subject
// naming the tier and the company, and the Message-ID of MessageID (an
// amendment's In-Reply-To and References name its chain's first message).
// No visitor-supplied value reaches a header as written: the subject's
// company is made one line (see oneLine) and RFC 2047-encoded where it is
// not ASCII, and the Reply-To is written only when the lead's email is one
// plain ASCII address.
func Compose(from *mail.Address, to []*mail.Address, domain string, r *destination.Record, now time.Time) ([]byte, error) {
	if !dotAtom(r.ExternalRef) {
		return nil, destination.Errorf(opData, destination.Rejected, "the reference cannot make a Message-ID")
	}
	var h gomail.Header
	h.SetDate(now)
	h.SetAddressList("From", []*mail.Address{from})
	rcpt := append([]*mail.Address(nil), to...)
	if r.Owner != nil && r.Owner.Email != "" {
		if a, err := parseAddress(r.Owner.Email); err == nil && !listed(to, a.Address) {
			rcpt = append(rcpt, &mail.Address{Address: a.Address})
		}
	}
	h.SetAddressList("To", rcpt)
	if a, ok := replyTo(r.Lead.Email); ok {
		h.SetAddressList("Reply-To", []*mail.Address{a})
	}
	h.SetSubject(Subject(r))
	h.SetMessageID(MessageID(r, domain))
	if r.Amendment > 0 {
		first := []string{FirstMessageID(r, domain)}
		h.SetMsgIDList("In-Reply-To", first)
		h.SetMsgIDList("References", first)
	}
	// RFC 3834: no out-of-office reply from a sales mailbox should reach
	// the lead through the Reply-To.
	h.Set("Auto-Submitted", "auto-generated")
	h.SetContentType("text/plain", map[string]string{"charset": "utf-8"})
	h.Set("Content-Transfer-Encoding", "quoted-printable")

	var buf bytes.Buffer
	w, err := message.CreateWriter(&buf, h.Header)
	if err != nil {
		return nil, destination.Errorf(opData, destination.Rejected, "the message cannot be written")
	}
	if _, err := io.WriteString(w, Body(r)); err != nil {
		return nil, destination.Errorf(opData, destination.Rejected, "the message cannot be written")
	}
	if err := w.Close(); err != nil {
		return nil, destination.Errorf(opData, destination.Rejected, "the message cannot be written")
	}
	return buf.Bytes(), nil
}

func listed(to []*mail.Address, addr string) bool {
	for _, a := range to {
		if strings.EqualFold(a.Address, addr) {
			return true
		}
	}
	return false
}

// replyTo is the lead's email as a Reply-To, when it is one plain ASCII
// address and nothing else (no name, no second address, no CR or LF; the
// api checks as much already).
func replyTo(email string) (*mail.Address, bool) {
	if email == "" || !asciiLine.MatchString(email) {
		return nil, false
	}
	a, err := mail.ParseAddress(email)
	if err != nil || a.Name != "" || a.Address != email {
		return nil, false
	}
	return a, true
}

// Lengths of visitor text in the message, in characters.
const (
	maxSubjectCompany = 80
	maxValue          = 200
)

// Subject names the tier, the score and the company: "New lead (hot, score
// 85): Analytical Engines"; "Amended lead ..." for an amendment.
func Subject(r *destination.Record) string {
	company := oneLine(r.Lead.Company, maxSubjectCompany)
	if company == "" {
		company = "(no company)"
	}
	kind := "New lead"
	if r.Amendment > 0 {
		kind = "Amended lead"
	}
	return kind + " (" + oneLine(r.Tier, 20) + ", score " + strconv.Itoa(r.Score) + "): " + company
}

// Body is the message's text: the facts every notification carries, one
// a line.
func Body(r *destination.Record) string {
	var b strings.Builder
	if r.Amendment > 0 {
		b.WriteString("An amended lead: ")
	} else {
		b.WriteString("A new lead: ")
	}
	b.WriteString(oneLine(r.Tier, 20) + ", score " + strconv.Itoa(r.Score) + "\n\n")
	line := func(label, v string) {
		if v = oneLine(v, maxValue); v != "" {
			b.WriteString(label + strings.Repeat(" ", max(1, 14-len(label))) + v + "\n")
		}
	}
	l := r.Lead
	line("Company:", l.Company)
	line("Name:", l.Name)
	line("Email:", l.Email)
	line("Phone:", l.Phone)
	line("Source:", l.Source)
	if r.Owner != nil {
		line("Owner:", r.Owner.Name)
	}
	line("Tier:", r.Tier)
	line("Score:", strconv.Itoa(r.Score))
	line("Lead id:", r.LeadID)
	line("Amends:", r.Amends)
	line("Duplicate of:", r.DuplicateOf)
	b.WriteString("\nReply to this message to write to the lead.\n")
	return b.String()
}

// oneLine makes visitor text one line of at most n characters: invalid
// UTF-8 replaced, control characters (CR, LF, tab, ...) and the line and
// paragraph separators become spaces, bidirectional controls (which could
// reverse what follows them) are dropped, runs of spaces are one, and a
// longer text is cut with an ellipsis.
func oneLine(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.Map(func(r rune) rune {
		switch {
		case bidiControl(r):
			return -1
		case unicode.IsControl(r), r == '\u2028', r == '\u2029', r == '\u0085':
			return ' '
		}
		return r
	}, s)
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) > n {
		rs := []rune(s)
		s = strings.TrimSpace(string(rs[:n-1])) + "…"
	}
	return s
}

// bidiControl reports whether r is one of Unicode's bidirectional
// formatting characters.
func bidiControl(r rune) bool {
	return r == '\u061c' || r == '\u200e' || r == '\u200f' || r >= '\u202a' && r <= '\u202e' || r >= '\u2066' && r <= '\u2069'
}
