package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/leadintake/leadintake/store"
)

// hostile is what a visitor can put in an enquiry to drive a terminal or
// reorder what it shows: a clear-screen and a title-setting escape
// sequence, an 8-bit CSI (C1), a carriage return and a line break, DEL,
// every bidirectional control, a line separator, a Unicode tag character,
// and a byte that is not UTF-8.
const hostile = "a\x1b[2Jb\x1b]0;owned\x07c\u009b31md\re\nf\x7fg" +
	"\u202a\u202b\u202c\u202d\u202eh\u2066\u2067\u2068\u2069i\u200e\u200fj\u061ck\u2028l\U000E0041m\xffn"

// unsafeRunes lists the characters of s that no text the commands print
// may hold (line breaks aside: the commands print their own).
func unsafeRunes(s string) []string {
	var found []string
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			found = append(found, fmt.Sprintf("byte %#x at %d", s[i], i))
		case r < 0x20 && r != '\n', r >= 0x7f && r <= 0x9f,
			r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069,
			r == 0x200e, r == 0x200f, r == 0x061c, r == 0x2028, r == 0x2029, r >= 0xe0000 && r <= 0xe007f:
			found = append(found, fmt.Sprintf("%U at %d", r, i))
		}
		i += size
	}
	return found
}

func TestPrintable(t *testing.T) {
	for in, want := range map[string]string{
		"":                          "",
		"Ada Lovelace, née Byron ✓": "Ada Lovelace, née Byron ✓",
		"日本語 😀":                     "日本語 😀",
		"tab\there":                 `tab\x09here`,
		"\x1b[2J":                   `\x1b[2J`,
		"\u009b31m":                 `\u009b31m`,
		"abc\u202edcba":             `abc\u202edcba`,
		"\u2066x\u2069\u200e\u061c": `\u2066x\u2069\u200e\u061c`,
		"tag\U000E0041":             `tag\U000e0041`,
		"bad\xffbyte":               `bad\xffbyte`,
		"line\u2028sep":             `line\u2028sep`,
	} {
		if got := printable(in); got != want {
			t.Errorf("printable(%q) = %q, want %q", in, got, want)
		}
	}
	if got := unsafeRunes(printable(hostile)); len(got) > 0 || strings.Contains(printable(hostile), "\n") {
		t.Errorf("printable(hostile) = %q still holds %v", printable(hostile), got)
	}
}

// `api spam show` prints a quarantined enquiry, which a visitor wrote,
// with every control and bidirectional character escaped, in its table
// and its enquiry alike; --json keeps the same document, with them as
// JSON escapes.
func TestSpamShowEscapesWhatVisitorsSent(t *testing.T) {
	submission, err := json.Marshal(map[string]string{"email": "ada@example.com", "message": hostile, "name": "Ada\u202eecalevoL"})
	if err != nil {
		t.Fatal(err)
	}
	q := &store.QuarantinedEnquiry{
		QuarantinedKey: store.QuarantinedKey{
			ClientID: "site", Key: "key-0001", LeadID: uuid.New(), CreatedAt: time.Now(),
			Reasons: []string{"honeypot", "link\u202ecount"},
		},
		Submission: submission,
	}
	// As stored: encoding/json escapes C0, not C1 or the bidirectional
	// controls; and a raw escape sequence as a row might hold it.
	for name, sub := range map[string][]byte{"canonical": submission, "raw": []byte(`{"message":"` + hostile + `"}`)} {
		t.Run(name, func(t *testing.T) {
			q.Submission = sub
			var out bytes.Buffer
			if err := printQuarantined(&out, q); err != nil {
				t.Fatal(err)
			}
			if got := unsafeRunes(out.String()); len(got) > 0 {
				t.Errorf("api spam show prints %v:\n%q", got, out.String())
			}
			for _, want := range []string{`\u202e`, `\u009b`, "honeypot,link"} {
				if !strings.Contains(out.String(), want) {
					t.Errorf("api spam show does not show %q:\n%s", want, out.String())
				}
			}
		})
	}

	q.Submission = submission
	var out bytes.Buffer
	if err := printJSON(&out, map[string]any{"reasons": q.Reasons, "enquiry": json.RawMessage(q.Submission)}); err != nil {
		t.Fatal(err)
	}
	if got := unsafeRunes(out.String()); len(got) > 0 {
		t.Errorf("api spam show --json prints %v:\n%q", got, out.String())
	}
	var got, want map[string]any
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(`{"reasons":["honeypot","link\u202ecount"],"enquiry":`+string(submission)+`}`), &want); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("--json reads back as %v, want %v", got, want)
	}
}
