package lead

import (
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"strings"
)

// HashKey keys every hash of personal data leadintake keeps (PII_HASH_KEY):
// a hash without a key can be reversed by guessing, and is personal data
// itself.
type HashKey []byte

// MinHashKeyLen is the shortest PII_HASH_KEY, in bytes.
const MinHashKeyLen = 32

// ParseHashKey checks a PII_HASH_KEY. Its error never quotes the key.
func ParseHashKey(s string) (HashKey, error) {
	if len(s) < MinHashKeyLen {
		return nil, errors.New("must be at least 32 bytes (a long random string)")
	}
	return HashKey(s), nil
}

// Email is the HMAC-SHA256 under k of an email address, lower-cased whole:
// what finds a client's leads by email, and what an erasure record keeps.
func (k HashKey) Email(address string) []byte {
	m := hmac.New(sha256.New, k)
	m.Write([]byte(strings.ToLower(address)))
	return m.Sum(nil)
}
