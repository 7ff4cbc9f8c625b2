package intake

import (
	"crypto/sha256"
	"encoding/base64"
)

// refDomain separates external references from every other use of SHA-256
// over a client and key; changing it would change every reference.
const refDomain = "leadintake/external_ref/v1\x00"

// ExternalRef returns the opaque reference of a client's key: the same for
// every attempt, every worker and after the key has expired, different for two
// clients using the same key, 46 URL-safe characters, and containing neither
// the key nor the client id in clear. The CRM record is upserted under it; the
// logs use it to correlate a submission without naming its key.
func ExternalRef(clientID, key string) string {
	h := sha256.New()
	h.Write([]byte(refDomain))
	h.Write([]byte(clientID))
	h.Write([]byte{0})
	h.Write([]byte(key))
	return "li_" + base64.RawURLEncoding.EncodeToString(h.Sum(nil))
}
