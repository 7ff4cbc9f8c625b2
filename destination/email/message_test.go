package email

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/quotedprintable"
	"net"
	"net/mail"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/emersion/go-smtp"

	"github.com/leadintake/leadintake/destination"
	"github.com/leadintake/leadintake/lead"
)

func record() *destination.Record {
	return &destination.Record{
		LeadID: "0190c6a2-7e1a-7b3c-9d4e-000000000001", ExternalRef: "li_AbC-123_xyz",
		Lead: &lead.Lead{Email: "ada@example.com", Name: "Ada Lovelace", Company: "Analytical Engines",
			Phone: "+44 20 7946 0000", Source: "referral", Message: "We would like a demo."},
		Score: 85, Tier: "hot",
	}
}

var (
	testFrom = &mail.Address{Name: "Leadintake", Address: "notify@leads.acme.example"}
	testTo   = []*mail.Address{{Address: "sales@acme.example"}, {Name: "Lead", Address: "lead@acme.example"}}
)

// compose writes r's message and reads it back as a mail client would.
func compose(t *testing.T, r *destination.Record, now time.Time) (*mail.Message, []byte) {
	t.Helper()
	raw, err := Compose(testFrom, testTo, "leads.acme.example", r, now)
	if err != nil {
		t.Fatal(err)
	}
	m, err := mail.ReadMessage(bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("the message does not parse: %v\n%s", err, raw)
	}
	return m, raw
}

func TestMessageID(t *testing.T) {
	r := record()
	m1, _ := compose(t, r, time.Unix(1e9, 0))
	m2, _ := compose(t, r, time.Unix(2e9, 0))
	want := "<li_AbC-123_xyz.notify@leads.acme.example>"
	for _, m := range []*mail.Message{m1, m2} {
		if got := m.Header.Get("Message-Id"); got != want {
			t.Errorf("Message-ID %q, want %q on every attempt", got, want)
		}
		if m.Header.Get("In-Reply-To") != "" || m.Header.Get("References") != "" {
			t.Error("the first message replies to something")
		}
	}

	a := *r
	a.Amendment, a.Amends = 2, r.LeadID
	m, _ := compose(t, &a, time.Now())
	if got := m.Header.Get("Message-Id"); got != "<li_AbC-123_xyz.notify.2@leads.acme.example>" {
		t.Errorf("amendment's Message-ID %q", got)
	}
	for _, k := range []string{"In-Reply-To", "References"} {
		if got := m.Header.Get(k); got != want {
			t.Errorf("amendment's %s %q, want the first message's %q", k, got, want)
		}
	}
	if s := m.Header.Get("Subject"); !strings.HasPrefix(s, "Amended lead") {
		t.Errorf("amendment's subject %q", s)
	}

	bad := *r
	bad.ExternalRef = "li_a b"
	if _, err := Compose(testFrom, testTo, "leads.acme.example", &bad, time.Now()); err == nil {
		t.Error("a reference that is no dot-atom made a Message-ID")
	}
}

func TestHeaders(t *testing.T) {
	r := record()
	r.Owner = &destination.Owner{Name: "alice", Email: "alice@acme.example"}
	m, raw := compose(t, r, time.Now())
	for k, want := range map[string]string{
		"From":                      `"Leadintake" <notify@leads.acme.example>`,
		"To":                        `<sales@acme.example>, "Lead" <lead@acme.example>, <alice@acme.example>`,
		"Reply-To":                  "<ada@example.com>",
		"Subject":                   "New lead (hot, score 85): Analytical Engines",
		"Content-Type":              "text/plain; charset=utf-8",
		"Content-Transfer-Encoding": "quoted-printable",
		"Mime-Version":              "1.0",
		"Auto-Submitted":            "auto-generated",
	} {
		if got := m.Header.Get(k); got != want {
			t.Errorf("%s: %q, want %q", k, got, want)
		}
	}
	if _, err := m.Header.Date(); err != nil {
		t.Errorf("Date: %v", err)
	}
	if bytes.Contains(raw, []byte("\n\n")) || bytes.Count(raw, []byte("\n")) != bytes.Count(raw, []byte("\r\n")) {
		t.Error("a line does not end in CRLF")
	}
}

