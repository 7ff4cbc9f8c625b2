package lead_test

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/mail"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/leadintake/leadintake/lead"
	"github.com/leadintake/leadintake/response"
)

// validBody is a lead that breaks no rule.
const validBody = `{"email":"ada@example.com","source":"website","name":"Ada Lovelace"}`

// fullLead sets every field.
const fullLead = `{"email":"ada@example.com","source":"referral","name":"Ada Lovelace",` +
	`"company":"Analytical Engines","phone":"+44 20 7946 0000","website":"https://example.com/ada",` +
	`"message":"Hello, \"world\"","utm":{"campaign":"spring","medium":"email"},"consent":true}`

var decodeOpts = &lead.DecodeOpts{AllowedSources: []string{"website", "linkedin", "referral", "ads", "event"}}

func decode(t *testing.T, body string) *lead.Payload {
	t.Helper()
	sub, err := lead.Decode([]byte(body), decodeOpts)
	if err != nil {
		t.Fatalf("decode %s: %v", body, err)
	}
	return sub
}

func TestDecodeSubmission(t *testing.T) {
	t.Parallel()

	t.Run("DecodesEveryField", func(t *testing.T) {
		t.Parallel()
		consent := true
		want := lead.Lead{
			Email: "ada@example.com", Source: "referral", Name: "Ada Lovelace", Company: "Analytical Engines",
			Phone: "+44 20 7946 0000", Website: "https://example.com/ada", Message: `Hello, "world"`,
			UTM: map[string]string{"campaign": "spring", "medium": "email"}, Consent: &consent,
		}
		sub := decode(t, fullLead)
		if !reflect.DeepEqual(sub.Lead, want) {
			t.Fatalf("lead %+v, want %+v", sub.Lead, want)
		}
		const canonical = `{"company":"Analytical Engines","consent":true,"email":"ada@example.com",` +
			`"message":"Hello, \"world\"","name":"Ada Lovelace","phone":"+44 20 7946 0000","source":"referral",` +
			`"utm":{"campaign":"spring","medium":"email"},"website":"https://example.com/ada"}`
		if string(sub.Canonical) != canonical {
			t.Fatalf("canonical form\n%s\nwant\n%s", sub.Canonical, canonical)
		}
		if sub.Fingerprint != sha256.Sum256(sub.Canonical) {
			t.Fatal("the fingerprint is not SHA-256 over the canonical form")
		}
	})

	t.Run("FingerprintIgnoresMemberOrderAndWhiteSpace", func(t *testing.T) {
		t.Parallel()
		want := decode(t, fullLead).Fingerprint
		for _, body := range []string{
			// Members in another order, inside utm too.
			`{"consent":true,"utm":{"medium":"email","campaign":"spring"},"message":"Hello, \"world\"",` +
				`"website":"https://example.com/ada","phone":"+44 20 7946 0000","company":"Analytical Engines",` +
				`"name":"Ada Lovelace","source":"referral","email":"ada@example.com"}`,
			// Pretty-printed, with every kind of JSON white space.
			"\r\n\t {\n  \"email\" : \"ada@example.com\",\n\t\"source\":\"referral\" ,\"name\":\"Ada Lovelace\",\r\n" +
				"  \"company\":\"Analytical Engines\", \"phone\":\"+44 20 7946 0000\",\"website\":\"https://example.com/ada\",\n" +
				"  \"message\":\"Hello, \\\"world\\\"\",\"utm\":{ \"campaign\" : \"spring\" , \"medium\" : \"email\" },\"consent\" : true\n}\n\n",
			// The same strings, escaped differently.
			`{"email":"ada\u0040example.com","source":"\u0072eferral","name":"Ada Lovelace",` +
				`"company":"Analytical Engines","phone":"+44 20 7946 0000","website":"https:\/\/example.com\/ada",` +
				`"message":"Hello, \u0022world\u0022","utm":{"c\u0061mpaign":"spring","medium":"email"},"consent":true}`,
		} {
			if got := decode(t, body).Fingerprint; got != want {
				t.Errorf("fingerprint changed for\n%s", body)
			}
		}
	})

	t.Run("FingerprintChangesWithAnyField", func(t *testing.T) {
		t.Parallel()
		// Each variation changes fullLead in one way; every fingerprint
		// must differ from fullLead's and from every other's.
		variations := map[string]string{
			"email":           `"ada@example.com"→"ada@example.org"`,
			"email case":      `"ada@example.com"→"Ada@example.com"`,
			"source":          `"referral"→"linkedin"`,
			"name":            `"Ada Lovelace"→"Ada  Lovelace"`,
			"name trailing":   `"Ada Lovelace"→"Ada Lovelace "`,
			"company":         `"Analytical Engines"→"Analytical Engine"`,
			"phone":           `"+44 20 7946 0000"→"+44 20 7946 0001"`,
			"website":         `"https://example.com/ada"→"https://example.com/ada/"`,
			"message":         `"Hello, \"world\""→"Hello, world"`,
			"utm value":       `"spring"→"summer"`,
			"utm name":        `"medium"→"source"`,
			"consent":         `"consent":true→"consent":false`,
			"consent null":    `"consent":true→"consent":null`,
			"consent missing": `,"consent":true→`,
			"utm missing":     `,"utm":{"campaign":"spring","medium":"email"}→`,
			"utm empty":       `{"campaign":"spring","medium":"email"}→{}`,
			"utm extra":       `"medium":"email"→"medium":"email","term":"x"`,
		}
		seen := map[[sha256.Size]byte]string{decode(t, fullLead).Fingerprint: "fullLead"}
		for name, change := range variations {
			from, to, _ := strings.Cut(change, "→")
			if !strings.Contains(fullLead, from) {
				t.Fatalf("variation %s: %s is not in fullLead", name, from)
			}
			fp := decode(t, strings.Replace(fullLead, from, to, 1)).Fingerprint
			if other, ok := seen[fp]; ok {
				t.Errorf("variation %s has the fingerprint of %s", name, other)
			}
			seen[fp] = name
		}
	})

	t.Run("CountsCharactersNotBytes", func(t *testing.T) {
		t.Parallel()
		decode(t, `{"email":"ada@example.com","source":"website","name":"`+strings.Repeat("é", 200)+`"}`)
		_, err := lead.Decode([]byte(`{"email":"ada@example.com","source":"website","name":"`+strings.Repeat("é", 201)+`"}`), decodeOpts)
		if response.CodeOf(err) != response.CodeValidationFailed {
			t.Fatalf("201 characters: %v, want validation_failed", err)
		}
	})

	t.Run("AllowsAnySourceWithoutList", func(t *testing.T) {
		t.Parallel()
		if _, err := lead.Decode([]byte(`{"email":"ada@example.com","source":"carrier-pigeon"}`), nil); err != nil {
			t.Fatal(err)
		}
	})
}

