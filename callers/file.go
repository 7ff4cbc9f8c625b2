package callers

import (
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/leadintake/leadintake/destination"
	"github.com/leadintake/leadintake/webhook"
)

// The members a clients file knows, per level.
var (
	topMembers         = map[string]bool{"clients": true, "destinations": true, "operators": true}
	clientMembers      = map[string]bool{"id": true, "tokens_sha256": true, "publishable_keys": true, "callback": true, "webhook_secret": true, "crm": true, "notify": true, "owners": true, "assign": true}
	publishableMembers = map[string]bool{"key": true, "origins": true, "spam": true}
	callbackMembers    = map[string]bool{"url": true, "secret": true}
	spamMembers        = map[string]bool{"min_seconds": true, "captcha": true, "action": true}
	captchaMembers     = map[string]bool{"verify_url": true, "secret": true}
)

// LoadFile reads and checks the clients file at path. Its errors name the
// entry (by id, or by position when the id is missing or bad) and the
// member at fault, and never quote a value: the file holds secrets.
func LoadFile(path string) (*Set, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("clients file: %w", err)
	}
	set, err := ParseFile(raw)
	if err != nil {
		return nil, fmt.Errorf("clients file %s: %w", path, err)
	}
	return set, nil
}

// ReadableByOthers reports whether others may read the file at path, or a
// group this process does not belong to, and its permission bits. A
// clients file holds secrets (callback and webhook signing secrets): it
// should be readable by the service alone. A group of the service's own is
// the service (a Kubernetes Secret mounted with mode 0440 for a pod's
// fsGroup, which a non-root process needs to read it). A file that cannot
// be looked at is not reported (reading it fails with its own error).
func ReadableByOthers(path string) (fs.FileMode, bool) {
	fi, err := os.Stat(path)
	if err != nil {
		return 0, false
	}
	perm := fi.Mode().Perm()
	return perm, perm&0o004 != 0 || perm&0o040 != 0 && !inOwnGroup(fi)
}

// ParseFile parses the YAML of a clients file:
//
//	clients:
//	  - id: acme                       # 1..64 of a-z 0-9 _ -
//	    tokens_sha256: [<hex>, ...]    # bearer tokens, as in API_CLIENTS
//	    publishable_keys:              # for browsers: public by design
//	      - key: pk_acme_9f2c...       # pk_ then 16..64 of A-Z a-z 0-9 _
//	        origins: [https://www.acme.example]
//	        spam:                      # judge its submissions (spam: {} for the defaults)
//	          min_seconds: 3           # sooner after the form was shown is spam (default 2; 0: off)
//	          captcha: {verify_url: https://..., secret: <secret>}
//	          action: quarantine       # or refuse
//	    callback:
//	      url: https://hooks.acme.example/leadintake
//	      secret: whsec_<base64>
//	    webhook_secret: whsec_<base64>
//	destinations: [...]              # see parseDestinations
//	operators: [...]                 # console logins, see parseOperators
func ParseFile(raw []byte) (*Set, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		// yaml's syntax errors name a line, never a value.
		return nil, err
	}
	if len(doc.Content) == 0 {
		return nil, errors.New(`the file is empty; want a list under "clients"`)
	}
	top := doc.Content[0]
	if err := checkMembers(top, topMembers, "the file"); err != nil {
		return nil, err
	}
	var dests []*destination.Config
	if n := member(top, "destinations"); n != nil {
		var err error
		if dests, err = parseDestinations(n); err != nil {
			return nil, err
		}
	}
	var operators []Operator
	if n := member(top, "operators"); n != nil {
		var err error
		if operators, err = parseOperators(n); err != nil {
			return nil, err
		}
	}
	list := member(top, "clients")
	if list == nil || list.Kind != yaml.SequenceNode {
		return nil, errors.New(`want a list of clients under "clients"`)
	}
	clients := make([]*Client, 0, len(list.Content))
	for i, n := range list.Content {
		c, err := parseClient(n, i+1)
		if err != nil {
			return nil, err
		}
		clients = append(clients, c)
	}
	if err := checkReferences(clients, dests); err != nil {
		return nil, err
	}
	set, err := NewSet(clients)
	if err != nil {
		return nil, err
	}
	set.destinations, set.operators = dests, operators
	return set, nil
}