func TestReplyToOnlyForOnePlainAddress(t *testing.T) {
	for email, want := range map[string]string{
		"ada@example.com":                     "<ada@example.com>",
		"":                                    "",
		"Eve <eve@example.com>":               "",
		"a@example.com, b@example.com":        "",
		"eve@example.com\r\nBcc: v@example":   "",
		"eve@example.com\nBcc: v@example.com": "",
		"jörg@exämple.de":                     "",
		"not an address":                      "",
	} {
		r := record()
		r.Lead.Email = email
		m, _ := compose(t, r, time.Now())
		if got := m.Header.Get("Reply-To"); got != want {
			t.Errorf("email %q: Reply-To %q, want %q", email, got, want)
		}
		if len(m.Header["Bcc"]) != 0 {
			t.Errorf("email %q made a Bcc", email)
		}
	}
}

func TestSubject(t *testing.T) {
	for company, want := range map[string]string{
		"Analytical Engines":           "New lead (hot, score 85): Analytical Engines",
		"":                             "New lead (hot, score 85): (no company)",
		"X\r\nBcc: victim@example.com": "New lead (hot, score 85): X Bcc: victim@example.com",
		"Bad\u202egnp.exe":             "New lead (hot, score 85): Badgnp.exe",
		"Zürich Maschinen  AG\t":       "New lead (hot, score 85): Zürich Maschinen AG",
		"日本の会社":                        "New lead (hot, score 85): 日本の会社",
		strings.Repeat("y", 200):       "New lead (hot, score 85): " + strings.Repeat("y", 79) + "…",
	} {
		r := record()
		r.Lead.Company = company
		m, raw := compose(t, r, time.Now())
		header, _, _ := strings.Cut(string(raw), "\r\n\r\n")
		for _, line := range strings.Split(header, "\r\n") {
			if strings.HasPrefix(strings.ToLower(line), "bcc:") {
				t.Errorf("company %q injected a header line %q", company, line)
			}
			for _, c := range []byte(line) {
				if c >= 0x80 {
					t.Errorf("company %q: a header line is not ASCII (not RFC 2047-encoded): %q", company, line)
					break
				}
			}
		}
		if len(m.Header["Bcc"]) != 0 || len(m.Header) != 10 {
			t.Errorf("company %q: headers %v", company, m.Header)
		}
		got, err := new(mime.WordDecoder).DecodeHeader(m.Header.Get("Subject"))
		if err != nil || got != want {
			t.Errorf("company %q: subject %q (%v), want %q", company, got, err, want)
		}
	}
}

func TestBody(t *testing.T) {
	r := record()
	r.Lead.Name = "Eve\r\nDuplicate of: forged\u202e"
	r.Owner = &destination.Owner{Name: "alice"}
	r.Amends, r.DuplicateOf = "0190-amends", "0190-dup"
	r.Amendment = 1
	m, _ := compose(t, r, time.Now())
	b, err := io.ReadAll(m.Body)
	if err != nil {
		t.Fatal(err)
	}
	text := decodeQP(t, b)
	for _, want := range []string{
		"An amended lead: hot, score 85\r\n", "Company:      Analytical Engines\r\n",
		"Name:         Eve Duplicate of: forged\r\n", "Email:        ada@example.com\r\n",
		"Phone:        +44 20 7946 0000\r\n", "Source:       referral\r\n", "Owner:        alice\r\n",
		"Tier:         hot\r\n", "Score:        85\r\n", "Lead id:      " + r.LeadID + "\r\n",
		"Amends:       0190-amends\r\n", "Duplicate of: 0190-dup\r\n",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the text lacks %q:\n%s", want, text)
		}
	}
	if strings.Count(text, "\nDuplicate of:") != 1 {
		t.Errorf("the visitor's name made a line of its own:\n%s", text)
	}
	if strings.Contains(text, r.Lead.Message) {
		t.Error("the text carries the visitor's message, which is not among the facts")
	}
}

