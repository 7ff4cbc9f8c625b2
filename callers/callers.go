// Package callers is who may call leadintake, and how: the clients of
// API_CLIENTS and of the clients file (CLIENTS_FILE), with their bearer
// tokens (held as SHA-256 hashes), their publishable keys for browsers with
// the origins and the spam policy of each, their callback, and the secret
// their inbound webhooks are signed with.
//
// A Set is immutable; a Holder holds the Set in force and swaps it for a
// new one when the clients file is read again (on SIGHUP), while requests
// in flight keep the one they started with.
package callers

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/leadintake/leadintake/destination"
	"github.com/leadintake/leadintake/webhook"
)

// Client is one caller allowed to submit leads.
type Client struct {
	ID string
	// TokenHashes are the SHA-256 hashes of its bearer tokens (several
	// while a token is rotated). The tokens themselves are never held.
	TokenHashes [][sha256.Size]byte
	// PublishableKeys are its keys for browsers, public by design.
	PublishableKeys []PublishableKey
	// Callback, when not nil, receives every finish of its keys.
	Callback *Callback
	// WebhookSecret, when set, verifies its inbound signed webhooks.
	WebhookSecret webhook.Secret
	// CRM is the destination its leads are written to; empty for the
	// environment's (DefaultCRM).
	CRM string
	// Notify are the channels its leads are announced on; nil for the
	// environment's (DefaultNotification), empty for none.
	Notify []string
	// Owners are its sales people, and Assign the rules that choose a
	// lead's owner among them.
	Owners []Owner
	Assign []Rule
}

// PublishableKey is a key a web page authenticates with, and the origins
// allowed to use it.
type PublishableKey struct {
	Key     string
	Origins []string
	// Spam, when not nil, judges the key's submissions (see Spam); nil
	// judges none.
	Spam *Spam
}

// Spam is a publishable key's spam policy: how a new key's submission is
// judged from the signals its page sent (Form-Signals), and what becomes of
// one judged spam.
type Spam struct {
	// MinSeconds: a form sent sooner after it was shown is spam; 0 turns
	// the check off. Default DefaultMinSeconds.
	MinSeconds int
	// Captcha, when not nil, verifies the page's captcha token.
	Captcha *Captcha
	// Action is SpamQuarantine (the default) or SpamRefuse.
	Action string
}

// DefaultMinSeconds is Spam.MinSeconds when the clients file does not say.
const DefaultMinSeconds = 2

// Spam actions.
const (
	// SpamQuarantine stores the enquiry and finishes it at once,
	// quarantined (200 received), for an operator to release or not.
	SpamQuarantine = "quarantine"
	// SpamRefuse refuses it (403 spam_refused); nothing is stored.
	SpamRefuse = "refuse"
)

// Captcha is a siteverify service (Cloudflare Turnstile, hCaptcha,
// reCAPTCHA) and the secret the client shares with it.
type Captcha struct {
	VerifyURL string
	Secret    string
}

// Callback is where a client's finished keys are announced.
type Callback struct {
	URL    string
	Secret webhook.Secret
}

// Set is an immutable set of clients.
type Set struct {
	byID map[string]*Client
	// tokens lists every token hash with its client, compared in constant
	// time on every authentication.
	tokens []tokenEntry
	// publishable maps a publishable key to its client and origins.
	publishable map[string]*publishable
	// origins holds every origin some publishable key allows.
	origins map[string]bool
	// destinations are the clients file's.
	destinations []*destination.Config
	// operators are the clients file's console logins.
	operators []Operator
}

type tokenEntry struct {
	hash     [sha256.Size]byte
	clientID string
}

type publishable struct {
	clientID string
	origins  map[string]bool
	spam     *Spam
}

