package store

import (
	"cmp"
	"context"
	"errors"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/leadintake/leadintake/internal/tracing"
)

// GroupRuns makes the reads (Lead), the saves (Save, but the durable ones),
// the checks (Holds) and the finishes (Finish) of concurrent runs go
// together, as GroupClaims makes claims:
// one statement saves a group of leads, one transaction finishes a group,
// whatever its size, and a group starts as soon as a connection slot is
// free, with what arrived meanwhile. Each save and finish is fenced and
// answered as alone. A lead twice in one group, and every member of a
// group of several that failed, goes the single way, so that one bad row
// never fails another; a group of one that failed is that member's failure. It needs a store on a pool, and is set once, before the store
// is used.
func (s *Store) GroupRuns(o GroupOpts) error {
	if s.pool == nil {
		return errors.New("store: grouped runs need a store on a pool")
	}
	o.MaxGroup = cmp.Or(o.MaxGroup, 64)
	o.MaxInFlight = cmp.Or(o.MaxInFlight, 4)
	o.Timeout = cmp.Or(o.Timeout, 5*time.Second)
	g := &runGroup{store: s, timeout: o.Timeout}
	g.saves = batcher[*pendingSave]{maxBatch: o.MaxGroup, maxInFlight: o.MaxInFlight, run: g.saveGroup}
	g.finishes = batcher[*pendingFinish]{maxBatch: o.MaxGroup, maxInFlight: o.MaxInFlight, run: g.finishGroup}
	g.checks = batcher[*pendingCheck]{maxBatch: o.MaxGroup, maxInFlight: o.MaxInFlight, run: g.checkGroup}
	g.loads = batcher[*pendingLoad]{maxBatch: o.MaxGroup, maxInFlight: o.MaxInFlight, run: g.loadGroup}
	s.runs = g
	return nil
}

// runGroup gathers the saves and the finishes of concurrent runs.
type runGroup struct {
	store    *Store
	timeout  time.Duration
	saves    batcher[*pendingSave]
	finishes batcher[*pendingFinish]
	checks   batcher[*pendingCheck]
	loads    batcher[*pendingLoad]
}

// pending is what every member of a group holds: its caller's context,
// and done, closed once the group is over. grouped is set before, when the
// group answered the member (err the answer of a group of one that
// failed: alone, the single way would only try again); otherwise the
// member goes the single way.
type pending struct {
	ctx     context.Context
	done    chan struct{}
	grouped bool
	err     error
}

func newPending(ctx context.Context) pending {
	return pending{ctx: ctx, done: make(chan struct{})}
}

func (p *pending) member() *pending { return p }

// wait waits for the member's group, or for its caller to leave.
func (p *pending) wait() error {
	select {
	case <-p.done:
		return nil
	case <-p.ctx.Done():
		return p.ctx.Err()
	}
}

// member is a pending save, check, finish or load.
type member interface{ member() *pending }

// runMembers runs one group: run does the work of the members whose callers
// still wait, one a lead when lead names it (a twin goes the single way),
// on a context of the group's own, and sets each one's answer; the
// statement is recorded, as name, in the trace of each member.
func runMembers[T member](g *runGroup, name string, group []T, lead func(T) uuid.UUID, run func(ctx context.Context, members []T) error) {
	defer func() {
		for _, p := range group {
			close(p.member().done)
		}
	}()
	var (
		members []T
		seen    = map[uuid.UUID]bool{}
	)
	for _, p := range group {
		if p.member().ctx.Err() != nil {
			continue // its caller left
		}
		if lead != nil {
			id := lead(p)
			if seen[id] {
				continue // its twin's caller goes the single way
			}
			seen[id] = true
		}
		members = append(members, p)
	}
	if len(members) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), g.timeout)
	defer cancel()
	start := time.Now()
	err := run(ctx, members)
	for _, p := range members {
		tracing.Grouped(p.member().ctx, name, start, time.Now(), len(members), err)
	}
	if err != nil && len(members) == 1 {
		members[0].member().grouped, members[0].member().err = true, err
	}
}

// pendingSave is one save waiting for its group.
type pendingSave struct {
	pending
	row   saveRow
	calls []Call
	saved savedLead
}

// save writes one save in a group, and reports whether it saved the lead.
func (g *runGroup) save(ctx context.Context, row saveRow, calls []Call) (savedLead, error) {
	p := &pendingSave{pending: newPending(ctx), row: row, calls: calls}
	g.saves.add(p)
	if err := p.wait(); err != nil {
		return savedLead{}, err
	}
	if p.grouped {
		return p.saved, p.err
	}
	leads, err := g.store.saveRows(ctx, false, []saveRow{row}, calls)
	return leads.of(row.LeadID), err
}

