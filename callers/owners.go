package callers

import (
	"fmt"
	"net/mail"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/leadintake/leadintake/destination"
	"github.com/leadintake/leadintake/lead"
)

// Owner is one of a client's sales people, who may be assigned leads.
type Owner struct {
	Name string
	// CRMOwner is the CRM's id of the owner; Slack the Slack member id
	// mentioned in messages; Email added to an e-mail's recipients.
	CRMOwner, Slack, Email string
	// Away: skipped by every pool until it is false again.
	Away bool
}

// Destination is the owner as destinations are given it.
func (o *Owner) Destination() *destination.Owner {
	return &destination.Owner{Name: o.Name, CRMOwner: o.CRMOwner, Slack: o.Slack, Email: o.Email}
}

// Rule is one assignment rule: the first rule whose When all match a lead
// picks its Pool.
type Rule struct {
	// When are the conditions, all of which must hold; none matches every
	// lead.
	When []Condition
	// Pool are the owners the lead goes to in turn, in the listed order.
	Pool []string
}

// Condition is one member of a rule's when: Key is source, tier,
// country, industry, fields.<x>, utm.<x> (one of Values), or
// company_size_min, company_size_max (Size).
type Condition struct {
	Key    string
	Values []string
	Size   int
}

var (
	ownerNameRE = regexp.MustCompile(`^[a-z0-9_.-]{1,64}$`)
	slackIDRE   = regexp.MustCompile(`^[UW][A-Z0-9]{2,20}$`)
	ownerFields = map[string]bool{"name": true, "crm_owner": true, "slack": true, "email": true, "away": true}
	ruleFields  = map[string]bool{"when": true, "pool": true}
	whenKeys    = []string{"source", "tier", "country", "industry", "company_size_min", "company_size_max", "fields.<x>", "utm.<x>"}
)

// parseOwners reads a client's owners and assign rules. Its errors name
// the client and the owner or rule at fault.
func parseOwners(n *yaml.Node, c *Client, where string) error {
	if m := member(n, "owners"); m != nil {
		if m.Kind != yaml.SequenceNode {
			return fmt.Errorf("%s: owners must be a list", where)
		}
		for i, o := range m.Content {
			at := fmt.Sprintf("%s: owner %d", where, i+1)
			if err := checkMembers(o, ownerFields, at); err != nil {
				return err
			}
			name, _ := scalar(member(o, "name"))
			if !ownerNameRE.MatchString(name) {
				return fmt.Errorf("%s: name must be 1 to 64 characters of a-z 0-9 _ . -", at)
			}
			at = fmt.Sprintf("%s: owner %q", where, name)
			if slices.ContainsFunc(c.Owners, func(x Owner) bool { return x.Name == name }) {
				return fmt.Errorf("%s is listed twice", at)
			}
			ow := Owner{Name: name}
			ow.CRMOwner, _ = scalar(member(o, "crm_owner"))
			if ow.CRMOwner != "" && (len(ow.CRMOwner) > 64 || strings.ContainsAny(ow.CRMOwner, " \t\r\n/")) {
				return fmt.Errorf("%s: crm_owner must be the CRM's id of the owner", at)
			}
			if ow.Slack, _ = scalar(member(o, "slack")); ow.Slack != "" && !slackIDRE.MatchString(ow.Slack) {
				return fmt.Errorf("%s: slack must be a Slack member id (U... or W...)", at)
			}
			if ow.Email, _ = scalar(member(o, "email")); ow.Email != "" {
				if a, err := mail.ParseAddress(ow.Email); err != nil || a.Address != ow.Email {
					return fmt.Errorf("%s: email must be one address", at)
				}
			}
			if a := member(o, "away"); a != nil {
				v, _ := scalar(a)
				away, err := strconv.ParseBool(v)
				if err != nil {
					return fmt.Errorf("%s: away must be true or false", at)
				}
				ow.Away = away
			}
			c.Owners = append(c.Owners, ow)
		}
	}
	m := member(n, "assign")
	if m == nil {
		return nil
	}
	if m.Kind != yaml.SequenceNode {
		return fmt.Errorf("%s: assign must be a list of rules", where)
	}
	for i, r := range m.Content {
		at := fmt.Sprintf("%s: assign rule %d", where, i+1)
		if err := checkMembers(r, ruleFields, at); err != nil {
			return err
		}
		pool, ok := scalars(member(r, "pool"))
		if !ok || len(pool) == 0 {
			return fmt.Errorf("%s: pool must be a list of one or more owners", at)
		}
		for _, name := range pool {
			if !slices.ContainsFunc(c.Owners, func(x Owner) bool { return x.Name == name }) {
				return fmt.Errorf("%s: pool names %q, not one of the client's owners", at, name)
			}
		}
		rule := Rule{Pool: pool}
		if w := member(r, "when"); w != nil {
			if w.Kind != yaml.MappingNode {
				return fmt.Errorf("%s: when must be a mapping of conditions", at)
			}
			for j := 0; j+1 < len(w.Content); j += 2 {
				cond, err := parseCondition(w.Content[j], w.Content[j+1])
				if err != nil {
					return fmt.Errorf("%s: %w", at, err)
				}
				rule.When = append(rule.When, cond)
			}
		}
		c.Assign = append(c.Assign, rule)
	}
	return nil
}

