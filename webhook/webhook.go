package webhook

import (
	"crypto/hmac"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// The headers of a signed message.
const (
	HeaderID        = standardwebhooks.HeaderWebhookID        // "webhook-id"
	HeaderTimestamp = standardwebhooks.HeaderWebhookTimestamp // "webhook-timestamp"
	HeaderSignature = standardwebhooks.HeaderWebhookSignature // "webhook-signature"
)

// DefaultTolerance is how far from now a webhook-timestamp may be, either
// way: the specification's libraries use 5 minutes.
const DefaultTolerance = 5 * time.Minute

// The errors of Verify; each of its errors wraps exactly one.
var (
	// ErrMissingID: the message has no webhook-id.
	ErrMissingID = errors.New("webhook-id missing")
	// ErrTimestamp: webhook-timestamp is missing, is not Unix seconds, or
	// is further from now than the tolerance.
	ErrTimestamp = errors.New("webhook-timestamp missing, malformed or too far from now")
	// ErrSignature: webhook-signature is missing or malformed, or none of
	// its v1 signatures is the message's with any of the secrets.
	ErrSignature = errors.New("webhook-signature invalid")
)

// Sign returns the webhook-signature header value of the message msgID,
// sent at ts (in whole seconds), with body: "v1," and the base64 of the
// HMAC-SHA256 of "msgID.unix(ts).body" keyed with secret. The message's
// webhook-timestamp header must be ts in Unix seconds (see SetHeaders).
//
// Sign panics on the zero Secret: a message signed with an empty key could
// be signed by anyone.
func Sign(secret Secret, msgID string, ts time.Time, body []byte) string {
	if secret.IsZero() {
		panic("webhook: Sign with the zero Secret")
	}
	return "v1," + base64.StdEncoding.EncodeToString(mac(secret, msgID, ts.Unix(), body))
}

// SetHeaders sets h's webhook-id, webhook-timestamp and webhook-signature
// for the message msgID sent at ts with body, signed with secret; it
// panics on the zero Secret, like Sign.
func SetHeaders(h http.Header, secret Secret, msgID string, ts time.Time, body []byte) {
	h.Set(HeaderID, msgID)
	h.Set(HeaderTimestamp, strconv.FormatInt(ts.Unix(), 10))
	h.Set(HeaderSignature, Sign(secret, msgID, ts, body))
}

// mac returns the HMAC-SHA256 of "msgID.unix.body" keyed with secret's key,
// as the specification's library computes it.
func mac(secret Secret, msgID string, unix int64, body []byte) []byte {
	// For HMAC-SHA256 the library has no failure of its own (its errors are
	// for other schemes): anything but "v1,<base64 of 32 bytes>" is a
	// library that changed under us, which no message must get past.
	wh, err := standardwebhooks.NewWebhookRaw(secret.key)
	if err != nil {
		panic("webhook: the Standard Webhooks library refused a key: " + err.Error())
	}
	sig, err := wh.Sign(msgID, time.Unix(unix, 0), body)
	encoded, ok := strings.CutPrefix(sig, "v1,")
	raw, decodeErr := base64.StdEncoding.DecodeString(encoded)
	if err != nil || !ok || decodeErr != nil || len(raw) != macLen {
		panic("webhook: the Standard Webhooks library's signature is not v1,<base64 HMAC-SHA256>")
	}
	return raw
}

// Verify checks the Standard Webhooks signature of a message with headers h
// and body, and returns its webhook-id. The message is authentic when its
// webhook-timestamp is within tolerance of now, either way (a tolerance of
// zero or less means DefaultTolerance), and one of the v1 signatures of its
// webhook-signature header is its HMAC with one of secrets (several during
// a rotation; zero Secrets are skipped). Signatures are compared in
// constant time.
//
// Its error wraps ErrMissingID, ErrTimestamp or ErrSignature, checked in
// this order (without an id there is nothing to check a signature of), and
// quotes neither a secret nor a header.
//
// The id is returned as sent, dots included (idempotency keys may hold
// them). Another split of the same signed content into id, timestamp and
// body would need a body that starts with digits and ".", or an id that
// takes in the body's opening "{": neither gets past a receiver that wants
// a JSON object and an idempotency key.
func Verify(secrets []Secret, h http.Header, body []byte, now time.Time, tolerance time.Duration) (string, error) {
	id := h.Get(HeaderID)
	if id == "" {
		return "", ErrMissingID
	}
	if tolerance <= 0 {
		tolerance = DefaultTolerance
	}
	unix, ok := parseTimestamp(h.Get(HeaderTimestamp))
	if !ok {
		return "", fmt.Errorf("%w: not Unix seconds", ErrTimestamp)
	}
	switch age := now.Sub(time.Unix(unix, 0)); {
	case age > tolerance:
		return "", fmt.Errorf("%w: %v old, more than %v", ErrTimestamp, age, tolerance)
	case age < -tolerance:
		return "", fmt.Errorf("%w: %v ahead, more than %v", ErrTimestamp, -age, tolerance)
	}
	sigs, err := ParseSignatureHeader(h.Get(HeaderSignature))
	if err != nil {
		return "", err
	}
	for _, secret := range secrets {
		if secret.IsZero() {
			continue
		}
		want := mac(secret, id, unix, body)
		for _, sig := range sigs {
			if hmac.Equal(sig, want) {
				return id, nil
			}
		}
	}
	return "", fmt.Errorf("%w: no signature matches", ErrSignature)
}

// parseTimestamp parses a webhook-timestamp: Unix seconds in canonical
// decimal (no sign, no leading zero; the signature is over the number
// written so, and any other spelling could not verify anyway) of at most 12
// digits, which lasts until the year 33658 and refuses milliseconds.
func parseTimestamp(s string) (int64, bool) {
	if s == "" || len(s) > 12 || len(s) > 1 && s[0] == '0' {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}
