package lead

import (
	"crypto/hmac"
	"crypto/sha256"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/gowebpki/jcs"
)

// Content is the HMAC-SHA256 under k of the lead's canonical body without
// its utm and its attribution: what two enquiries with the same email and
// the same content, from two campaigns or two pages, share. It finds a possible duplicate among the
// client's recent leads without holding anything readable (an unkeyed hash
// of a short enquiry tells whether it was sent). It is nil for a body that
// does not decode, which Decode never gives.
func (k HashKey) Content(p *Payload) []byte {
	var members map[string]jsontext.Value
	if err := json.Unmarshal(p.Canonical, &members); err != nil {
		return nil
	}
	delete(members, "utm")
	delete(members, "attribution")
	raw, err := json.Marshal(members)
	if err != nil {
		return nil
	}
	canonical, err := jcs.Transform(raw)
	if err != nil {
		return nil
	}
	m := hmac.New(sha256.New, k)
	m.Write([]byte("content\x00"))
	m.Write(canonical)
	return m.Sum(nil)
}