// decodeSeeds are bodies worth starting a fuzzer from: valid leads, the
// corners of canonical JSON (escapes, member order by UTF-16 code units,
// control characters), and near misses.
var decodeSeeds = []string{
	validBody,
	fullLead,
	`{"email":"a@b","source":"ads","consent":false,"utm":null,"website":null}`,
	`{"source":"event","email":"x@example.com","utm":{"\uffff":"a","😀":"b","\ud83d\ude00x":"c","é":"d","e":"e","":"f"}}`,
	`{"email":"ada@example.com","source":"website","message":"\u0000\u001f\u007f\u2028\u2029\b\f\n\r\t\/\\\""}`,
	`{"email":"ada@example.com","source":"website","name":"\ud834\udd1e \u00e9 e\u0301 \ufeff"}`,
	"{\"email\":\"ada@example.com\",\"source\":\"website\",\"name\":\"\x7f\xc3\xa9\"}",
	`{"email":"ada@example.com","source":"website","utm":{"a":"1","b":"2"}}  `,
	`{"email":"ada@example.com","source":"website","utm":{"a":1}}`,
	`{"email":"ada@example.com","source":"website","website":"http://[::1]:80/x?y#z"}`,
	`{"email":"\"a b\"@example.com","source":"website"}`,
	`{"email":"ada@example.com","source":"website","email":"ada@example.com"}`,
	`{"email":"ada@example.com","source":"website"`,
	`{"email":"ada@example.com","source":"website"}{}`,
	`{"email":"ada@example.com","source":"website","utm":{"a":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}}`,
	`{"email":"ada@example.com","source":"website","n":1e400}`,
	`{"email":"ada@example.com","source":"website","fields":{"budget":"10k","team_size":"5","z":""}}`,
	`{"email":"ada@example.com","source":"website","fields":{"Team Size":"5","q":"\u00e9\n"}}`,
	`{"email":"ada@example.com","source":"ads","attribution":{"first":{"landing_page":"https://acme.example/?utm_source=g","referrer":"https://g.example/","utm":{"source":"g"},"click_ids":{"gclid":"abc"},"at":"2025-03-01T10:00:00Z"},"last":{"landing_page":"http://acme.example/contact"}}}`,
	`{"email":"ada@example.com","source":"ads","attribution":{"first":null,"last":{"click_ids":{"gclid":null,"ttclid":"x"},"at":"2025-03-01T10:00:00.5+01:00"}}}`,
	`{"email":"ada@example.com","source":"ads","attribution":{"first":{"landing_page":"ftp://x","at":"2025-02-30T10:00:00Z","utm":{"a":1}}}}`,
	`[]`, `"x"`, `1`, ``, `{}`, "{\"email\":\"a\xffb@example.com\",\"source\":\"website\"}",
}

