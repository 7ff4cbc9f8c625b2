package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// EnqueueManyFunc inserts the jobs of leads inside tx, the transaction that
// claims their keys, and returns the jobs' ids in the order of leadIDs.
type EnqueueManyFunc func(ctx context.Context, tx pgx.Tx, leadIDs []uuid.UUID) (jobIDs []int64, err error)

// GroupOpts configure group commit of claims (Store.GroupClaims).
type GroupOpts struct {
	// EnqueueMany inserts the jobs of one group's claimed leads.
	EnqueueMany EnqueueManyFunc
	// MaxGroup bounds the claims of one transaction; default 64.
	MaxGroup int
	// MaxInFlight bounds the groups committing at once, each on a
	// connection of its own; default 4.
	MaxInFlight int
	// Timeout bounds one group's transaction; default 5 s.
	Timeout time.Duration
}

// GroupClaims makes Claim commit concurrent claims of new keys together:
// one multi-row insert of the keys, one insert of the jobs (EnqueueMany),
// one multi-row insert of the leads with their job ids, one COMMIT, in five
// round trips whatever the group's size. A claim waits for no one: a group
// starts as soon as a connection slot is free, with the claims that arrived
// meanwhile. A key the group finds taken, an amendment, and every claim of
// a group that failed go the single way (Claim's own transaction), so that
// one bad request never fails another. Concurrent peeks (Peek) are read
// together the same way, in one statement. It needs a store on a pool, and
// is set once, before the store is used.
func (s *Store) GroupClaims(o GroupOpts) error {
	if s.pool == nil {
		return errors.New("store: group commit needs a store on a pool")
	}
	if o.EnqueueMany == nil {
		return errors.New("store: group commit needs EnqueueMany")
	}
	o.MaxGroup = cmp.Or(o.MaxGroup, 64)
	o.MaxInFlight = cmp.Or(o.MaxInFlight, 4)
	o.Timeout = cmp.Or(o.Timeout, 5*time.Second)
	g := &claimGroup{store: s, opts: o}
	g.batches = batcher[*groupedClaim]{maxBatch: o.MaxGroup, maxInFlight: o.MaxInFlight, run: g.commitGroup}
	s.group = g
	s.peeks = &batcher[*pendingPeek]{maxBatch: o.MaxGroup, maxInFlight: o.MaxInFlight, run: s.peekGroup}
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
	c := &groupedClaim{p: p, leadID: leadID, done: make(chan struct{})}
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
	return &ClaimResult{Outcome: OutcomeClaimed, State: KeyProcessing, LeadID: leadID}, true, nil
}

// commitGroup commits one group. A group that failed claimed nothing: its
// claims go the single way, each on its own.
func (g *claimGroup) commitGroup(group []*groupedClaim) {
	ctx, cancel := context.WithTimeout(context.Background(), g.opts.Timeout)
	defer cancel()
	_ = g.commit(ctx, group)
	for _, c := range group {
		close(c.done)
	}
}

// groupKeysSQL claims the group's keys that are new; it returns the leads
// of those it claimed.
const groupKeysSQL = `
INSERT INTO idempotency_keys (client_id, key, fingerprint, raw_hash, state, lead_id)
SELECT client_id, key, fingerprint, raw_hash, 'processing', lead_id
FROM unnest($1::text[], $2::text[], $3::bytea[], $4::bytea[], $5::uuid[])
    AS g(client_id, key, fingerprint, raw_hash, lead_id)
ON CONFLICT (client_id, key) DO NOTHING
RETURNING lead_id`

// groupLeadsSQL inserts the claimed keys' leads, with their jobs.
const groupLeadsSQL = `
INSERT INTO leads (id, client_id, idempotency_key, external_ref, submission, email_hmac, job_id)
SELECT * FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::jsonb[], $6::bytea[], $7::bigint[])`

// commit claims, in one transaction, the keys of the group that are new,
// and marks them claimed once it committed.
func (g *claimGroup) commit(ctx context.Context, group []*groupedClaim) error {
	// One claim per key in a statement: a twin waits for the single way,
	// where it finds the key its twin claimed.
	type slot struct{ client, key string }
	seen := make(map[slot]bool, len(group))
	var (
		clients, keys      []string
		fingerprints, raws [][]byte
		leadIDs            []uuid.UUID
		byLead             = make(map[uuid.UUID]*groupedClaim, len(group))
	)
	for _, c := range group {
		sl := slot{c.p.ClientID, c.p.Key}
		if seen[sl] {
			continue
		}
		seen[sl] = true
		clients = append(clients, c.p.ClientID)
		keys = append(keys, c.p.Key)
		fingerprints = append(fingerprints, c.p.Payload.Fingerprint[:])
		raws = append(raws, c.p.RawHash)
		leadIDs = append(leadIDs, c.leadID)
		byLead[c.leadID] = c
	}

	tx, err := g.store.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	b := &pgx.Batch{}
	b.Queue(durably)
	b.Queue(groupKeysSQL, clients, keys, fingerprints, raws, leadIDs)
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

	jobIDs, err := g.opts.EnqueueMany(ctx, tx, claimedIDs)
	if err != nil {
		return fmt.Errorf("enqueue: %w", err)
	}
	if len(jobIDs) != len(claimedIDs) {
		return fmt.Errorf("enqueue: %d jobs for %d leads", len(jobIDs), len(claimedIDs))
	}
	n := len(claimedIDs)
	var (
		lClients, lKeys, refs, submissions = make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		hmacs                              = make([][]byte, n)
	)
	for i, id := range claimedIDs {
		p := byLead[id].p
		lClients[i], lKeys[i], refs[i], submissions[i], hmacs[i] = p.ClientID, p.Key, p.ExternalRef, string(p.Payload.Canonical), p.EmailHMAC
	}
	if _, err := tx.Exec(ctx, groupLeadsSQL, claimedIDs, lClients, lKeys, refs, submissions, hmacs, jobIDs); err != nil {
		return err
	}
	// Never cancelled (see uncancelled); the claims stopped waiting for
	// it at their own deadlines.
	if err := tx.Commit(context.WithoutCancel(ctx)); err != nil {
		return err
	}
	for _, id := range claimedIDs {
		byLead[id].claimed = true
	}
	return nil
}