func parseClient(n *yaml.Node, position int) (*Client, error) {
	where := fmt.Sprintf("client %d (line %d)", position, n.Line)
	if n.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%s: want a mapping with an id", where)
	}
	id, ok := scalar(member(n, "id"))
	if !ok || !validID(id, false) {
		return nil, fmt.Errorf("%s: id must be 1 to 64 characters of a-z 0-9 _ -", where)
	}
	where = fmt.Sprintf("client %q", id)
	if err := checkMembers(n, clientMembers, where); err != nil {
		return nil, err
	}
	c := &Client{ID: id}

	if hashes := member(n, "tokens_sha256"); hashes != nil {
		list, ok := scalars(hashes)
		if !ok {
			return nil, fmt.Errorf("%s: tokens_sha256 must be a list of hashes", where)
		}
		for i, s := range list {
			h, err := parseTokenHash(s)
			if err != nil {
				return nil, fmt.Errorf("%s: tokens_sha256 entry %d: %w", where, i+1, err)
			}
			c.TokenHashes = append(c.TokenHashes, h)
		}
	}

	if keys := member(n, "publishable_keys"); keys != nil {
		if keys.Kind != yaml.SequenceNode {
			return nil, fmt.Errorf("%s: publishable_keys must be a list", where)
		}
		for i, k := range keys.Content {
			at := fmt.Sprintf("%s: publishable key %d", where, i+1)
			if k.Kind != yaml.MappingNode {
				return nil, fmt.Errorf("%s: want key and origins", at)
			}
			if err := checkMembers(k, publishableMembers, at); err != nil {
				return nil, err
			}
			key, ok := scalar(member(k, "key"))
			if !ok || !validPublishableKey(key) {
				return nil, fmt.Errorf("%s: the key must be pk_ then 16 to 64 characters of A-Z a-z 0-9 _", at)
			}
			origins, ok := scalars(member(k, "origins"))
			if !ok || len(origins) == 0 {
				return nil, fmt.Errorf("%s: origins must be a non-empty list", at)
			}
			pk := PublishableKey{Key: key}
			for j, o := range origins {
				canonical, ok := parseOrigin(o)
				if !ok {
					return nil, fmt.Errorf("%s: origin %d must be scheme://host[:port] (http or https, no path)", at, j+1)
				}
				pk.Origins = append(pk.Origins, canonical)
			}
			if n := member(k, "spam"); n != nil {
				sp, err := parseSpam(n, at+": spam")
				if err != nil {
					return nil, err
				}
				pk.Spam = sp
			}
			c.PublishableKeys = append(c.PublishableKeys, pk)
		}
	}

	if cb := member(n, "callback"); cb != nil {
		at := where + ": callback"
		if cb.Kind != yaml.MappingNode {
			return nil, fmt.Errorf("%s: want url and secret", at)
		}
		if err := checkMembers(cb, callbackMembers, at); err != nil {
			return nil, err
		}
		raw, ok := scalar(member(cb, "url"))
		u, err := url.Parse(raw)
		if !ok || err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("%s: url must be an absolute http(s) URL", at)
		}
		secret, err := parseSecret(member(cb, "secret"))
		if err != nil {
			return nil, fmt.Errorf("%s: secret: %w", at, err)
		}
		c.Callback = &Callback{URL: raw, Secret: secret}
	}

	if err := parseClientDestinations(n, c, where); err != nil {
		return nil, err
	}
	if err := parseOwners(n, c, where); err != nil {
		return nil, err
	}

	if ws := member(n, "webhook_secret"); ws != nil {
		secret, err := parseSecret(ws)
		if err != nil {
			return nil, fmt.Errorf("%s: webhook_secret: %w", where, err)
		}
		c.WebhookSecret = secret
	}
	return c, nil
}

