package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/leadintake/leadintake/internal/tracing"
	"github.com/leadintake/leadintake/lead"
)

// GroupOpts configure group commit of claims (Store.GroupClaims).
type GroupOpts struct {
	// MaxGroup bounds the claims of one transaction; default 64.
	MaxGroup int
	// MaxInFlight bounds the groups committing at once, each on a
	// connection of its own; default 4.
	MaxInFlight int
	// Timeout bounds one group's transaction; default 5 s.
	Timeout time.Duration
}

// GroupClaims makes Claim commit concurrent claims of new keys together:
// one multi-row insert of the keys, one insert of the jobs (Jobs), one
// multi-row insert of the leads with their job ids, one COMMIT, in five
// round trips whatever the group's size. A claim waits for no one: a group
// starts as soon as a connection slot is free, with the claims that arrived
// meanwhile. A key the group finds taken, an amendment, and every claim of
// a group that failed go the single way (Claim's own transaction), so that
// one bad request never fails another. Concurrent peeks (Peek) and reads
// of operations (Operation) are read together the same way, in one
// statement a group. It needs a store on a pool, and
// is set once, before the store is used.
func (s *Store) GroupClaims(o GroupOpts) error {
	if s.pool == nil {
		return errors.New("store: group commit needs a store on a pool")
	}
	o.MaxGroup = cmp.Or(o.MaxGroup, 64)
	o.MaxInFlight = cmp.Or(o.MaxInFlight, 4)
	o.Timeout = cmp.Or(o.Timeout, 5*time.Second)
	g := &claimGroup{store: s, opts: o}
	g.batches = batcher[*groupedClaim]{maxBatch: o.MaxGroup, maxInFlight: o.MaxInFlight, run: g.commitGroup}
	s.group = g
	s.peeks = &batcher[*pendingPeek]{maxBatch: o.MaxGroup, maxInFlight: o.MaxInFlight, run: s.peekGroup}
	s.ops = &batcher[*pendingOperation]{maxBatch: o.MaxGroup, maxInFlight: o.MaxInFlight, run: s.operationGroup}
	return nil
}

// claimGroup gathers claims of new keys and commits them in groups.
type claimGroup struct {
	store   *Store
	opts    GroupOpts
	batches batcher[*groupedClaim]
}

// groupedClaim is one claim waiting for its group.
type groupedClaim struct {
	p      *ClaimParams
	leadID uuid.UUID
	// traceParent is the claiming request's: its lead's job continues
	// that trace, not the group's. ctx is the request's, in whose trace
	// the group's statements are recorded.
	traceParent string
	ctx         context.Context
	// claimed is set, before done is closed, when the group claimed the
	// key; otherwise the claim goes the single way.
	claimed bool
	done    chan struct{}
}

// claim claims p's key in a group. It returns false when the group did
// not claim it (the key exists, or the group failed): the caller decides
// the single way.
func (g *claimGroup) claim(ctx context.Context, p *ClaimParams) (*ClaimResult, bool, error) {
	leadID, err := uuid.NewV7()
	if err != nil {
		return nil, false, fmt.Errorf("claim: lead id: %w", err)
	}
	c := &groupedClaim{p: p, leadID: leadID, traceParent: tracing.TraceParent(ctx), ctx: ctx, done: make(chan struct{})}
	g.batches.add(c)
	select {
	case <-c.done:
	case <-ctx.Done():
		// The group may still commit it: a retry finds the key.
		return nil, false, ctx.Err()
	}
	if !c.claimed {
		return nil, false, nil
	}
	return &ClaimResult{Outcome: OutcomeClaimed, State: lead.KeyProcessing, LeadID: leadID}, true, nil
}

// commitGroup commits one group. A group that failed claimed nothing: its
// claims go the single way, each on its own.
func (g *claimGroup) commitGroup(group []*groupedClaim) {
	ctx, cancel := context.WithTimeout(context.Background(), g.opts.Timeout)
	defer cancel()
	start := time.Now()
	err := g.commit(ctx, group)
	for _, c := range group {
		tracing.Grouped(c.ctx, "claim keys (grouped)", start, time.Now(), len(group), err)
		close(c.done)
	}
}

// commit claims, in one transaction, the keys of the group that are new,
// and marks them claimed once it committed.
func (g *claimGroup) commit(ctx context.Context, group []*groupedClaim) error {
	// One claim per key in a statement: a twin waits for the single way,
	// where it finds the key its twin claimed.
	type slot struct{ client, key string }
	seen := make(map[slot]bool, len(group))
	var (
		keys  []keyRow
		leads = make(map[uuid.UUID]leadRow, len(group))
	)
	for _, c := range group {
		sl := slot{c.p.ClientID, c.p.Key}
		if seen[sl] {
			continue
		}
		seen[sl] = true
		k, l := rowsOf(c.p, c.leadID, chain{})
		l.TraceParent = nullIfEmpty(c.traceParent)
		keys = append(keys, k)
		leads[c.leadID] = l
	}

	tx, err := g.store.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	b := &pgx.Batch{}
	b.Queue(durably)
	b.Queue(insertKeysSQL, rowArgs(keys, nil))
	br := tx.SendBatch(ctx, b)
	claimedIDs, err := func() ([]uuid.UUID, error) {
		defer br.Close()
		if _, err := br.Exec(); err != nil {
			return nil, err
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
	if err := g.store.insertLeads(ctx, tx, claimed); err != nil {
		return err
	}
	// Never cancelled (see uncancelled); the claims stopped waiting for
	// it at their own deadlines.
	if err := tx.Commit(context.WithoutCancel(ctx)); err != nil {
		return err
	}
	for _, c := range group {
		c.claimed = won[c.leadID]
	}
	return nil
}
