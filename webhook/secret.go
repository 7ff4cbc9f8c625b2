package webhook

import (
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"strings"
)

// SecretPrefix starts every signing secret in its text form.
const SecretPrefix = "whsec_"

// The length of a secret's key, in bytes, that the specification allows
// ("at least 24 bytes", "512 [bits] maximum").
const (
	minKeyLen = 24
	maxKeyLen = 64
)

// ErrInvalidSecret is wrapped by every error of ParseSecret.
var ErrInvalidSecret = errors.New("invalid webhook secret")

// Secret is a signing secret: the key of the HMAC. The zero Secret has no
// key; it signs nothing and verifies nothing. A Secret prints as
// "[redacted]" (fmt, slog), so that a configuration can be logged whole.
type Secret struct {
	key []byte
}

// ParseSecret returns the secret written s, "whsec_" followed by the
// standard base64 (padded) of a key of 24 to 64 bytes. Its errors wrap
// ErrInvalidSecret and say what is wrong without quoting s.
func ParseSecret(s string) (Secret, error) {
	encoded, ok := strings.CutPrefix(s, SecretPrefix)
	if !ok {
		return Secret{}, fmt.Errorf("%w: want %s followed by base64", ErrInvalidSecret, SecretPrefix)
	}
	// The decoder skips CR and LF; refusing every byte outside the alphabet
	// first keeps "whsec_...\n" from passing for the secret without it.
	for i := 0; i < len(encoded); i++ {
		if !isBase64Byte(encoded[i]) {
			return Secret{}, fmt.Errorf("%w: character %d after %s is not standard base64", ErrInvalidSecret, i+1, SecretPrefix)
		}
	}
	key, err := base64.StdEncoding.DecodeString(encoded)
	if err != nil {
		return Secret{}, fmt.Errorf("%w: the text after %s is not standard base64 (with padding)", ErrInvalidSecret, SecretPrefix)
	}
	if len(key) < minKeyLen || len(key) > maxKeyLen {
		return Secret{}, fmt.Errorf("%w: the key is %d bytes, want %d to %d", ErrInvalidSecret, len(key), minKeyLen, maxKeyLen)
	}
	return Secret{key: key}, nil
}

func isBase64Byte(c byte) bool {
	return 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '+' || c == '/' || c == '='
}

// IsZero reports whether s is the zero Secret, the absence of a secret.
func (s Secret) IsZero() bool { return len(s.key) == 0 }

// String returns "[redacted]", never the key.
func (s Secret) String() string { return "[redacted]" }

// GoString returns "webhook.Secret([redacted])", for %#v.
func (s Secret) GoString() string { return "webhook.Secret([redacted])" }

// LogValue logs "[redacted]", never the key.
func (s Secret) LogValue() slog.Value { return slog.StringValue("[redacted]") }
