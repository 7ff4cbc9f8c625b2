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

// RequestHash is a hash of a request, its fingerprint or the hash of its
// bytes as they arrived: the SHA-256 digest the request gives, and the
// HMAC-SHA256 of that digest under PII_HASH_KEY, which is what a key keeps.
// A plain digest of a short enquiry is personal data: whoever guesses the
// enquiry (an address and a source) can tell from it whether it was sent.
type RequestHash struct {
	// Digest is the SHA-256 of the request (Payload.Fingerprint, RawHash).
	Digest []byte
	// MAC is the HMAC-SHA256 of Digest under the key.
	MAC []byte
}

// Request returns the RequestHash of the SHA-256 digest of a request.
func (k HashKey) Request(digest []byte) RequestHash {
	return RequestHash{Digest: digest, MAC: k.Digest(digest)}
}

// Digest is the HMAC-SHA256 under k of a SHA-256 digest: what a key keeps
// of a request's digest, and what a digest kept before hashes were keyed
// becomes (so a retry of a key claimed then still finds its request).
func (k HashKey) Digest(digest []byte) []byte {
	m := hmac.New(sha256.New, k)
	m.Write(digest)
	return m.Sum(nil)
}

// Matches reports whether stored, a hash a key keeps, is h's: its MAC, or,
// for a key whose hashes are still plain (kept before they were keyed, and
// not yet keyed by the worker), its digest. A nil stored hash matches
// nothing.
func (h RequestHash) Matches(stored []byte, plain bool) bool {
	if stored == nil {
		return false
	}
	if plain {
		return hmac.Equal(stored, h.Digest)
	}
	return hmac.Equal(stored, h.MAC)
}
