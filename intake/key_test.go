package intake_test

import (
	"regexp"
	"strings"
	"testing"

	"github.com/leadintake/leadintake/intake"
	"github.com/leadintake/leadintake/response"
)

func TestParseKey(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name   string
		values []string
		key    string // the key accepted, if code is empty
		code   response.Code
	}{
		{name: "AcceptsBareKey", values: []string{"abc-key-123"}, key: "abc-key-123"},
		{name: "AcceptsQuotedKey", values: []string{`"abc-key-123"`}, key: "abc-key-123"},
		{name: "AcceptsEveryAllowedCharacter", values: []string{"AZaz09._~:-"}, key: "AZaz09._~:-"},
		{name: "AcceptsShortestKey", values: []string{"abcdefgh"}, key: "abcdefgh"},
		{name: "AcceptsLongestKey", values: []string{strings.Repeat("k", 255)}, key: strings.Repeat("k", 255)},
		{name: "AcceptsUUID", values: []string{"0190a5f4-8d3c-7b2e-9f1a-2b3c4d5e6f70"}, key: "0190a5f4-8d3c-7b2e-9f1a-2b3c4d5e6f70"},
		{name: "AcceptsSixDigitsAndSeparators", values: []string{"12-34-56"}, key: "12-34-56"},
		{name: "AcceptsDigitsWithALetter", values: []string{"5551234567x"}, key: "5551234567x"},
		{name: "TrimsOptionalWhiteSpace", values: []string{" \tabc-key-123\t "}, key: "abc-key-123"},
		{name: "TrimsWhiteSpaceAroundQuotes", values: []string{` "abc-key-123" `}, key: "abc-key-123"},

		{name: "RefusesNoHeader", values: nil, code: response.CodeKeyMissing},
		{name: "RefusesEmptyValue", values: []string{""}, code: response.CodeKeyMissing},
		{name: "RefusesTwoValues", values: []string{"abc-key-123", "abc-key-123"}, code: response.CodeKeyInvalid},
		{name: "RefusesWhiteSpaceOnly", values: []string{"   "}, code: response.CodeKeyInvalid},
		{name: "RefusesSevenCharacters", values: []string{"abcdefg"}, code: response.CodeKeyInvalid},
		{name: "Refuses256Characters", values: []string{strings.Repeat("k", 256)}, code: response.CodeKeyInvalid},
		{name: "RefusesQuoted256Characters", values: []string{`"` + strings.Repeat("k", 256) + `"`}, code: response.CodeKeyInvalid},
		{name: "RefusesInnerSpace", values: []string{"abc key 123"}, code: response.CodeKeyInvalid},
		{name: "RefusesSpaceInsideQuotes", values: []string{`" abc-key-123"`}, code: response.CodeKeyInvalid},
		{name: "RefusesTelephoneNumber", values: []string{"555-123-4567"}, code: response.CodeKeyInvalid},
		{name: "RefusesQuotedTelephoneNumber", values: []string{`"555-123-4567"`}, code: response.CodeKeyInvalid},
		{name: "RefusesEightDigits", values: []string{"12345678"}, code: response.CodeKeyInvalid},
		{name: "RefusesSevenDigitsAndSeparators", values: []string{"1.2.3.4.5.6.7"}, code: response.CodeKeyInvalid},
		{name: "RefusesUnterminatedQuote", values: []string{`"abc-key-123`}, code: response.CodeKeyInvalid},
		{name: "RefusesLoneQuote", values: []string{`"`}, code: response.CodeKeyInvalid},
		{name: "RefusesTrailingQuoteOnly", values: []string{`abc-key-123"`}, code: response.CodeKeyInvalid},
		{name: "RefusesDoubleQuoting", values: []string{`""abc-key-123""`}, code: response.CodeKeyInvalid},
		{name: "RefusesEscapedQuote", values: []string{`"abc\"key-123"`}, code: response.CodeKeyInvalid},
		{name: "RefusesNonASCII", values: []string{"clé-unique-123"}, code: response.CodeKeyInvalid},
		// Only space and tab are the header's optional white space: other
		// white space is a character the key may not hold.
		{name: "RefusesNoBreakSpace", values: []string{"\u00a0abc-key-123"}, code: response.CodeKeyInvalid},
		{name: "RefusesNextLine", values: []string{"abc-key-123\u0085"}, code: response.CodeKeyInvalid},
		{name: "RefusesVerticalTab", values: []string{"abc-key-123\v"}, code: response.CodeKeyInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			key, err := intake.ParseKey(tt.values)
			if tt.code == "" {
				if err != nil || key != tt.key {
					t.Fatalf("ParseKey(%q) = %q, %v; want %q", tt.values, key, err, tt.key)
				}
				return
			}
			if got := response.CodeOf(err); got != tt.code || key != "" {
				t.Fatalf("ParseKey(%q) = %q, %v; want code %s", tt.values, key, err, tt.code)
			}
		})
	}
}

