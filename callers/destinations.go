package callers

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/leadintake/leadintake/destination"
	"github.com/leadintake/leadintake/destination/kinds"
)

// The environment's destinations (CRM_URL, NOTIFY_URL): the crm and the
// notification of every client that names none of its own.
const (
	DefaultCRM          = "crm"
	DefaultNotification = "notification"
)

// MaxNotify bounds a client's notification channels.
const MaxNotify = 5

// commonDestinationMembers are the members every destination takes,
// besides its kind's.
var commonDestinationMembers = []string{"name", "kind", "base_url", "rate_limit", "map"}

// Destinations returns the clients file's destinations, in the order of
// the file.
func (s *Set) Destinations() []*destination.Config { return s.destinations }

// CRMOf is the name of the CRM destination of the client id: its own, or
// the environment's (DefaultCRM).
func (s *Set) CRMOf(id string) string {
	if c, ok := s.byID[id]; ok && c.CRM != "" {
		return c.CRM
	}
	return DefaultCRM
}

// NotifyOf is the names of the notification channels of the client id:
// its own (none for notify: []), or the environment's
// (DefaultNotification).
func (s *Set) NotifyOf(id string) []string {
	if c, ok := s.byID[id]; ok && c.Notify != nil {
		return c.Notify
	}
	return []string{DefaultNotification}
}

// UsesDefault reports whether some client of the set writes to the
// environment's CRM (crm) or notifies its notification service
// (notification): only then does the worker need CRM_URL or NOTIFY_URL.
// A set without any client (API_CLIENTS only, read by the api) counts as
// using both.
func (s *Set) UsesDefault(name string) bool {
	if len(s.byID) == 0 {
		return true
	}
	for id := range s.byID {
		if name == DefaultCRM && s.CRMOf(id) == DefaultCRM || name == DefaultNotification && slices.Contains(s.NotifyOf(id), DefaultNotification) {
			return true
		}
	}
	return false
}

// parseDestinations reads the clients file's destinations. Its errors name
// the destination (by name, or position) and the member at fault, never a
// value: the members hold secrets.
func parseDestinations(list *yaml.Node) ([]*destination.Config, error) {
	if list.Kind != yaml.SequenceNode {
		return nil, errors.New(`"destinations" must be a list`)
	}
	out := make([]*destination.Config, 0, len(list.Content))
	seen := map[string]bool{}
	for i, n := range list.Content {
		d, err := parseDestination(n, i+1)
		if err != nil {
			return nil, err
		}
		if seen[d.Name] {
			return nil, fmt.Errorf("destination %q is listed twice", d.Name)
		}
		seen[d.Name] = true
		out = append(out, d)
	}
	return out, nil
}

func parseDestination(n *yaml.Node, position int) (*destination.Config, error) {
	where := fmt.Sprintf("destination %d (line %d)", position, n.Line)
	if n.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%s: want a mapping with a name and a kind", where)
	}
	name, _ := scalar(member(n, "name"))
	if err := destination.CheckName(name); err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	where = fmt.Sprintf("destination %q", name)
	kind, _ := scalar(member(n, "kind"))
	spec, ok := kinds.Lookup(kind)
	if !ok {
		return nil, fmt.Errorf("%s: kind must be one of %s", where, strings.Join(kinds.Names(), ", "))
	}
	known := map[string]bool{}
	for _, m := range commonDestinationMembers {
		known[m] = true
	}
	for _, m := range spec.Members {
		known[m.Name] = true
	}
	if err := checkMembers(n, known, where); err != nil {
		return nil, err
	}
	c := &destination.Config{Name: name, Kind: kind, Values: map[string]string{}, Lists: map[string][]string{}}
	if m := member(n, "base_url"); m != nil {
		raw, ok := scalar(m)
		if !ok {
			return nil, fmt.Errorf("%s: base_url must be a URL", where)
		}
		if err := destination.CheckHTTPURL("base_url", raw, true); err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		c.BaseURL = raw
	}
	if m := member(n, "rate_limit"); m != nil {
		raw, _ := scalar(m)
		l, err := destination.ParseLimit(raw)
		if err != nil {
			return nil, fmt.Errorf("%s: rate_limit: %w", where, err)
		}
		c.RateLimit = l
	}
	if m := member(n, "map"); m != nil {
		if !spec.Serves(destination.FamilyCRM) {
			return nil, fmt.Errorf("%s: map is for CRM kinds", where)
		}
		raw, err := stringMap(m)
		if err != nil {
			return nil, fmt.Errorf("%s: map: %w", where, err)
		}
		if c.Map, err = destination.ParseMapping(raw); err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
	}
	for _, spec := range spec.Members {
		m := member(n, spec.Name)
		switch {
		case m == nil && spec.Required:
			return nil, fmt.Errorf("%s: %s is required", where, spec.Name)
		case m == nil:
		case spec.List:
			list, ok := scalars(m)
			if !ok {
				return nil, fmt.Errorf("%s: %s must be a list", where, spec.Name)
			}
			c.Lists[spec.Name] = list
		default:
			v, ok := scalar(m)
			if !ok || spec.Required && strings.TrimSpace(v) == "" {
				return nil, fmt.Errorf("%s: %s must be a value", where, spec.Name)
			}
			c.Values[spec.Name] = v
		}
	}
	if spec.Validate != nil {
		if err := spec.Validate(c); err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
	}
	return c, nil
}

