package jobs

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/leadintake/leadintake/callers"
	"github.com/leadintake/leadintake/destination"
	"github.com/leadintake/leadintake/destination/kinds"
	"github.com/leadintake/leadintake/store"
)

// Destinations are the destinations in force: the environment's (crm and
// notification, of kind http, from CRM_URL and NOTIFY_URL) and the clients
// file's. They are built again when the clients file is read again, each
// destination whose configuration did not change kept as it was (its
// connections, its token).
type Destinations struct {
	env     []*destination.Config
	callers *callers.Holder
	timeout time.Duration
	// simulate makes every destination a Simulator.
	simulate func(c *destination.Config) (destination.CRM, destination.Channel)

	mu     sync.Mutex
	set    *callers.Set
	built  map[string]*built
	limits map[string]store.Limit
}

// built is one destination, built from its configuration.
type built struct {
	cfg *destination.Config
	crm destination.CRM
	ch  destination.Channel
}

// DestinationsOpts configure Destinations.
type DestinationsOpts struct {
	// Env are the environment's destinations (crm, notification); one
	// whose URL is not set is left out.
	Env []*destination.Config
	// Callers are the clients in force, with the clients file's
	// destinations.
	Callers *callers.Holder
	// Timeout bounds each call (DOWNSTREAM_TIMEOUT).
	Timeout time.Duration
	// Simulate, when set, stands in for every destination (SIMULATE_DOWNSTREAM).
	Simulate func(c *destination.Config) (destination.CRM, destination.Channel)
}

// NewDestinations returns the destinations of o, built.
func NewDestinations(o DestinationsOpts) (*Destinations, error) {
	d := &Destinations{env: o.Env, callers: o.Callers, timeout: o.Timeout, simulate: o.Simulate, built: map[string]*built{}}
	if d.callers == nil {
		d.callers = callers.NewHolder(nil)
	}
	if _, err := d.current(); err != nil {
		return nil, err
	}
	return d, nil
}

// current returns the destinations built for the clients in force,
// building them again when the clients changed.
func (d *Destinations) current() (map[string]*built, error) {
	set := d.callers.Set()
	d.mu.Lock()
	defer d.mu.Unlock()
	if set == d.set && d.set != nil {
		return d.built, nil
	}
	var configs []*destination.Config
	configs = append(configs, d.env...)
	if set != nil {
		configs = append(configs, set.Destinations()...)
	}
	next := make(map[string]*built, len(configs))
	for _, c := range configs {
		c := *c
		if c.Timeout == 0 {
			c.Timeout = d.timeout
		}
		if old := d.built[c.Name]; old != nil && old.cfg.Equal(&c) {
			next[c.Name] = old
			continue
		}
		b, err := d.build(&c)
		if err != nil {
			return nil, err
		}
		next[c.Name] = b
	}
	limits := map[string]store.Limit{}
	for name, b := range next {
		if l := b.cfg.RateLimit; !l.IsZero() {
			limits[name] = store.Limit{N: l.N, Per: l.Per}
		}
	}
	d.set, d.built, d.limits = set, next, limits
	return next, nil
}

func (d *Destinations) build(c *destination.Config) (*built, error) {
	b := &built{cfg: c}
	if d.simulate != nil {
		b.crm, b.ch = d.simulate(c)
		return b, nil
	}
	spec, ok := kinds.Lookup(c.Kind)
	if !ok {
		return nil, fmt.Errorf("destination %q: unknown kind", c.Name)
	}
	var err error
	if spec.NewCRM != nil {
		if b.crm, err = spec.NewCRM(c); err != nil {
			return nil, fmt.Errorf("destination %q: %w", c.Name, err)
		}
	}
	if spec.NewChannel != nil {
		if b.ch, err = spec.NewChannel(c); err != nil {
			return nil, fmt.Errorf("destination %q: %w", c.Name, err)
		}
	}
	return b, nil
}

// errNoDestination is a destination a lead names that is not configured
// (any more): its leads wait for it, as for one that is down, until the
// configuration names it again or their delivery expires.
type errNoDestination struct{ name string }

func (e *errNoDestination) Error() string {
	return fmt.Sprintf("destination %q is not configured", e.name)
}

// CRM returns the CRM destination name, and its configuration.
func (d *Destinations) CRM(name string) (destination.CRM, *destination.Config, error) {
	all, err := d.current()
	if err != nil {
		return nil, nil, err
	}
	b := all[name]
	if b == nil || b.crm == nil {
		return nil, nil, &errNoDestination{name}
	}
	return b.crm, b.cfg, nil
}

// Channel returns the notification channel name, and its configuration.
func (d *Destinations) Channel(name string) (destination.Channel, *destination.Config, error) {
	all, err := d.current()
	if err != nil {
		return nil, nil, err
	}
	b := all[name]
	if b == nil || b.ch == nil {
		return nil, nil, &errNoDestination{name}
	}
	return b.ch, b.cfg, nil
}

// Set is the clients in force.
func (d *Destinations) Set() *callers.Set {
	if s := d.callers.Set(); s != nil {
		return s
	}
	empty, _ := callers.NewSet(nil)
	return empty
}

// Configs returns the configuration of every destination in force, the
// environment's first.
func (d *Destinations) Configs() []*destination.Config {
	all, err := d.current()
	if err != nil {
		return nil
	}
	out := make([]*destination.Config, 0, len(all))
	for _, c := range d.env {
		if b := all[c.Name]; b != nil {
			out = append(out, b.cfg)
		}
	}
	if s := d.callers.Set(); s != nil {
		for _, c := range s.Destinations() {
			if b := all[c.Name]; b != nil {
				out = append(out, b.cfg)
			}
		}
	}
	return out
}

// Checker returns the destination name as a checker, when its kind can
// check without sending (destination.Checker).
func (d *Destinations) Checker(name string) (destination.Checker, bool) {
	all, err := d.current()
	if err != nil {
		return nil, false
	}
	b := all[name]
	if b == nil {
		return nil, false
	}
	for _, v := range []any{b.crm, b.ch} {
		if c, ok := v.(destination.Checker); ok && v != nil {
			return c, true
		}
	}
	return nil, false
}

// Limit is the rate limit of the destination name; the zero Limit is
// none.
func (d *Destinations) Limit(name string) store.Limit {
	if _, err := d.current(); err != nil {
		return store.Limit{}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.limits[name]
}

// Refresh builds the destinations of the clients in force and gives each
// its shared state (store.EnsureDownstreams); a destination whose
// configuration changed and that is down is probed at once (a corrected
// token may end its outage). The worker calls it at its start and after
// each reading of the clients file.
func (d *Destinations) Refresh(ctx context.Context, st *store.Store) error {
	d.mu.Lock()
	before := d.built
	d.mu.Unlock()
	all, err := d.current()
	if err != nil {
		return err
	}
	names := make([]string, 0, len(all)+1)
	var changed []string
	for name, b := range all {
		names = append(names, name)
		if old := before[name]; old != nil && old != b {
			changed = append(changed, name)
		}
	}
	names = append(names, store.DownstreamEnrichment)
	if err := st.EnsureDownstreams(ctx, names); err != nil {
		return err
	}
	if len(changed) > 0 {
		return st.ProbeSoon(ctx, changed)
	}
	return nil
}
