package webhook

import (
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"strings"
)

// Bounds of a webhook-signature header: a sender lists one signature per
// secret in force (two during a rotation), so a header past them is not a
// sender's but someone's probe, refused before any work.
const (
	// MaxSignatureHeaderLen is the longest webhook-signature value parsed,
	// in bytes.
	MaxSignatureHeaderLen = 4096
	// MaxSignatures is the most signatures, of any version, one header may
	// list.
	MaxSignatures = 16
)

// macLen is the length of an HMAC-SHA256, the v1 signature.
const macLen = sha256.Size

// v1Len is the length of a v1 signature in base64.
var v1Len = base64.StdEncoding.EncodedLen(macLen)

// strict decodes only the canonical base64 of a value, so that one MAC has
// one spelling, as the specification's libraries compare them.
var strict = base64.StdEncoding.Strict()

// ParseSignatureHeader returns the v1 signatures (each an HMAC-SHA256, 32
// bytes) of a webhook-signature header value, in their order: a list of
// "version,base64" entries separated by spaces. Entries of other versions
// (v1a, the asymmetric scheme, or a future one) and malformed ones are
// skipped, since another entry may still be valid; doubled spaces are
// allowed.
//
// It returns an error wrapping ErrSignature for an empty value, one longer
// than MaxSignatureHeaderLen, one of more than MaxSignatures entries, or one
// without a single well-formed v1 signature. Its work is linear in the
// value, whatever the value.
func ParseSignatureHeader(value string) ([][]byte, error) {
	switch {
	case value == "":
		return nil, fmt.Errorf("%w: missing", ErrSignature)
	case len(value) > MaxSignatureHeaderLen:
		return nil, fmt.Errorf("%w: longer than %d bytes", ErrSignature, MaxSignatureHeaderLen)
	}
	var sigs [][]byte
	entries := 0
	for entry := range strings.SplitSeq(value, " ") {
		if entry == "" {
			continue
		}
		if entries++; entries > MaxSignatures {
			return nil, fmt.Errorf("%w: more than %d signatures", ErrSignature, MaxSignatures)
		}
		version, encoded, ok := strings.Cut(entry, ",")
		if !ok || version != "v1" || len(encoded) != v1Len {
			continue
		}
		// The decoder skips CR and LF, which would leave fewer bytes.
		sig, err := strict.DecodeString(encoded)
		if err != nil || len(sig) != macLen {
			continue
		}
		sigs = append(sigs, sig)
	}
	if len(sigs) == 0 {
		return nil, fmt.Errorf("%w: no well-formed v1 signature", ErrSignature)
	}
	return sigs, nil
}
