package destination

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Config is one destination as configured: an entry of the clients file's
// destinations, or one the environment makes (crm and notification, from
// CRM_URL and NOTIFY_URL).
type Config struct {
	Name string
	Kind string
	// BaseURL, when set, replaces the vendor's origin (a regional
	// endpoint, a proxy, a stand-in): the kind's paths are appended to it.
	BaseURL string
	// RateLimit bounds the calls to the destination across every worker;
	// the zero Limit is none.
	RateLimit Limit
	// Map adds vendor fields from the lead's members (CRM kinds).
	Map Mapping
	// Members are the kind's own members: Values the scalars, Lists the
	// lists of strings.
	Values map[string]string
	Lists  map[string][]string
	// Timeout bounds each call (DOWNSTREAM_TIMEOUT); DefaultTimeout when
	// zero.
	Timeout time.Duration
}

// Value returns the scalar member name, "" when absent.
func (c *Config) Value(name string) string { return c.Values[name] }

// Base is BaseURL when set, else vendor, without a trailing slash.
func (c *Config) Base(vendor string) string {
	if c.BaseURL != "" {
		return strings.TrimRight(c.BaseURL, "/")
	}
	return strings.TrimRight(vendor, "/")
}

// Equal reports whether c and o configure the same destination (a
// destination whose configuration did not change keeps its connections and
// tokens across a reload).
func (c *Config) Equal(o *Config) bool {
	if c.Name != o.Name || c.Kind != o.Kind || c.BaseURL != o.BaseURL || c.RateLimit != o.RateLimit ||
		c.Timeout != o.Timeout || !slices.Equal(c.Map, o.Map) || len(c.Values) != len(o.Values) || len(c.Lists) != len(o.Lists) {
		return false
	}
	for k, v := range c.Values {
		if ov, ok := o.Values[k]; !ok || ov != v {
			return false
		}
	}
	for k, v := range c.Lists {
		if !slices.Equal(v, o.Lists[k]) {
			return false
		}
	}
	return true
}

// Spec is a kind: the members its configuration takes, and how it is
// built.
type Spec struct {
	Kind string
	// Families are what the kind may serve as (http: either).
	Families []Family
	// Members are the kind's own members, besides those of every
	// destination (name, kind, base_url, rate_limit, map).
	Members []Member
	// Validate checks the members beyond their presence, when not nil.
	// Its errors name the member at fault, never its value.
	Validate func(c *Config) error
	// NewCRM and NewChannel build the destination from a Config that the
	// checks accepted; nil for a family the kind does not serve.
	NewCRM     func(c *Config) (CRM, error)
	NewChannel func(c *Config) (Channel, error)
}

// Serves reports whether the kind may serve as f.
func (s *Spec) Serves(f Family) bool { return slices.Contains(s.Families, f) }

// Member is one member a kind takes.
type Member struct {
	Name     string
	Required bool
	// Secret: never shown (a token, a password, a webhook URL).
	Secret bool
	// List: a list of strings (e-mail's to).
	List bool
}

// Limit is a rate limit: at most N calls started per Per on average, in
// bursts of at most N. The zero Limit is none.
type Limit struct {
	N   int
	Per time.Duration
}

// IsZero reports whether l sets no limit.
func (l Limit) IsZero() bool { return l.N <= 0 || l.Per <= 0 }

// ParseLimit reads a rate limit: N/s, N/m, N/h or N/<duration> (such as
// 100/10s), N at least 1.
func ParseLimit(s string) (Limit, error) {
	n, per, ok := strings.Cut(strings.TrimSpace(s), "/")
	count, err := strconv.Atoi(n)
	if !ok || err != nil || count < 1 {
		return Limit{}, errors.New("want N/s, N/m, N/h or N/<duration> (such as 100/10s) with N at least 1")
	}
	d, known := map[string]time.Duration{"s": time.Second, "m": time.Minute, "h": time.Hour}[per]
	if !known {
		if d, err = time.ParseDuration(per); err != nil || d <= 0 {
			return Limit{}, errors.New("want N/s, N/m, N/h or N/<duration> (such as 100/10s) with a positive duration")
		}
	}
	return Limit{N: count, Per: d}, nil
}

var nameRE = regexp.MustCompile(`^[a-z0-9_-]{1,64}$`)

// Reserved are the names of the destinations the environment makes.
var Reserved = []string{"enrichment", "crm", "notification"}

// CheckName checks a destination's name: 1..64 of a-z 0-9 _ -, and not one
// of Reserved.
func CheckName(name string) error {
	if !nameRE.MatchString(name) {
		return errors.New("name must be 1 to 64 characters of a-z 0-9 _ -")
	}
	if slices.Contains(Reserved, name) {
		return fmt.Errorf("name %q is the environment's (%s)", name, strings.Join(Reserved, ", "))
	}
	return nil
}

// CheckHTTPURL checks that raw is an absolute http(s) URL; base requires it
// to have no query, fragment or user-info (a base the kind's paths are
// appended to: an origin, or one with a path prefix, as a proxy may have).
// The error names member, never the value.
func CheckHTTPURL(member, raw string, base bool) error {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%s must be an absolute http(s) URL", member)
	}
	if base && (u.RawQuery != "" || u.Fragment != "" || u.User != nil) {
		return fmt.Errorf("%s must be scheme://host[:port][/path], without a query, fragment or user-info", member)
	}
	return nil
}