func FuzzDecodeSubmission(f *testing.F) {
	for _, seed := range decodeSeeds {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		sub, err := lead.Decode(body, decodeOpts)
		if err != nil {
			switch code := response.CodeOf(err); code {
			case response.CodeInvalidJSON, response.CodeUnknownField, response.CodeValidationFailed:
			default:
				t.Fatalf("error code %s: %v", code, err)
			}
			return
		}
		requireValidLead(t, sub.Lead)
		if sub.Fingerprint != sha256.Sum256(sub.Canonical) {
			t.Fatal("the fingerprint is not SHA-256 over the canonical form")
		}

		// The canonical form is a fixed point: decoding it again gives the
		// same lead, the same canonical bytes and the same fingerprint.
		again, err := lead.Decode(sub.Canonical, decodeOpts)
		if err != nil {
			t.Fatalf("canonical form %q of %q refused: %v", sub.Canonical, body, err)
		}
		if !bytes.Equal(again.Canonical, sub.Canonical) || again.Fingerprint != sub.Fingerprint {
			t.Fatalf("canonical form not stable: %q gave %q", sub.Canonical, again.Canonical)
		}
		if !reflect.DeepEqual(again.Lead, sub.Lead) {
			t.Fatalf("the canonical form decodes to %+v, the body to %+v", again.Lead, sub.Lead)
		}

		requireCanonicalAgrees(t, body, sub.Canonical)
	})
}

// requireCanonicalAgrees checks canonical, made by gowebpki/jcs, against a
// second implementation of RFC 8785: jsontext's.
func requireCanonicalAgrees(t *testing.T, body, canonical []byte) {
	t.Helper()
	v := jsontext.Value(slices.Clone(body))
	if err := v.Canonicalize(); err != nil {
		t.Fatalf("jsontext cannot canonicalize accepted body %q: %v", body, err)
	}
	if !bytes.Equal(v, canonical) {
		t.Fatalf("canonical forms differ for %q:\njcs:      %q\njsontext: %q", body, canonical, []byte(v))
	}
}

// requireValidLead checks a decoded lead against the contract's rules,
// written out independently of the code.
func requireValidLead(t *testing.T, l lead.Lead) {
	t.Helper()
	addr, err := mail.ParseAddress(l.Email)
	switch {
	case err != nil || addr.Address != l.Email || addr.Name != "" || !strings.Contains(l.Email, "@"):
		t.Fatalf("accepted email %q is not one address", l.Email)
	case utf8.RuneCountInString(l.Email) > 254:
		t.Fatalf("accepted email of %d characters", utf8.RuneCountInString(l.Email))
	case !slices.Contains(decodeOpts.AllowedSources, l.Source):
		t.Fatalf("accepted source %q", l.Source)
	case utf8.RuneCountInString(l.Name) > 200, utf8.RuneCountInString(l.Company) > 200,
		utf8.RuneCountInString(l.Phone) > 40, utf8.RuneCountInString(l.Message) > 5000,
		utf8.RuneCountInString(l.Website) > 2048, len(l.UTM) > 20:
		t.Fatalf("accepted a field over its limit: %+v", l)
	case l.Website != "" && !strings.HasPrefix(l.Website, "http://") && !strings.HasPrefix(l.Website, "https://"):
		t.Fatalf("accepted website %q", l.Website)
	}
	for name, value := range l.UTM {
		if utf8.RuneCountInString(value) > 200 {
			t.Fatalf("accepted utm %q of %d characters", name, utf8.RuneCountInString(value))
		}
	}
	if a := l.Attribution; a != nil {
		requireValidTouch(t, a.First)
		requireValidTouch(t, a.Last)
	}
	if len(l.Fields) > 50 {
		t.Fatalf("accepted %d fields", len(l.Fields))
	}
	for name, value := range l.Fields {
		if name == "" || len(name) > 64 || strings.Trim(name, "abcdefghijklmnopqrstuvwxyz0123456789_") != "" {
			t.Fatalf("accepted the field name %q", name)
		}
		if utf8.RuneCountInString(value) > 1000 || strings.ContainsRune(value, 0) {
			t.Fatalf("accepted field %s of %d characters", name, utf8.RuneCountInString(value))
		}
	}
}