// NewSet returns the set of clients, checking that they are consistent: no
// id, token hash or publishable key twice.
func NewSet(clients []*Client) (*Set, error) {
	s := &Set{byID: map[string]*Client{}, publishable: map[string]*publishable{}, origins: map[string]bool{}}
	seen := map[[sha256.Size]byte]bool{}
	for _, c := range clients {
		if s.byID[c.ID] != nil {
			return nil, fmt.Errorf("client %q is listed twice", c.ID)
		}
		s.byID[c.ID] = c
		for _, h := range c.TokenHashes {
			if seen[h] {
				return nil, fmt.Errorf("client %q: a token hash is listed twice", c.ID)
			}
			seen[h] = true
			s.tokens = append(s.tokens, tokenEntry{hash: h, clientID: c.ID})
		}
		for _, pk := range c.PublishableKeys {
			if s.publishable[pk.Key] != nil {
				return nil, fmt.Errorf("client %q: a publishable key is listed twice", c.ID)
			}
			p := &publishable{clientID: c.ID, origins: map[string]bool{}, spam: pk.Spam}
			for _, o := range pk.Origins {
				p.origins[o] = true
				s.origins[o] = true
			}
			s.publishable[pk.Key] = p
		}
	}
	return s, nil
}

// Merge returns a set of the clients of both sets; an id in both is an
// error.
func Merge(a, b *Set) (*Set, error) {
	var (
		all       []*Client
		dests     []*destination.Config
		operators []Operator
	)
	for _, s := range []*Set{a, b} {
		if s == nil {
			continue
		}
		for _, c := range s.byID {
			all = append(all, c)
		}
		dests = append(dests, s.destinations...)
		operators = append(operators, s.operators...)
	}
	merged, err := NewSet(all)
	if err != nil {
		return nil, err
	}
	merged.destinations, merged.operators = dests, operators
	return merged, nil
}

// Len is the number of clients.
func (s *Set) Len() int { return len(s.byID) }

// Client returns the client of id.
func (s *Set) Client(id string) (*Client, bool) {
	c, ok := s.byID[id]
	return c, ok
}

// Authenticate returns the id of the client one of whose token hashes is
// sha256(token). Every hash is compared, in constant time, whatever
// matches, so the time taken says nothing about which client or how much of
// a hash matched.
func (s *Set) Authenticate(token string) (string, bool) {
	sum := sha256.Sum256([]byte(token))
	match := -1
	for i := range s.tokens {
		if subtle.ConstantTimeCompare(sum[:], s.tokens[i].hash[:]) == 1 {
			match = i
		}
	}
	if match < 0 {
		return "", false
	}
	return s.tokens[match].clientID, true
}

// IsPublishable reports whether a bearer credential is shaped like a
// publishable key (pk_...), known or not.
func IsPublishable(token string) bool { return strings.HasPrefix(token, "pk_") }

// Publishable returns the client of a publishable key, and whether origin
// is one the key allows.
func (s *Set) Publishable(key, origin string) (clientID string, originAllowed, ok bool) {
	p := s.publishable[key]
	if p == nil {
		return "", false, false
	}
	return p.clientID, p.origins[origin], true
}

// SpamPolicy returns the spam policy of a publishable key, nil when it has
// none (or the key is unknown).
func (s *Set) SpamPolicy(key string) *Spam {
	if p := s.publishable[key]; p != nil {
		return p.spam
	}
	return nil
}

// OriginAllowed reports whether some publishable key allows origin.
func (s *Set) OriginAllowed(origin string) bool { return s.origins[origin] }

// Holder holds the set of clients in force. It is safe for concurrent use.
type Holder struct {
	set atomic.Pointer[Set]
}

// NewHolder returns a Holder of set.
func NewHolder(set *Set) *Holder {
	h := &Holder{}
	h.set.Store(set)
	return h
}

// Set returns the set in force.
func (h *Holder) Set() *Set { return h.set.Load() }

// Replace puts set in force.
func (h *Holder) Replace(set *Set) { h.set.Store(set) }