// parseSpam reads a publishable key's spam policy; every member is
// optional (spam: {} takes the defaults). Its errors never quote the
// captcha's secret.
func parseSpam(n *yaml.Node, at string) (*Spam, error) {
	if n.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%s: want a mapping (spam: {} for the defaults)", at)
	}
	if err := checkMembers(n, spamMembers, at); err != nil {
		return nil, err
	}
	sp := &Spam{MinSeconds: DefaultMinSeconds, Action: SpamQuarantine}
	if m := member(n, "min_seconds"); m != nil {
		v, ok := scalar(m)
		secs, err := strconv.Atoi(v)
		if !ok || m.Tag == "!!str" || err != nil || secs < 0 || secs > 3600 {
			return nil, fmt.Errorf("%s: min_seconds must be a whole number of seconds from 0 to 3600", at)
		}
		sp.MinSeconds = secs
	}
	if m := member(n, "action"); m != nil {
		v, ok := scalar(m)
		if !ok || (v != SpamQuarantine && v != SpamRefuse) {
			return nil, fmt.Errorf("%s: action must be quarantine or refuse", at)
		}
		sp.Action = v
	}
	if m := member(n, "captcha"); m != nil {
		cat := at + ": captcha"
		if m.Kind != yaml.MappingNode {
			return nil, fmt.Errorf("%s: want verify_url and secret", cat)
		}
		if err := checkMembers(m, captchaMembers, cat); err != nil {
			return nil, err
		}
		raw, ok := scalar(member(m, "verify_url"))
		u, err := url.Parse(raw)
		if !ok || err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
			return nil, fmt.Errorf("%s: verify_url must be an absolute http(s) URL", cat)
		}
		secret, ok := scalar(member(m, "secret"))
		if !ok || strings.TrimSpace(secret) == "" {
			return nil, fmt.Errorf("%s: secret is required (the siteverify service's secret key)", cat)
		}
		sp.Captcha = &Captcha{VerifyURL: raw, Secret: secret}
	}
	return sp, nil
}

func parseSecret(n *yaml.Node) (webhook.Secret, error) {
	s, ok := scalar(n)
	if !ok {
		return webhook.Secret{}, errors.New("want whsec_ then the base64 of the key")
	}
	secret, err := webhook.ParseSecret(s)
	if err != nil {
		// ParseSecret never quotes the secret.
		return webhook.Secret{}, err
	}
	return secret, nil
}

// member returns the value of the mapping n's member name, nil when absent.
func member(n *yaml.Node, name string) *yaml.Node {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == name {
			return n.Content[i+1]
		}
	}
	return nil
}

// checkMembers refuses a member of n that is not in known, or one listed
// twice. An unknown member is named by its line and column, never by its
// text: it may be a value pasted where a member name belongs (the start of
// a secret); a known name is no secret.
func checkMembers(n *yaml.Node, known map[string]bool, where string) error {
	if n.Kind != yaml.MappingNode {
		return fmt.Errorf("%s: want a mapping", where)
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := n.Content[i]
		if !known[k.Value] {
			return fmt.Errorf("%s: unknown member at line %d, column %d", where, k.Line, k.Column)
		}
		if seen[k.Value] {
			return fmt.Errorf("%s: member %q is listed twice", where, k.Value)
		}
		seen[k.Value] = true
	}
	return nil
}

func scalar(n *yaml.Node) (string, bool) {
	if n == nil || n.Kind != yaml.ScalarNode {
		return "", false
	}
	return n.Value, true
}

func scalars(n *yaml.Node) ([]string, bool) {
	if n == nil || n.Kind != yaml.SequenceNode {
		return nil, false
	}
	out := make([]string, 0, len(n.Content))
	for _, item := range n.Content {
		s, ok := scalar(item)
		if !ok {
			return nil, false
		}
		out = append(out, s)
	}
	return out, true
}

func validPublishableKey(k string) bool {
	rest, ok := strings.CutPrefix(k, "pk_")
	if !ok || len(rest) < 16 || len(rest) > 64 {
		return false
	}
	for i := 0; i < len(rest); i++ {
		c := rest[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}