func FuzzFingerprintReorder(f *testing.F) {
	f.Add("ada", uint8(0), "Ada Lovelace", "Analytical Engines", "+44 20", "Hello", "campaign", "spring", "medium", "email", true, uint64(1), uint64(2))
	f.Add("x", uint8(3), "", "", "", "", "\uffff", "a", "😀", "b", false, uint64(7), uint64(7))
	f.Add("o'brien", uint8(2), "\u2028\x00\"\\/", "<&>", "\t", "\ud7ff\ue000", "", "", "a", "", true, uint64(0), uint64(1<<63))
	f.Add("q", uint8(1), "é", "e\u0301", "\x7f", strings.Repeat("m", 300), "k", "\xff", "k", "dup", false, uint64(42), uint64(43))
	f.Fuzz(func(t *testing.T, local string, source uint8, name, company, phone, message, utmName1, utmValue1, utmName2, utmValue2 string, consent bool, seed1, seed2 uint64) {
		members := validMembers(local, source, name, company, phone, message, utmName1, utmValue1, utmName2, utmValue2, consent)
		body1 := encodeLead(members, rand.New(rand.NewPCG(seed1, 1)))
		body2 := encodeLead(members, rand.New(rand.NewPCG(seed2, 2)))
		sub1, err := lead.Decode(body1, decodeOpts)
		if err != nil {
			t.Fatalf("valid lead %s refused: %v", body1, err)
		}
		sub2, err := lead.Decode(body2, decodeOpts)
		if err != nil {
			t.Fatalf("valid lead %s refused: %v", body2, err)
		}
		if sub1.Fingerprint != sub2.Fingerprint || !bytes.Equal(sub1.Canonical, sub2.Canonical) {
			t.Fatalf("one lead, two fingerprints:\n%s\n%s\ncanonical:\n%s\n%s", body1, body2, sub1.Canonical, sub2.Canonical)
		}
		requireCanonicalAgrees(t, body1, sub1.Canonical)
	})
}

// member is one member of a JSON object about to be encoded: its value is a
// string, a bool, or an object of strings.
type member struct {
	name  string
	value any
}

// validMembers builds a valid lead out of arbitrary strings.
func validMembers(local string, source uint8, name, company, phone, message, utmName1, utmValue1, utmName2, utmValue2 string, consent bool) []member {
	atom := strings.Map(func(r rune) rune {
		if r < 128 && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			return r
		}
		return -1
	}, local)
	atom = truncate(cmp.Or(atom, "x"), 64)
	sources := decodeOpts.AllowedSources
	utm := []member{{valid(utmName1), truncate(valid(utmValue1), 200)}}
	if n := valid(utmName2); n != utm[0].name {
		utm = append(utm, member{n, truncate(valid(utmValue2), 200)})
	}
	return []member{
		{"email", atom + "@example.com"},
		{"source", sources[int(source)%len(sources)]},
		{"name", truncate(valid(name), 200)},
		{"company", truncate(valid(company), 200)},
		{"phone", truncate(valid(phone), 40)},
		{"message", truncate(valid(message), 5000)},
		{"utm", utm},
		{"consent", consent},
	}
}

// valid makes s a string a lead may hold: valid UTF-8, without U+0000.
func valid(s string) string {
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
}

func truncate(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n])
}

// encodeLead writes members as one JSON object, in an order, with white space
// and with string escapes that rnd picks.
func encodeLead(members []member, rnd *rand.Rand) []byte {
	var b strings.Builder
	encodeObject(&b, members, rnd)
	return []byte(b.String())
}

func encodeObject(b *strings.Builder, members []member, rnd *rand.Rand) {
	members = slices.Clone(members)
	rnd.Shuffle(len(members), func(i, j int) { members[i], members[j] = members[j], members[i] })
	space(b, rnd)
	b.WriteByte('{')
	for i, m := range members {
		if i > 0 {
			b.WriteByte(',')
		}
		space(b, rnd)
		encodeString(b, m.name, rnd)
		space(b, rnd)
		b.WriteByte(':')
		space(b, rnd)
		switch v := m.value.(type) {
		case string:
			encodeString(b, v, rnd)
		case bool:
			fmt.Fprint(b, v)
		case []member:
			encodeObject(b, v, rnd)
		}
		space(b, rnd)
	}
	b.WriteByte('}')
	space(b, rnd)
}

func space(b *strings.Builder, rnd *rand.Rand) {
	for range rnd.IntN(3) {
		b.WriteByte(" \t\r\n"[rnd.IntN(4)])
	}
}