// ParseAPIClients parses API_CLIENTS: comma-separated client_id=sha256hex(token)
// entries. A client id is 1 to 64 characters of A-Z a-z 0-9 . _ -; a client
// may be listed with several token hashes, so that a token can be rotated
// without a moment in which neither works. Errors never quote a value.
func ParseAPIClients(value string) (*Set, error) {
	byID := map[string]*Client{}
	var order []*Client
	n := 0
	for entry := range strings.SplitSeq(value, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		n++
		id, hash, ok := strings.Cut(entry, "=")
		id, hash = strings.TrimSpace(id), strings.TrimSpace(hash)
		if !ok || !validID(id, true) {
			return nil, fmt.Errorf("entry %d: want client_id=sha256hex(token) with a client id of 1 to 64 characters A-Z a-z 0-9 . _ -", n)
		}
		h, err := parseTokenHash(hash)
		if err != nil {
			return nil, fmt.Errorf("client %q: %w", id, err)
		}
		c := byID[id]
		if c == nil {
			c = &Client{ID: id}
			byID[id] = c
			order = append(order, c)
		}
		c.TokenHashes = append(c.TokenHashes, h)
	}
	if n == 0 {
		return nil, errors.New("no client listed")
	}
	return NewSet(order)
}

func parseTokenHash(s string) ([sha256.Size]byte, error) {
	var h [sha256.Size]byte
	raw, err := hex.DecodeString(s)
	if err != nil || len(raw) != sha256.Size {
		return h, errors.New("the token hash must be 64 hexadecimal digits (sha256 of the token)")
	}
	copy(h[:], raw)
	return h, nil
}

// validID reports whether id is a client id: 1 to 64 of a-z 0-9 _ -, and,
// for API_CLIENTS (legacy), also A-Z and '.'.
func validID(id string, legacy bool) bool {
	if len(id) == 0 || len(id) > 64 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '_', c == '-':
		case legacy && (c >= 'A' && c <= 'Z' || c == '.'):
		default:
			return false
		}
	}
	return true
}

// parseOrigin returns a browser origin (scheme://host[:port], http or
// https, nothing after) in its canonical form, lower-case.
func parseOrigin(s string) (string, bool) {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil ||
		(u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return "", false
	}
	return strings.ToLower(u.Scheme + "://" + u.Host), true
}

// Source is where a process's clients come from: API_CLIENTS (fixed for the
// life of the process) and the clients file (read again on Reload).
type Source struct {
	// APIClients is the value of API_CLIENTS; empty for none.
	APIClients string
	// Path is the clients file's; empty for none.
	Path string
	// Check, when set, judges a set before it is put in force (the
	// worker's: a client falling back to the environment's CRM needs
	// CRM_URL); its error refuses the set.
	Check func(*Set) error
}

// Load reads the clients of src. Errors name what is at fault (the
// variable, the entry of the file) and never a secret.
func (src Source) Load() (*Set, error) {
	var env, file *Set
	var err error
	if src.APIClients != "" {
		if env, err = ParseAPIClients(src.APIClients); err != nil {
			return nil, fmt.Errorf("API_CLIENTS: %w", err)
		}
	}
	if src.Path != "" {
		if file, err = LoadFile(src.Path); err != nil {
			return nil, fmt.Errorf("CLIENTS_FILE: %w", err)
		}
	}
	set, err := Merge(env, file)
	if err != nil {
		return nil, fmt.Errorf("API_CLIENTS and CLIENTS_FILE: %w", err)
	}
	if src.Check != nil {
		if err := src.Check(set); err != nil {
			return nil, err
		}
	}
	return set, nil
}

// Reload reads src again and puts it in force in h; on an error the set in
// force stays.
func (src Source) Reload(h *Holder) error {
	set, err := src.Load()
	if err != nil {
		return err
	}
	h.Replace(set)
	return nil
}

// IDs returns the ids of the clients, sorted.
func (s *Set) IDs() []string {
	return slices.Sorted(maps.Keys(s.byID))
}