func TestRecipients(t *testing.T) {
	got, err := recipients(testTo, nil)
	if err != nil || strings.Join(got, ",") != "sales@acme.example,lead@acme.example" {
		t.Errorf("to alone: %v %v", got, err)
	}
	got, err = recipients(testTo, &destination.Owner{Name: "alice", Email: "alice@acme.example"})
	if err != nil || strings.Join(got, ",") != "sales@acme.example,lead@acme.example,alice@acme.example" {
		t.Errorf("with the owner: %v %v", got, err)
	}
	got, _ = recipients(testTo, &destination.Owner{Name: "lead", Email: "LEAD@acme.example"})
	if len(got) != 2 {
		t.Errorf("an owner among to is a recipient twice: %v", got)
	}
	got, _ = recipients(testTo, &destination.Owner{Name: "bob"})
	if len(got) != 2 {
		t.Errorf("an owner without email: %v", got)
	}
	_, err = recipients(testTo, &destination.Owner{Name: "eve", Email: "eve@x\r\nRCPT TO:<v@x>"})
	if Classify(err) != destination.Rejected || strings.Contains(err.Error(), "eve@") {
		t.Errorf("a bad owner email: %v", err)
	}
}

func decodeQP(t *testing.T, b []byte) string {
	t.Helper()
	out, err := io.ReadAll(quotedprintable.NewReader(bytes.NewReader(b)))
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// Classify is destination.Classify, short.
func Classify(err error) destination.Class { return destination.Classify(err) }

func TestValidate(t *testing.T) {
	const secret = "s3cret-pass-word"
	ok := func() *destination.Config {
		return &destination.Config{Name: "m", Kind: Kind, Values: map[string]string{
			"host": "smtp.example.com", "username": "leads@example.com", "password": secret, "from": "Leads <leads@example.com>",
		}, Lists: map[string][]string{"to": {"sales@example.com"}}}
	}
	if err := Spec.Validate(ok()); err != nil {
		t.Fatalf("a good configuration: %v", err)
	}
	many := make([]string, 21)
	for i := range many {
		many[i] = fmt.Sprintf("s%d@example.com", i)
	}
	for name, tc := range map[string]struct {
		edit func(c *destination.Config)
		want string // "" for none
	}{
		"defaults":            {func(c *destination.Config) {}, ""},
		"twenty":              {func(c *destination.Config) { c.Lists["to"] = many[:20] }, ""},
		"implicit":            {func(c *destination.Config) { c.Values["tls"], c.Values["port"] = "tls", "465" }, ""},
		"none on loopback":    {func(c *destination.Config) { c.Values["tls"], c.Values["host"] = "none", "127.0.0.1" }, ""},
		"none on ::1":         {func(c *destination.Config) { c.Values["tls"], c.Values["host"] = "none", "::1" }, ""},
		"none on localhost":   {func(c *destination.Config) { c.Values["tls"], c.Values["host"] = "none", "localhost" }, ""},
		"no auth":             {func(c *destination.Config) { delete(c.Values, "username"); delete(c.Values, "password") }, ""},
		"none on a host":      {func(c *destination.Config) { c.Values["tls"] = "none" }, "tls: none is for a relay on a loopback address only"},
		"none on 10.0.0.1":    {func(c *destination.Config) { c.Values["tls"], c.Values["host"] = "none", "10.0.0.1" }, "tls: none"},
		"twenty-one":          {func(c *destination.Config) { c.Lists["to"] = many }, "to must list 1 to 20 addresses, not 21"},
		"no to":               {func(c *destination.Config) { c.Lists["to"] = nil }, "to must list 1 to 20"},
		"bad to":              {func(c *destination.Config) { c.Lists["to"] = []string{"a@example.com", "not an address"} }, "to[1] must be one e-mail address"},
		"to with CRLF":        {func(c *destination.Config) { c.Lists["to"] = []string{"a@example.com\r\nRCPT TO:<v@x>"} }, "to[0] must be"},
		"two in one to":       {func(c *destination.Config) { c.Lists["to"] = []string{"a@example.com, b@example.com"} }, "to[0] must be"},
		"bad from":            {func(c *destination.Config) { c.Values["from"] = "leads" }, "from must be one e-mail address"},
		"from without domain": {func(c *destination.Config) { c.Values["from"] = "leads@[127.0.0.1]" }, "from"},
		"bad tls":             {func(c *destination.Config) { c.Values["tls"] = "ssl" }, "tls must be starttls, tls or none"},
		"bad port":            {func(c *destination.Config) { c.Values["port"] = "70000" }, "port must be a number from 1 to 65535"},
		"host with scheme":    {func(c *destination.Config) { c.Values["host"] = "smtp://smtp.example.com" }, "host must be a host name"},
		"host with port":      {func(c *destination.Config) { c.Values["host"] = "smtp.example.com:587" }, "host must be a host name"},
		"password alone":      {func(c *destination.Config) { delete(c.Values, "username") }, "username and password go together"},
		"password with CRLF":  {func(c *destination.Config) { c.Values["password"] = secret + "\r\nQUIT" }, "username and password must be one line each"},
		"map":                 {func(c *destination.Config) { c.Map = destination.Mapping{{Field: "x", Source: "email"}} }, "map:"},
		"base_url":            {func(c *destination.Config) { c.BaseURL = "https://smtp.example.com" }, "base_url:"},
	} {
		c := ok()
		tc.edit(c)
		err := Spec.Validate(c)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: error %v, want %q", name, err, tc.want)
		case err != nil && (strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), "@") || strings.Contains(err.Error(), "\n")):
			t.Errorf("%s: the error %q shows a value or is not one line", name, err)
		}
	}
	c := ok()
	ch, err := New(c)
	if err != nil || ch.s.port != DefaultPort || ch.s.mode != TLSStartTLS || ch.s.domain != "example.com" {
		t.Errorf("defaults: %+v %v", ch, err)
	}
}

