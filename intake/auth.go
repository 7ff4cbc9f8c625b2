package intake

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"strings"
)

// Client is one caller allowed to submit leads: its id and the SHA-256 of its
// bearer token. The token itself is never held.
type Client struct {
	ID        string
	TokenHash [sha256.Size]byte
}

// Clients is the set of callers read from API_CLIENTS: comma-separated
// client_id=sha256hex(token) entries.
type Clients struct{ list []Client }

// ParseClients parses comma-separated client_id=sha256hex(token) entries.
// Client ids are 1 to 64 characters of A-Z a-z 0-9 . _ -. A client may be
// listed with several token hashes, so that a token can be rotated without a
// moment in which neither works; the same hash may not be listed twice.
func ParseClients(value string) (Clients, error) {
	var cs []Client
	seen := map[string]bool{} // hashes
	for entry := range strings.SplitSeq(value, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		id, hash, ok := strings.Cut(entry, "=")
		id, hash = strings.TrimSpace(id), strings.TrimSpace(hash)
		if !ok || !validClientID(id) {
			return Clients{}, fmt.Errorf("entry %d: want client_id=sha256hex(token) with a client id of 1 to 64 characters A-Z a-z 0-9 . _ -", len(cs)+1)
		}
		raw, err := hex.DecodeString(hash)
		if err != nil || len(raw) != sha256.Size {
			return Clients{}, fmt.Errorf("client %q: the token hash must be 64 hexadecimal digits (sha256 of the token)", id)
		}
		if seen[string(raw)] {
			return Clients{}, fmt.Errorf("client %q: a token hash is listed twice", id)
		}
		c := Client{ID: id}
		copy(c.TokenHash[:], raw)
		cs = append(cs, c)
		seen[string(raw)] = true
	}
	if len(cs) == 0 {
		return Clients{}, fmt.Errorf("no client listed")
	}
	return Clients{list: cs}, nil
}

// Authenticate returns the id of the client whose token hash matches
// sha256(token). Every entry is compared, in constant time, whatever matches,
// so the time taken says nothing about which client or how much of a hash
// matched.
func (cs Clients) Authenticate(token string) (string, bool) {
	sum := sha256.Sum256([]byte(token))
	match := -1
	for i := range cs.list {
		if subtle.ConstantTimeCompare(sum[:], cs.list[i].TokenHash[:]) == 1 {
			match = i
		}
	}
	if match < 0 {
		return "", false
	}
	return cs.list[match].ID, true
}

func validClientID(id string) bool {
	if len(id) == 0 || len(id) > 64 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}