// keyCharset is the key alphabet of the contract.
var keyCharset = regexp.MustCompile(`^[A-Za-z0-9._~:-]{8,255}$`)

// looksLikeTelephone is the contract's rule, written out independently of
// the code: only digits and separators, 7 digits or more.
func looksLikeTelephone(key string) bool {
	digits := 0
	for _, c := range key {
		switch {
		case c >= '0' && c <= '9':
			digits++
		case strings.ContainsRune("._~:-", c):
		default:
			return false
		}
	}
	return digits >= 7
}

// wantKey is the contract's reading of one Idempotency-Key header value: the
// key it carries, or false when the value must be refused.
func wantKey(value string) (string, bool) {
	key := strings.Trim(value, " \t")
	if len(key) >= 2 && key[0] == '"' && key[len(key)-1] == '"' {
		key = key[1 : len(key)-1]
	}
	return key, keyCharset.MatchString(key) && !looksLikeTelephone(key)
}

func FuzzParseKey(f *testing.F) {
	for _, seed := range []string{
		"abc-key-123", `"abc-key-123"`, " abc-key-123 ", `"abc-key-123`, `abc-key-123"`, `""`, `"`, "",
		"555-123-4567", "12345678", "1234567a", "12-34-56", "a.b_c~d:e-f", strings.Repeat("x", 255),
		strings.Repeat("x", 256), "\u00a0abc-key-123", "abc key 123", `"abc\"key"`, "\t\"ab:cd:ef:gh\"\t",
		"0190a5f4-8d3c-7b2e-9f1a-2b3c4d5e6f70", "........", "1:2:3:4:5:6:7",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, value string) {
		key, err := intake.ParseKey([]string{value})
		if code := response.CodeOf(err); err != nil && code != response.CodeKeyInvalid && code != response.CodeKeyMissing {
			t.Fatalf("ParseKey(%q): error code %s", value, code)
		}
		want, ok := wantKey(value)
		switch {
		case err != nil && ok:
			t.Fatalf("ParseKey(%q) refused %q, which follows the rules: %v", value, want, err)
		case err == nil && (!ok || key != want):
			t.Fatalf("ParseKey(%q) accepted %q; want %q, acceptable: %t", value, key, want, ok)
		case err == nil && !intake.ValidKey(key):
			t.Fatalf("ParseKey(%q) accepted %q, which ValidKey refuses", value, key)
		}

		// The quoted form of a bare key is accepted if and only if the
		// bare key is, and means the same key.
		if value == strings.Trim(value, " \t") && !strings.HasPrefix(value, `"`) {
			quoted, qerr := intake.ParseKey([]string{`"` + value + `"`})
			if (qerr == nil) != (err == nil) || quoted != key {
				t.Fatalf("bare %q gives %q, %v; quoted gives %q, %v", value, key, err, quoted, qerr)
			}
		}
	})
}