func TestClassify(t *testing.T) {
	reply := func(code int, enh smtp.EnhancedCode) error {
		return &smtp.SMTPError{Code: code, EnhancedCode: enh, Message: "<ada@example.com> said no"}
	}
	for _, tc := range []struct {
		op        string
		err       error
		afterDot  bool
		class     destination.Class
		uncertain bool
		code      string
	}{
		{opSend, reply(250, smtp.NoEnhancedCode), true, destination.Transient, true, ""},
		{opSend, reply(451, smtp.EnhancedCode{4, 3, 0}), true, destination.Transient, false, "4.3.0"},
		{opSend, reply(554, smtp.EnhancedCode{5, 6, 0}), true, destination.Rejected, false, "5.6.0"},
		{opSend, io.EOF, true, destination.Transient, true, ""},
		{opSend, os.ErrDeadlineExceeded, true, destination.Transient, true, ""},
		{opData, io.EOF, false, destination.Transient, false, ""},
		{opData, reply(552, smtp.EnhancedCode{5, 3, 4}), false, destination.Rejected, false, "5.3.4"},
		{opAuth, reply(535, smtp.EnhancedCode{5, 7, 8}), false, destination.Unauthorized, false, "5.7.8"},
		{opAuth, reply(504, smtp.EnhancedCode{5, 5, 4}), false, destination.Unauthorized, false, "5.5.4"},
		{opAuth, reply(538, smtp.EnhancedCode{5, 7, 11}), false, destination.Unauthorized, false, "5.7.11"},
		{opAuth, reply(454, smtp.EnhancedCode{4, 7, 0}), false, destination.Transient, false, "4.7.0"},
		{opMail, reply(530, smtp.EnhancedCode{5, 7, 0}), false, destination.Unauthorized, false, "5.7.0"},
		{opMail, reply(421, smtp.EnhancedCode{4, 7, 0}), false, destination.Transient, false, "4.7.0"},
		{opRcpt, reply(550, smtp.EnhancedCode{5, 1, 1}), false, destination.Rejected, false, "5.1.1"},
		{opConnect, &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}, false, destination.Transient, false, ""},
		{opStartTLS, errors.New("smtp: server doesn't support STARTTLS"), false, destination.Unauthorized, false, "starttls_unavailable"},
	} {
		e := classify(tc.op, tc.err, tc.afterDot)
		if e.Class != tc.class || e.Uncertain != tc.uncertain || e.Code != tc.code {
			t.Errorf("%s %v (after dot %v): %s uncertain %v code %q; want %s %v %q",
				tc.op, tc.err, tc.afterDot, e.Class, e.Uncertain, e.Code, tc.class, tc.uncertain, tc.code)
		}
		if strings.Contains(e.Error(), "ada@") || strings.Contains(e.Error(), "said no") {
			t.Errorf("the error %q shows the reply's text", e)
		}
		if se, ok := tc.err.(*smtp.SMTPError); ok && !strings.Contains(e.Error(), fmt.Sprintf("reply %d", se.Code)) {
			t.Errorf("the error %q does not name the reply code", e)
		}
	}
}
