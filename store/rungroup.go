package store

import (
	"context"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// GroupRuns makes the reads (Lead), the saves (Save; the durable ones in
// groups of their own), the checks (Holds) and the finishes (Finish) of
// concurrent runs go together, as GroupClaims makes claims: one statement
// reads, saves or checks a group of leads, one transaction finishes a group
// or saves a durable group (one wait for the disk), whatever its size. Each save and finish is fenced and answered as alone. A lead twice
// in one group, and every member of a group of several that failed, goes
// the single way, so that one bad row never fails another. See batcher for
// how groups form. It needs a store on a pool, and is set once, before the
// store is used.
func (s *Store) GroupRuns(o GroupOpts) error {
	return s.startGroups(o, s.loads, s.saves, s.durables, s.checks, s.finishes)
}

// loadOne reads one lead alone.
func (s *Store) loadOne(ctx context.Context, id uuid.UUID) (*Lead, error) {
	return scanLead(s.db.QueryRow(ctx, loadLeadSQL, id))
}

// loadGroup reads a group of leads in one statement.
func (s *Store) loadGroup(ctx context.Context, ids []uuid.UUID, answer func(int, *Lead, error)) error {
	rows, err := s.db.Query(ctx, loadLeadsSQL, ids)
	if err != nil {
		return err
	}
	defer rows.Close()
	got := make(map[uuid.UUID]*Lead, len(ids))
	for rows.Next() {
		l, err := scanLead(rows)
		if err != nil {
			return err
		}
		got[l.ID] = l
	}
	if err := rows.Err(); err != nil {
		return err
	}
	for i, id := range ids {
		l := got[id]
		if l == nil {
			answer(i, nil, ErrNotFound)
			continue
		}
		// Each caller gets a lead of its own, also for twins.
		c := *l
		answer(i, &c, nil)
	}
	return nil
}

// pendingSave is one save of a lead that is not durable.
type pendingSave struct {
	row   saveRow
	calls []Call
}

// saveOne writes one save alone, and reports whether it saved the lead,
// and its owner.
func (s *Store) saveOne(ctx context.Context, p pendingSave) (savedLead, error) {
	leads, err := s.saveRows(ctx, false, []saveRow{p.row}, p.calls)
	return leads.of(p.row.LeadID), err
}

// saveGroup writes a group of saves in one round trip: the saves of one
// implicit transaction, none of them durable.
func (s *Store) saveGroup(ctx context.Context, ps []pendingSave, answer func(int, savedLead, error)) error {
	return s.saveRowsOf(ctx, false, ps, answer)
}

// durableOne writes one durable save alone: it commits, so it is never
// cancelled (see uncancelled).
func (s *Store) durableOne(ctx context.Context, p pendingSave) (savedLead, error) {
	return uncancelled(ctx, func(ctx context.Context) (savedLead, error) {
		leads, err := s.saveRows(ctx, true, []saveRow{p.row}, p.calls)
		return leads.of(p.row.LeadID), err
	})
}

// durableGroup writes a group of durable saves in one transaction, made
// durable: one round trip and one wait for the disk for the group. Its
// commit is never cancelled (see uncancelled); the saves stopped waiting
// for it at their callers' deadlines.
func (s *Store) durableGroup(ctx context.Context, ps []pendingSave, answer func(int, savedLead, error)) error {
	return s.saveRowsOf(context.WithoutCancel(ctx), true, ps, answer)
}

// saveRowsOf writes the group ps with saveRows and answers each save.
func (s *Store) saveRowsOf(ctx context.Context, durable bool, ps []pendingSave, answer func(int, savedLead, error)) error {
	var (
		rows  []saveRow
		calls []Call
	)
	for _, p := range ps {
		rows, calls = append(rows, p.row), append(calls, p.calls...)
	}
	leads, err := s.saveRows(ctx, durable, rows, calls)
	if err != nil {
		return err
	}
	for i, p := range ps {
		answer(i, leads.of(p.row.LeadID), nil)
	}
	return nil
}

// checkOne checks one run's hold alone.
func (s *Store) checkOne(ctx context.Context, run Run) (struct{}, error) {
	var held error
	if err := s.checkGroup(ctx, []Run{run}, func(_ int, _ struct{}, err error) { held = err }); err != nil {
		return struct{}{}, err
	}
	return struct{}{}, held
}

// finishOne is Finish in a transaction of its own.
func (s *Store) finishOne(ctx context.Context, f *Finish) (*Finished, error) {
	done, err := s.finishAll(ctx, []*Finish{f})
	if err != nil {
		return nil, err
	}
	return &done[0], nil
}

// finishGroup finishes a group of leads in one transaction.
func (s *Store) finishGroup(ctx context.Context, fs []*Finish, answer func(int, *Finished, error)) error {
	done, err := s.finishAll(ctx, fs)
	if err != nil {
		return err
	}
	for i := range done {
		answer(i, &done[i], nil)
	}
	return nil
}

// finishAll finishes fs in one durable transaction (finishTx), and
// announces what it finished once it committed.
func (s *Store) finishAll(ctx context.Context, fs []*Finish) ([]Finished, error) {
	var (
		done []Finished
		fin  finishing
	)
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var err error
		done, err = s.finishTx(ctx, tx, true, fs, &fin)
		return err
	})
	if err != nil {
		return nil, err
	}
	s.announce(fin.finals...)
	return done, nil
}
