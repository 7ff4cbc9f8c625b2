package store

import (
	"context"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/leadintake/leadintake/lead"
)

// GroupClaims makes Claim commit concurrent claims of new keys together:
// one multi-row insert of the keys, one insert of the jobs (Jobs), one
// multi-row insert of the leads with their job ids, one COMMIT, in five
// round trips whatever the group's size. A key the group finds taken, an
// amendment, a claim judged spam, and every claim of a group that failed
// go the single way (Claim's own transaction), so that one bad request
// never fails another. Concurrent peeks (Peek) and reads of operations
// (Operation) are read together too, in one statement a group. See batcher
// for how groups form. It needs a store on a pool, and is set once, before
// the store is used.
func (s *Store) GroupClaims(o GroupOpts) error {
	return s.startGroups(o, s.claims, s.peeks, s.ops)
}

// groupedClaim is one claim of a new key in a group. leadID is drawn
// before the group; traceParent is the claiming request's: its lead's job
// continues that trace, not the group's.
type groupedClaim struct {
	p           *ClaimParams
	leadID      uuid.UUID
	traceParent string
}

// claimGroup claims, in one transaction, the keys of the group that are
// new, and answers those once it committed; the others (their keys exist)
// go the single way.
func (s *Store) claimGroup(ctx context.Context, group []*groupedClaim, answer func(int, *ClaimResult, error)) error {
	keys := make([]keyRow, len(group))
	leads := make(map[uuid.UUID]leadRow, len(group))
	for i, c := range group {
		k, l := rowsOf(c.p, c.leadID, chain{})
		l.TraceParent = nullIfEmpty(c.traceParent)
		keys[i] = k
		leads[c.leadID] = l
	}

	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	b := &pgx.Batch{}
	b.Queue(durably)
	b.Queue(genericPlans)
	b.Queue(insertKeysSQL, rowArgs(keys, nil))
	br := tx.SendBatch(ctx, b)
	claimedIDs, err := func() ([]uuid.UUID, error) {
		defer br.Close()
		for range 2 { // durably, genericPlans
			if _, err := br.Exec(); err != nil {
				return nil, err
			}
		}
		rows, err := br.Query()
		if err != nil {
			return nil, err
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
		if err != nil {
			return nil, err
		}
		return ids, br.Close()
	}()
	if err != nil {
		return err
	}
	if len(claimedIDs) == 0 {
		return nil // every key exists: nothing to commit
	}
	claimed := make([]leadRow, len(claimedIDs))
	won := make(map[uuid.UUID]bool, len(claimedIDs))
	for i, id := range claimedIDs {
		claimed[i], won[id] = leads[id], true
	}
	if err := s.insertLeads(ctx, tx, claimed); err != nil {
		return err
	}
	// Never cancelled (see uncancelled); the claims stopped waiting for
	// it at their own deadlines.
	if err := tx.Commit(context.WithoutCancel(ctx)); err != nil {
		return err
	}
	for i, c := range group {
		if won[c.leadID] {
			answer(i, &ClaimResult{Outcome: OutcomeClaimed, State: lead.KeyProcessing, LeadID: c.leadID}, nil)
		}
	}
	return nil
}
