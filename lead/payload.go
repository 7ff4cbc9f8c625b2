package lead

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"io"
	"maps"
	"net/mail"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/gowebpki/jcs"

	"github.com/leadintake/leadintake/response"
)

// MaxJSONDepth is the deepest nesting of arrays and objects a body may have.
const MaxJSONDepth = 32

// Field limits, in characters.
const (
	maxEmail    = 254
	maxSource   = 64
	maxName     = 200
	maxPhone    = 40
	maxWebsite  = 2048
	maxMessage  = 5000
	maxUTM      = 20
	maxUTMValue = 200
	// A form's own questions (fields): how many, how long a name, how long
	// an answer.
	maxFields     = 50
	maxFieldName  = 64
	maxFieldValue = 1000
)

// Lead is one enquiry as the caller submitted it, after validation.
type Lead struct {
	Email   string            `json:"email"`
	Source  string            `json:"source"`
	Name    string            `json:"name,omitempty"`
	Company string            `json:"company,omitempty"`
	Phone   string            `json:"phone,omitempty"`
	Website string            `json:"website,omitempty"`
	Message string            `json:"message,omitempty"`
	UTM     map[string]string `json:"utm,omitempty"`
	Consent *bool             `json:"consent,omitempty"`
	// Fields are the form's own questions (budget, team size, ...), by a
	// name of a-z 0-9 _: the lead carries them to the CRM as they were
	// answered, and they are personal data like the rest.
	Fields map[string]string `json:"fields,omitempty"`
	// Attribution is where the lead came from (its first and last
	// touch); nil when not given.
	Attribution *Attribution `json:"attribution,omitempty"`
}

// Payload is a decoded, validated request body.
type Payload struct {
	Lead Lead
	// Canonical is the body in RFC 8785 canonical form; it is what the lead
	// row stores.
	Canonical []byte
	// Fingerprint is SHA-256 over Canonical, and over the superseded key of
	// an amendment (see Supersede).
	Fingerprint [sha256.Size]byte
	// Supersedes is the key this request amends; empty for none.
	Supersedes string
}

// Supersede makes the payload an amendment of key: the key becomes part of
// the fingerprint, so that the same Idempotency-Key sent with another
// Supersedes, or none, is another request. A payload without it keeps the
// fingerprint of its canonical form alone.
func (p *Payload) Supersede(key string) {
	h := sha256.New()
	h.Write(p.Canonical)
	h.Write([]byte("\x00supersedes\x00"))
	h.Write([]byte(key))
	h.Sum(p.Fingerprint[:0])
	p.Supersedes = key
}

// RawHash is the SHA-256 of a request as it arrived: its body's bytes and
// the key it supersedes (empty for none). Two requests with the same raw
// hash are the same request; two with different ones may still be (the
// fingerprint, of the canonical form, decides).
func RawHash(body []byte, supersedes string) []byte {
	h := sha256.New()
	h.Write(body)
	if supersedes != "" {
		h.Write([]byte("\x00supersedes\x00"))
		h.Write([]byte(supersedes))
	}
	return h.Sum(nil)
}

// DecodeOpts are the rules of DecodeSubmission that come from configuration.
type DecodeOpts struct {
	// AllowedSources lists the allowed values of source; empty allows any.
	AllowedSources []string
}

// Decode decodes and validates a request body and computes its
// fingerprint. It returns a *response.Error: CodeInvalidJSON for a body that is not
// one strict JSON object (malformed, invalid UTF-8, a duplicated member name,
// nested deeper than MaxJSONDepth, trailing data), CodeUnknownField for
// members the API does not know, and CodeValidationFailed with one detail per
// broken rule; either lists at most response.MaxDetails, the first in member
// order, and says so in its message when there were more.
func Decode(body []byte, opts *DecodeOpts) (*Payload, error) {
	members, err := strictMembers(body)
	if err != nil {
		return nil, err
	}
	lead, err := leadFromMembers(members, opts)
	if err != nil {
		return nil, err
	}
	canonical, err := jcs.Transform(body)
	if err != nil {
		return nil, &response.Error{Code: response.CodeInvalidJSON, Message: "the body cannot be put in canonical form", Err: err}
	}
	return &Payload{Lead: *lead, Canonical: canonical, Fingerprint: sha256.Sum256(canonical)}, nil
}