// encodeString writes s as a JSON string, each character either as itself
// (where JSON allows) or escaped, short or \u form, as rnd decides.
func encodeString(b *strings.Builder, s string, rnd *rand.Rand) {
	short := map[rune]string{'"': `\"`, '\\': `\\`, '/': `\/`, '\b': `\b`, '\f': `\f`, '\n': `\n`, '\r': `\r`, '\t': `\t`}
	b.WriteByte('"')
	for _, r := range s {
		mustEscape := r < 0x20 || r == '"' || r == '\\'
		switch esc, ok := short[r]; {
		case ok && (mustEscape || rnd.IntN(2) == 0):
			b.WriteString(esc)
		case mustEscape || rnd.IntN(4) == 0:
			if r > 0xFFFF {
				r -= 0x10000
				fmt.Fprintf(b, `\u%04x\u%04X`, 0xD800+(r>>10), 0xDC00+(r&0x3FF))
			} else {
				fmt.Fprintf(b, `\u%04X`, r)
			}
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
}

// Marshalling a lead with encoding/json (which escapes <, >, &, U+2028 and
// U+2029) and with jsontext (which does not) gives one fingerprint.
func TestFingerprintAcrossEncoders(t *testing.T) {
	t.Parallel()
	lead := map[string]any{
		"email": "ada@example.com", "source": "ads", "name": "<Ada & Co>", "message": "\u2028\u2029 \x01",
		"utm": map[string]string{"\uffff": "a", "😀": "b"},
	}
	stdlib, err := json.Marshal(lead)
	if err != nil {
		t.Fatal(err)
	}
	plain := jsontext.Value(slices.Clone(stdlib))
	if err := plain.Format(jsontext.EscapeForHTML(false), jsontext.EscapeForJS(false)); err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(stdlib, plain) {
		t.Fatalf("both encoders wrote %s: the test proves nothing", stdlib)
	}
	if decode(t, string(stdlib)).Fingerprint != decode(t, string(plain)).Fingerprint {
		t.Fatalf("fingerprints differ for\n%s\n%s", stdlib, []byte(plain))
	}
}

// A body with thousands of broken members is answered with at most
// response.MaxDetails details, the first in member order, and a message
// that says the list is cut: the answer is never as big as the body.
func TestDecodeCapsDetails(t *testing.T) {
	t.Parallel()
	var unknown, broken, utm []string
	for i := range 3000 {
		unknown = append(unknown, fmt.Sprintf(`"m%04d":0`, i))
		broken = append(broken, fmt.Sprintf(`"Q%04d":"x"`, i))
		utm = append(utm, fmt.Sprintf(`"u%04d":1`, i))
	}
	for name, tt := range map[string]struct {
		body  string
		code  response.Code
		first string
	}{
		"UnknownMembers": {`{"email":"ada@example.com","source":"website",` + strings.Join(unknown, ",") + `}`, response.CodeUnknownField, "m0000"},
		"BrokenFields":   {strings.TrimSuffix(validBody, "}") + `,"fields":{` + strings.Join(broken, ",") + `}}`, response.CodeValidationFailed, "fields"},
		"BrokenUTM":      {strings.TrimSuffix(validBody, "}") + `,"utm":{` + strings.Join(utm, ",") + `}}`, response.CodeValidationFailed, "utm"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := lead.Decode([]byte(tt.body), decodeOpts)
			var apiErr *response.Error
			if !errors.As(err, &apiErr) || apiErr.Code != tt.code {
				t.Fatalf("decode: %v, want %s", err, tt.code)
			}
			if len(apiErr.Details) != 20 || response.MaxDetails != 20 {
				t.Fatalf("%d details (MaxDetails %d), want 20", len(apiErr.Details), response.MaxDetails)
			}
			if apiErr.Details[0].Field != tt.first {
				t.Errorf("the first detail names %q, want %q", apiErr.Details[0].Field, tt.first)
			}
			if !strings.Contains(apiErr.Message, "first 20") {
				t.Errorf("message %q does not say the details are the first 20", apiErr.Message)
			}
		})
	}

	// Within the cap the list is whole, and the message plain.
	_, err := lead.Decode([]byte(`{"email":"ada@example.com","source":"website","a":1,"b":2}`), decodeOpts)
	var apiErr *response.Error
	if !errors.As(err, &apiErr) || len(apiErr.Details) != 2 || strings.Contains(apiErr.Message, "first") {
		t.Errorf("two unknown members: %v %+v", err, apiErr)
	}
}