func parseCondition(k, v *yaml.Node) (Condition, error) {
	key := k.Value
	c := Condition{Key: key}
	switch {
	case key == "company_size_min" || key == "company_size_max":
		s, _ := scalar(v)
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			return c, fmt.Errorf("when: %s must be a whole number", key)
		}
		c.Size = n
		return c, nil
	case key == "source" || key == "tier" || key == "country" || key == "industry":
	case strings.HasPrefix(key, "fields.") && lead.IsFieldName(strings.TrimPrefix(key, "fields.")):
	case strings.HasPrefix(key, "utm.") && len(key) > len("utm.") && len(key) <= 68:
	default:
		return c, fmt.Errorf("when: unknown key %q at line %d (want one of %s)", key, k.Line, strings.Join(whenKeys, ", "))
	}
	values, ok := scalars(v)
	if !ok {
		one, isScalar := scalar(v)
		if !isScalar {
			return c, fmt.Errorf("when: %s must be a value or a list of values", key)
		}
		values = []string{one}
	}
	if len(values) == 0 {
		return c, fmt.Errorf("when: %s must list at least one value", key)
	}
	c.Values = values
	return c, nil
}

// Facts are what a rule's conditions are judged on: the lead, its tier,
// and its enrichment (nil without data).
type Facts struct {
	Lead       *lead.Lead
	Tier       string
	Enrichment *destination.Enrichment
}

// matches reports whether every condition of r holds for f.
func (r *Rule) matches(f *Facts) bool {
	for _, c := range r.When {
		if !c.holds(f) {
			return false
		}
	}
	return true
}

func (c *Condition) holds(f *Facts) bool {
	e := f.Enrichment
	switch c.Key {
	case "company_size_min", "company_size_max":
		if e == nil || e.CompanySize == nil {
			return false
		}
		if c.Key == "company_size_min" {
			return *e.CompanySize >= c.Size
		}
		return *e.CompanySize <= c.Size
	}
	var v string
	switch key := c.Key; {
	case key == "source":
		v = f.Lead.Source
	case key == "tier":
		v = f.Tier
	case key == "country" && e != nil && e.Country != nil:
		v = *e.Country
	case key == "industry" && e != nil && e.Industry != nil:
		v = *e.Industry
	case strings.HasPrefix(key, "fields."):
		v = f.Lead.Fields[strings.TrimPrefix(key, "fields.")]
	case strings.HasPrefix(key, "utm."):
		v = f.Lead.UTM[strings.TrimPrefix(key, "utm.")]
	}
	if v == "" {
		return false
	}
	return slices.ContainsFunc(c.Values, func(want string) bool { return strings.EqualFold(want, v) })
}

// Pool is where a lead's owner comes from: the pool of the first rule that
// matched. Key names its turn (the client and its owners, in order);
// Owners are those not away, in the pool's order. A lead no rule matches
// has no Pool.
type Pool struct {
	Key    string
	Owners []string
}

// PoolFor returns the pool of the client id's first rule that matches f,
// and false when none does (or the client has no rules). A pool whose
// owners are all away has no Owners: the lead gets none.
func (s *Set) PoolFor(id string, f *Facts) (Pool, bool) {
	c, ok := s.byID[id]
	if !ok {
		return Pool{}, false
	}
	for _, r := range c.Assign {
		if !r.matches(f) {
			continue
		}
		p := Pool{Key: id + "/" + strings.Join(r.Pool, ",")}
		for _, name := range r.Pool {
			if o := c.owner(name); o != nil && !o.Away {
				p.Owners = append(p.Owners, name)
			}
		}
		return p, true
	}
	return Pool{}, false
}

// Owner returns the owner name of the client id; nil when the client has
// no such owner (any more).
func (s *Set) Owner(id, name string) *Owner {
	if c, ok := s.byID[id]; ok {
		return c.owner(name)
	}
	return nil
}

func (c *Client) owner(name string) *Owner {
	for i := range c.Owners {
		if c.Owners[i].Name == name {
			return &c.Owners[i]
		}
	}
	return nil
}