// strictMembers reads body, in one pass over its tokens, as one strict JSON
// object: nothing after it, valid UTF-8 in every string, no duplicate member
// names at any level, at most MaxJSONDepth levels. It returns the raw value
// of each member.
func strictMembers(body []byte) (map[string]jsontext.Value, error) {
	invalid := func(msg string, err error) error {
		return &response.Error{Code: response.CodeInvalidJSON, Message: msg, Err: err}
	}
	dec := jsontext.NewDecoder(bytes.NewReader(body))
	if dec.PeekKind() != '{' {
		if _, err := dec.ReadToken(); err != nil {
			return nil, invalid("the body is not valid JSON", err)
		}
		return nil, invalid("the body must be a JSON object", nil)
	}
	if _, err := dec.ReadToken(); err != nil {
		return nil, invalid("the body is not valid JSON", err)
	}
	members := make(map[string]jsontext.Value, 10)
	for dec.PeekKind() != '}' {
		tok, err := dec.ReadToken()
		if err != nil {
			return nil, invalid("the body is not valid JSON", err)
		}
		name := tok.String() // before the next read voids tok
		start := dec.InputOffset()
		// Every token of the value is read, so that its depth is known.
		for {
			if _, err := dec.ReadToken(); err != nil {
				return nil, invalid("the body is not valid JSON", err)
			}
			if dec.StackDepth() > MaxJSONDepth {
				return nil, invalid("the body is nested too deeply", nil)
			}
			if dec.StackDepth() == 1 {
				break
			}
		}
		// The raw value, without the separator and white space before it.
		members[name] = bytes.TrimLeft(body[start:dec.InputOffset()], " \t\r\n:")
	}
	if _, err := dec.ReadToken(); err != nil { // the closing brace
		return nil, invalid("the body is not valid JSON", err)
	}
	if _, err := dec.ReadToken(); !errors.Is(err, io.EOF) {
		return nil, invalid("the body must hold exactly one JSON value", err)
	}
	return members, nil
}

// fieldRules validates one member; each appends its problems to v.
var fieldRules = map[string]func(v *validator, raw jsontext.Value, lead *Lead){
	"email": func(v *validator, raw jsontext.Value, lead *Lead) {
		if s, ok := v.str("email", raw, 1, maxEmail); ok {
			if !isEmail(s) {
				v.add("email", "must be one address of the form local@domain")
			}
			lead.Email = s
		}
	},
	"source": func(v *validator, raw jsontext.Value, lead *Lead) {
		if s, ok := v.str("source", raw, 1, maxSource); ok {
			if len(v.opts.AllowedSources) > 0 && !slices.Contains(v.opts.AllowedSources, s) {
				v.add("source", "must be one of: "+strings.Join(v.opts.AllowedSources, ", "))
			}
			lead.Source = s
		}
	},
	"name":    optionalString("name", maxName, func(l *Lead, s string) { l.Name = s }),
	"company": optionalString("company", maxName, func(l *Lead, s string) { l.Company = s }),
	"phone":   optionalString("phone", maxPhone, func(l *Lead, s string) { l.Phone = s }),
	"message": optionalString("message", maxMessage, func(l *Lead, s string) { l.Message = s }),
	"website": func(v *validator, raw jsontext.Value, lead *Lead) {
		if raw.Kind() == 'n' {
			return
		}
		if s, ok := v.str("website", raw, 0, maxWebsite); ok {
			if !isWebURL(s) {
				v.add("website", "must be an absolute http or https URL")
			}
			lead.Website = s
		}
	},
	"utm": func(v *validator, raw jsontext.Value, lead *Lead) {
		lead.UTM = validateUTM(v, "utm", raw)
	},
	"attribution": validateAttribution,
	"fields": func(v *validator, raw jsontext.Value, lead *Lead) {
		if raw.Kind() == 'n' {
			return
		}
		var fields map[string]jsontext.Value
		if raw.Kind() != '{' || json.Unmarshal(raw, &fields) != nil {
			v.add("fields", "must be an object of strings")
			return
		}
		if len(fields) > maxFields {
			v.add("fields", "must have at most "+strconv.Itoa(maxFields)+" members")
		}
		lead.Fields = make(map[string]string, len(fields))
		for _, name := range slices.Sorted(maps.Keys(fields)) {
			if !IsFieldName(name) {
				v.add("fields."+name, "the name must be 1 to "+strconv.Itoa(maxFieldName)+" characters of a-z 0-9 _")
				continue
			}
			if s, ok := v.str("fields."+name, fields[name], 0, maxFieldValue); ok {
				lead.Fields[name] = s
			}
		}
		if len(lead.Fields) == 0 {
			lead.Fields = nil
		}
	},
	"consent": func(v *validator, raw jsontext.Value, lead *Lead) {
		switch raw.Kind() {
		case 'n':
		case 't', 'f':
			b := raw.Kind() == 't'
			lead.Consent = &b
		default:
			v.add("consent", "must be a boolean")
		}
	},
}

