package intake

import (
	"net/http"
	"strings"

	"github.com/leadintake/leadintake/response"
)

// Key length bounds, in characters.
const (
	KeyMinLen = 8
	KeyMaxLen = 255
	// phoneLikeDigits is the number of digits from which a key made only of
	// digits and separators is taken for a telephone number and refused.
	phoneLikeDigits = 7
)

// ParseKey returns the idempotency key carried by the values of the
// Idempotency-Key header. The key is accepted bare or as a structured-field
// string ("..."). It must be 8 to 255 characters of A-Z a-z 0-9 . _ ~ : -,
// and may not look like a telephone number (only digits and separators, with
// 7 or more digits).
//
// It returns an *response.Error with response.CodeKeyMissing when there is no key and
// response.CodeKeyInvalid when the key breaks a rule.
func ParseKey(values []string) (string, error) {
	if len(values) == 0 || (len(values) == 1 && values[0] == "") {
		return "", response.Errorf(response.CodeKeyMissing, "the Idempotency-Key header is required")
	}
	return parseKeyValues("Idempotency-Key", values, response.CodeKeyInvalid)
}

// ParseSupersedes returns the key named by the values of the Supersedes
// header, "" when there is none. It follows the rules of ParseKey, and
// returns an *Error with CodeSupersedesInvalid (400) when the value breaks
// them.
func ParseSupersedes(values []string) (string, error) {
	if len(values) == 0 || (len(values) == 1 && values[0] == "") {
		return "", nil
	}
	key, err := parseKeyValues("Supersedes", values, response.CodeSupersedesInvalid)
	if err != nil {
		err.(*response.Error).Status = http.StatusBadRequest
	}
	return key, err
}

// parseKeyValues reads one key, bare or quoted, from the values of header,
// refusing with code.
func parseKeyValues(header string, values []string, code response.Code) (string, error) {
	if len(values) > 1 {
		return "", response.Errorf(code, "send exactly one %s header", header)
	}
	// Only space and tab are the header's optional white space (RFC 9110):
	// strings.TrimSpace would also strip Unicode spaces such as U+00A0,
	// which a header value may carry and which no key may hold.
	key := strings.Trim(values[0], " \t")
	if strings.HasPrefix(key, `"`) {
		if len(key) < 2 || !strings.HasSuffix(key, `"`) {
			return "", response.Errorf(code, "the %s is an unterminated quoted string", header)
		}
		key = key[1 : len(key)-1]
	}
	if err := checkKey(key); err != nil {
		err.Code = code
		err.Message = strings.Replace(err.Message, "Idempotency-Key", header, 1)
		return "", err
	}
	return key, nil
}

// checkKey applies the key rules to a bare key.
func checkKey(key string) *response.Error {
	if len(key) < KeyMinLen || len(key) > KeyMaxLen {
		return response.Errorf(response.CodeKeyInvalid, "the Idempotency-Key must be %d to %d characters long", KeyMinLen, KeyMaxLen)
	}
	digits, onlyDigitsAndSeparators := 0, true
	for i := 0; i < len(key); i++ {
		c := key[i]
		switch {
		case c >= '0' && c <= '9':
			digits++
		case c == '.' || c == '_' || c == '~' || c == ':' || c == '-':
		case c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z':
			onlyDigitsAndSeparators = false
		default:
			return response.Errorf(response.CodeKeyInvalid, "the Idempotency-Key may contain only A-Z a-z 0-9 . _ ~ : -")
		}
	}
	if onlyDigitsAndSeparators && digits >= phoneLikeDigits {
		return response.Errorf(response.CodeKeyInvalid, "the Idempotency-Key looks like a telephone number; use an opaque random value")
	}
	return nil
}

// ValidKey reports whether key, taken bare, follows the key rules.
func ValidKey(key string) bool { return checkKey(key) == nil }