// saveGroup writes a group of saves in one round trip: the saves of one
// implicit transaction (none of them durable).
func (g *runGroup) saveGroup(group []*pendingSave) {
	runMembers(g, "save leads (grouped)", group, func(p *pendingSave) uuid.UUID { return p.row.LeadID },
		func(ctx context.Context, members []*pendingSave) error {
			var (
				rows  []saveRow
				calls []Call
			)
			for _, p := range members {
				rows, calls = append(rows, p.row), append(calls, p.calls...)
			}
			leads, err := g.store.saveRows(ctx, false, rows, calls)
			if err != nil {
				return err
			}
			for _, p := range members {
				p.grouped, p.saved = true, leads.of(p.row.LeadID)
			}
			return nil
		})
}

// pendingFinish is one finish waiting for its group.
type pendingFinish struct {
	pending
	f   *Finish
	res Finished
}

// finish ends one lead in a group.
func (g *runGroup) finish(ctx context.Context, f *Finish) (*Finished, error) {
	p := &pendingFinish{pending: newPending(ctx), f: f}
	g.finishes.add(p)
	if err := p.wait(); err != nil {
		// The group may still commit it: the job's next run finds the key
		// finished, and does nothing.
		return nil, err
	}
	if p.grouped {
		if p.err != nil {
			return nil, p.err
		}
		return &p.res, nil
	}
	return g.store.finishOne(ctx, f)
}

// finishGroup finishes a group of leads in one durable transaction
// (finishTx), and announces what it finished once it committed.
func (g *runGroup) finishGroup(group []*pendingFinish) {
	runMembers(g, "finish leads (grouped)", group, func(p *pendingFinish) uuid.UUID { return p.f.LeadID },
		func(ctx context.Context, members []*pendingFinish) error {
			fs := make([]*Finish, len(members))
			for i, p := range members {
				fs[i] = p.f
			}
			var (
				done []Finished
				fin  finishing
			)
			err := g.store.inTx(ctx, func(tx pgx.Tx) error {
				var err error
				done, err = g.store.finishTx(ctx, tx, true, fs, &fin)
				return err
			})
			if err != nil {
				return err
			}
			g.store.announce(fin.finals...)
			for i, p := range members {
				p.grouped, p.res = true, done[i]
			}
			return nil
		})
}

// pendingCheck is one check of a run's hold waiting for its group.
type pendingCheck struct {
	pending
	run Run
}

// check checks run's hold in a group.
func (g *runGroup) check(ctx context.Context, run Run) error {
	p := &pendingCheck{pending: newPending(ctx), run: run}
	g.checks.add(p)
	if err := p.wait(); err != nil {
		return err
	}
	if p.grouped {
		return p.err
	}
	return g.store.checkRuns(ctx, []*pendingCheck{p})
}

// checkGroup checks a group of runs' holds in one statement.
func (g *runGroup) checkGroup(group []*pendingCheck) {
	runMembers(g, "check holds (grouped)", group, nil, g.store.checkRuns)
}

// pendingLoad is one read of a lead waiting for its group.
type pendingLoad struct {
	pending
	id uuid.UUID
	// l is the lead the group read, nil for none.
	l *Lead
}

// load reads a lead in a group.
func (g *runGroup) load(ctx context.Context, id uuid.UUID) (*Lead, error) {
	p := &pendingLoad{pending: newPending(ctx), id: id}
	g.loads.add(p)
	if err := p.wait(); err != nil {
		return nil, err
	}
	switch {
	case !p.grouped:
		return scanLead(g.store.db.QueryRow(ctx, loadLeadSQL, id))
	case p.err != nil:
		return nil, p.err
	case p.l == nil:
		return nil, ErrNotFound
	}
	return p.l, nil
}

// loadGroup reads a group of leads in one statement.
func (g *runGroup) loadGroup(group []*pendingLoad) {
	runMembers(g, "load leads (grouped)", group, nil, func(ctx context.Context, members []*pendingLoad) error {
		ids := make([]uuid.UUID, len(members))
		for i, p := range members {
			ids[i] = p.id
		}
		got, err := g.store.loadRows(ctx, ids)
		if err != nil {
			return err
		}
		for _, p := range members {
			if l := got[p.id]; l != nil {
				// Each caller gets a lead of its own, also for twins.
				c := *l
				p.l = &c
			}
			p.grouped = true
		}
		return nil
	})
}

// loadRows reads the leads ids in one statement, by id.
func (s *Store) loadRows(ctx context.Context, ids []uuid.UUID) (map[uuid.UUID]*Lead, error) {
	rows, err := s.db.Query(ctx, loadLeadsSQL, ids)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	got := make(map[uuid.UUID]*Lead, len(ids))
	for rows.Next() {
		l, err := scanLead(rows)
		if err != nil {
			return nil, err
		}
		got[l.ID] = l
	}
	return got, rows.Err()
}