// stringMap reads a mapping of strings to strings, never quoting a value.
func stringMap(n *yaml.Node) (map[string]string, error) {
	if n.Kind != yaml.MappingNode {
		return nil, errors.New("want a mapping of fields to sources")
	}
	out := map[string]string{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode || v.Kind != yaml.ScalarNode {
			return nil, fmt.Errorf("line %d: want field: source", k.Line)
		}
		if _, dup := out[k.Value]; dup {
			return nil, fmt.Errorf("field %q is listed twice", k.Value)
		}
		out[k.Value] = v.Value
	}
	return out, nil
}

// parseClientDestinations reads a client's crm and notify.
func parseClientDestinations(n *yaml.Node, c *Client, where string) error {
	if m := member(n, "crm"); m != nil {
		v, ok := scalar(m)
		if !ok || v == "" {
			return fmt.Errorf("%s: crm must name a destination", where)
		}
		c.CRM = v
	}
	if m := member(n, "notify"); m != nil {
		list, ok := scalars(m)
		if !ok {
			return fmt.Errorf("%s: notify must be a list of destinations", where)
		}
		if len(list) > MaxNotify {
			return fmt.Errorf("%s: notify names at most %d destinations", where, MaxNotify)
		}
		c.Notify = list
		if c.Notify == nil {
			c.Notify = []string{}
		}
	}
	return nil
}

// checkReferences checks that every client's crm and notify name
// destinations of the right family: the file's, or the environment's (crm
// and notification, kind http).
func checkReferences(clients []*Client, dests []*destination.Config) error {
	byName := map[string]*destination.Config{}
	for _, d := range dests {
		byName[d.Name] = d
	}
	family := func(name string) (destination.Family, destination.Family, bool) {
		switch name {
		case DefaultCRM:
			return destination.FamilyCRM, "", true
		case DefaultNotification:
			return destination.FamilyChannel, "", true
		}
		d, ok := byName[name]
		if !ok {
			return "", "", false
		}
		spec, _ := kinds.Lookup(d.Kind)
		var a, b destination.Family
		if spec.Serves(destination.FamilyCRM) {
			a = destination.FamilyCRM
		}
		if spec.Serves(destination.FamilyChannel) {
			b = destination.FamilyChannel
		}
		return a, b, true
	}
	for _, c := range clients {
		where := fmt.Sprintf("client %q", c.ID)
		if c.CRM != "" {
			a, b, ok := family(c.CRM)
			switch {
			case !ok:
				return fmt.Errorf("%s: crm names no destination (%q)", where, c.CRM)
			case a != destination.FamilyCRM && b != destination.FamilyCRM:
				return fmt.Errorf("%s: crm names %q, a notification channel", where, c.CRM)
			}
		}
		seen := map[string]bool{}
		for _, name := range c.Notify {
			a, b, ok := family(name)
			switch {
			case !ok:
				return fmt.Errorf("%s: notify names no destination (%q)", where, name)
			case a != destination.FamilyChannel && b != destination.FamilyChannel:
				return fmt.Errorf("%s: notify names %q, a CRM", where, name)
			case seen[name]:
				return fmt.Errorf("%s: notify names %q twice", where, name)
			}
			seen[name] = true
		}
	}
	return nil
}