// validateUTM checks a utm object (at most 20 members, each value a string
// of at most 200 characters) at field, and returns its members; nil for
// none.
func validateUTM(v *validator, field string, raw jsontext.Value) map[string]string {
	switch raw.Kind() {
	case 'n':
		return nil
	case '{':
	default:
		v.add(field, "must be an object of strings")
		return nil
	}
	var utm map[string]jsontext.Value
	if err := json.Unmarshal(raw, &utm); err != nil {
		v.add(field, "must be an object of strings")
		return nil
	}
	if len(utm) > maxUTM {
		v.add(field, "must have at most 20 members")
	}
	for name := range utm {
		if strings.IndexByte(name, 0) >= 0 {
			v.add(field, "member names must not contain U+0000")
			return nil
		}
	}
	out := make(map[string]string, len(utm))
	for _, name := range slices.Sorted(maps.Keys(utm)) {
		if s, ok := v.str(field+"."+name, utm[name], 0, maxUTMValue); ok {
			out[name] = s
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

func optionalString(field string, max int, set func(*Lead, string)) func(*validator, jsontext.Value, *Lead) {
	return func(v *validator, raw jsontext.Value, lead *Lead) {
		if raw.Kind() == 'n' {
			return
		}
		if s, ok := v.str(field, raw, 0, max); ok {
			set(lead, s)
		}
	}
}

func leadFromMembers(members map[string]jsontext.Value, opts *DecodeOpts) (*Lead, error) {
	if opts == nil {
		opts = &DecodeOpts{}
	}
	var unknown []string
	for name := range members {
		if _, ok := fieldRules[name]; !ok {
			unknown = append(unknown, name)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		msg := "the body has members the API does not know"
		if len(unknown) > response.MaxDetails {
			unknown = unknown[:response.MaxDetails]
			msg += "; details lists the first " + strconv.Itoa(response.MaxDetails)
		}
		details := make([]response.Detail, len(unknown))
		for i, name := range unknown {
			details[i] = response.Detail{Field: name, Problem: "is not a field of a lead"}
		}
		return nil, &response.Error{Code: response.CodeUnknownField, Message: msg, Details: details}
	}

	v := &validator{opts: opts}
	lead := &Lead{}
	for _, required := range []string{"email", "source"} {
		if raw, ok := members[required]; !ok || raw.Kind() == 'n' {
			v.add(required, "is required")
		}
	}
	names := make([]string, 0, len(members))
	for name := range members {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		raw := members[name]
		if (name == "email" || name == "source") && raw.Kind() == 'n' {
			continue
		}
		fieldRules[name](v, raw, lead)
	}
	if len(v.unknown) > 0 {
		msg := "the body has members the API does not know"
		if v.moreUnknown {
			msg += "; details lists the first " + strconv.Itoa(response.MaxDetails)
		}
		return nil, &response.Error{Code: response.CodeUnknownField, Message: msg, Details: v.unknown}
	}
	if len(v.details) > 0 {
		msg := "the lead breaks the rules listed in details"
		if v.more {
			msg = "the lead breaks more rules than details lists: it lists the first " + strconv.Itoa(response.MaxDetails)
		}
		return nil, &response.Error{Code: response.CodeValidationFailed, Message: msg, Details: v.details}
	}
	return lead, nil
}

// validator gathers the broken rules of a lead: at most
// response.MaxDetails of them, and whether there were more.
type validator struct {
	opts    *DecodeOpts
	details []response.Detail
	more    bool
	// unknown are members of nested objects the API does not know
	// (attribution's): unknown_field, like a top-level one; moreUnknown,
	// whether there were more than response.MaxDetails of them.
	unknown     []response.Detail
	moreUnknown bool
}

func (v *validator) add(field, problem string) {
	if len(v.details) == response.MaxDetails {
		v.more = true
		return
	}
	v.details = append(v.details, response.Detail{Field: field, Problem: problem})
}

func (v *validator) unknownMember(field string) {
	if len(v.unknown) == response.MaxDetails {
		v.moreUnknown = true
		return
	}
	v.unknown = append(v.unknown, response.Detail{Field: field, Problem: "is not a member the API knows"})
}

// str decodes a JSON string and checks its length in characters.
func (v *validator) str(field string, raw jsontext.Value, min, max int) (string, bool) {
	if raw.Kind() != '"' {
		v.add(field, "must be a string")
		return "", false
	}
	unquoted, err := jsontext.AppendUnquote(nil, raw)
	if err != nil {
		v.add(field, "must be a string")
		return "", false
	}
	s := string(unquoted)
	n := utf8.RuneCountInString(s)
	switch {
	case strings.IndexByte(s, 0) >= 0:
		// PostgreSQL can store U+0000 in neither jsonb nor text.
		v.add(field, "must not contain U+0000")
		return "", false
	case n < min && min == 1:
		v.add(field, "must not be empty")
		return "", false
	case n > max:
		v.add(field, "must be at most "+strconv.Itoa(max)+" characters")
		return "", false
	}
	return s, true
}

// IsFieldName reports whether name may name one of a form's own questions:
// 1..64 of a-z 0-9 _, a name any CRM and any template can hold as it is.
func IsFieldName(name string) bool {
	if name == "" || len(name) > maxFieldName {
		return false
	}
	for i := range len(name) {
		if c := name[i]; (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '_' {
			return false
		}
	}
	return true
}

func isEmail(s string) bool {
	addr, err := mail.ParseAddress(s)
	if err != nil || addr.Name != "" || addr.Address != s {
		return false
	}
	local, domain, ok := strings.Cut(s, "@")
	return ok && local != "" && domain != "" && !strings.ContainsAny(s, " \t<>")
}

func isWebURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "" && u.Hostname() != ""
}
