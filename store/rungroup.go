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

// pendingSave is one save waiting for its group.
type pendingSave struct {
	ctx   context.Context
	row   saveRow
	calls []Call
	// grouped is set, before done is closed, when the group wrote the
	// save (saved or found fenced off), or failed alone with err;
	// otherwise it goes the single way.
	grouped, saved bool
	err            error
	done           chan struct{}
}

// save writes one save in a group, and reports whether it saved the lead.
func (g *runGroup) save(ctx context.Context, row saveRow, calls []Call) (bool, error) {
	p := &pendingSave{ctx: ctx, row: row, calls: calls, done: make(chan struct{})}
	g.saves.add(p)
	select {
	case <-p.done:
	case <-ctx.Done():
		return false, ctx.Err()
	}
	if p.grouped {
		return p.saved, p.err
	}
	ids, err := g.store.saveRows(ctx, false, []saveRow{row}, calls)
	return len(ids) == 1, err
}

// saveGroup writes a group of saves in one round trip: the saves of one
// implicit transaction (none of them durable), in the order of the leads.
func (g *runGroup) saveGroup(group []*pendingSave) {
	defer func() {
		for _, p := range group {
			close(p.done)
		}
	}()
	var (
		rows    []saveRow
		calls   []Call
		members []*pendingSave
		seen    = make(map[uuid.UUID]bool, len(group))
	)
	for _, p := range group {
		if p.ctx.Err() != nil || seen[p.row.LeadID] {
			continue // its caller left, or its twin goes the single way
		}
		seen[p.row.LeadID] = true
		rows, calls, members = append(rows, p.row), append(calls, p.calls...), append(members, p)
	}
	if len(rows) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), g.timeout)
	defer cancel()
	start := time.Now()
	ids, err := g.store.saveRows(ctx, false, rows, calls)
	for _, p := range members {
		tracing.Grouped(p.ctx, "save leads (grouped)", start, time.Now(), len(members), err)
	}
	if err != nil {
		if len(members) == 1 {
			// Alone, the single way would only try again.
			members[0].grouped, members[0].err = true, err
		}
		return
	}
	saved := make(map[uuid.UUID]bool, len(ids))
	for _, id := range ids {
		saved[id] = true
	}
	for _, p := range members {
		p.grouped, p.saved = true, saved[p.row.LeadID]
	}
}

// pendingFinish is one finish waiting for its group.
type pendingFinish struct {
	ctx context.Context
	f   *Finish
	// grouped is set, before done is closed, when the group committed the
	// finish, or failed alone with err; otherwise it goes the single way.
	grouped bool
	res     Finished
	err     error
	done    chan struct{}
}

// finish ends one lead in a group.
func (g *runGroup) finish(ctx context.Context, f *Finish) (*Finished, error) {
	p := &pendingFinish{ctx: ctx, f: f, done: make(chan struct{})}
	g.finishes.add(p)
	select {
	case <-p.done:
	case <-ctx.Done():
		// The group may still commit it: the job's next run finds the key
		// finished, and does nothing.
		return nil, ctx.Err()
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
	defer func() {
		for _, p := range group {
			close(p.done)
		}
	}()
	var (
		fs      []*Finish
		members []*pendingFinish
		seen    = make(map[uuid.UUID]bool, len(group))
	)
	for _, p := range group {
		if p.ctx.Err() != nil || seen[p.f.LeadID] {
			continue
		}
		seen[p.f.LeadID] = true
		fs, members = append(fs, p.f), append(members, p)
	}
	if len(fs) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), g.timeout)
	defer cancel()
	var (
		done []Finished
		fin  finishing
	)
	start := time.Now()
	err := g.store.inTx(ctx, func(tx pgx.Tx) error {
		var err error
		done, err = g.store.finishTx(ctx, tx, true, fs, &fin)
		return err
	})
	for _, p := range members {
		tracing.Grouped(p.ctx, "finish leads (grouped)", start, time.Now(), len(members), err)
	}
	if err != nil {
		if len(members) == 1 {
			members[0].grouped, members[0].err = true, err
		}
		return
	}
	g.store.announce(fin.finals...)
	for i, p := range members {
		p.grouped, p.res = true, done[i]
	}
}

// pendingCheck is one check of a run's hold waiting for its group.
type pendingCheck struct {
	ctx context.Context
	run Run
	// checked is set, before done is closed, when the group read the
	// lead; err is then the check's answer.
	checked bool
	err     error
	done    chan struct{}
}

// check checks run's hold in a group.
func (g *runGroup) check(ctx context.Context, run Run) error {
	p := &pendingCheck{ctx: ctx, run: run, done: make(chan struct{})}
	g.checks.add(p)
	select {
	case <-p.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	if p.checked {
		return p.err
	}
	return g.store.checkRuns(ctx, []*pendingCheck{p})
}

// checkGroup checks a group of runs' holds in one statement.
func (g *runGroup) checkGroup(group []*pendingCheck) {
	defer func() {
		for _, p := range group {
			close(p.done)
		}
	}()
	var members []*pendingCheck
	for _, p := range group {
		if p.ctx.Err() == nil {
			members = append(members, p)
		}
	}
	if len(members) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), g.timeout)
	defer cancel()
	start := time.Now()
	err := g.store.checkRuns(ctx, members)
	for _, p := range members {
		tracing.Grouped(p.ctx, "check holds (grouped)", start, time.Now(), len(members), err)
	}
	if err != nil && len(members) == 1 {
		members[0].checked, members[0].err = true, err
	}
}

// pendingLoad is one read of a lead waiting for its group.
type pendingLoad struct {
	ctx context.Context
	id  uuid.UUID
	// loaded is set, before done is closed, when the group read the
	// leads; l is then the lead, nil for none.
	loaded bool
	l      *Lead
	done   chan struct{}
}

// load reads a lead in a group.
func (g *runGroup) load(ctx context.Context, id uuid.UUID) (*Lead, error) {
	p := &pendingLoad{ctx: ctx, id: id, done: make(chan struct{})}
	g.loads.add(p)
	select {
	case <-p.done:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if !p.loaded {
		return scanLead(g.store.db.QueryRow(ctx, loadLeadSQL, id))
	}
	if p.l == nil {
		return nil, ErrNotFound
	}
	return p.l, nil
}

// loadGroup reads a group of leads in one statement.
func (g *runGroup) loadGroup(group []*pendingLoad) {
	defer func() {
		for _, p := range group {
			close(p.done)
		}
	}()
	var (
		ids     []uuid.UUID
		members []*pendingLoad
	)
	for _, p := range group {
		if p.ctx.Err() == nil {
			ids, members = append(ids, p.id), append(members, p)
		}
	}
	if len(ids) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), g.timeout)
	defer cancel()
	start := time.Now()
	got, err := g.store.loadRows(ctx, ids)
	for _, p := range members {
		tracing.Grouped(p.ctx, "load leads (grouped)", start, time.Now(), len(members), err)
	}
	if err != nil {
		return
	}
	for _, p := range members {
		if l := got[p.id]; l != nil {
			// Each caller gets a lead of its own, also for twins.
			c := *l
			p.l = &c
		}
		p.loaded = true
	}
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
