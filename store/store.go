// Package store owns leadintake's tables: idempotency_keys and leads; the
// callbacks outbox; the shared state of each downstream (downstreams); the
// delivery log of each lead's calls (lead_calls); and the logs of erasures
// and redrives. Every statement that reads or writes them is here, with
// typed states that match their CHECK constraints. The api claims keys and
// answers replays and polls through it; the worker runs, finishes,
// reconciles and cleans up leads, and shares what it knows of the
// downstreams, through it; operators erase, redrive and release through it.
// Nothing here knows HTTP, River or the downstream services: the jobs its
// transactions start are inserted by the caller's Jobs.
//
// A claimed key, its lead and its job commit in one transaction; a finished
// key's response, its lead's result, its callback's delivery and the
// wake-up of an amendment waiting for it in another, on disk before the
// finish returns. Every write of a worker's run is fenced: it applies only
// while no later run of the same lead has started (see Run). Concurrent
// requests of one kind may run as one statement (GroupClaims, GroupRuns).
package store

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Errors of the store. Other errors are the database's; see IsUnavailable.
var (
	// ErrNotFound: no such key for the client (or its retention passed), or
	// no such lead.
	ErrNotFound = errors.New("not found")
	// ErrRunTaken: a later run of the lead has started; this run's writes
	// are refused, and it must stop.
	ErrRunTaken = errors.New("a later run of the lead has started")
	// ErrErased: the lead's personal data was erased; nothing more may be
	// done for it.
	ErrErased = errors.New("the lead's personal data was erased")
)

// DB is what the store runs statements on: a *pgxpool.Pool, or a pgx.Tx (in
// tests, a transaction rolled back at the end).
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Store is leadintake's store. It is safe for concurrent use.
type Store struct {
	db DB
	// pool is db when it is a pool: Ready needs one.
	pool *pgxpool.Pool
	// migrated is set once Ready found every migration applied.
	migrated atomic.Bool
	// claims, peeks and ops are the api's requests, in groups with
	// GroupClaims; loads, saves (lazy and durable apart), checks and
	// finishes the worker's, with GroupRuns. Without, each goes alone.
	claims   *batcher[*groupedClaim, *ClaimResult]
	peeks    *batcher[KeyName, *Peeked]
	ops      *batcher[KeyName, *Operation]
	loads    *batcher[uuid.UUID, *Lead]
	saves    *batcher[pendingSave, savedLead]
	durables *batcher[pendingSave, savedLead]
	checks   *batcher[Run, struct{}]
	finishes *batcher[*Finish, *Finished]
	// announcer sends the announcements of finished keys (announce); nil
	// on a transaction.
	announcer *queue[uuid.UUID]
	// jobs inserts the jobs the store's transactions start (UseJobs).
	jobs Jobs
	// dupWindow is how far back a claim looks for a possible duplicate
	// (FlagDuplicates); zero for not at all.
	dupWindow time.Duration
}

// FlagDuplicates makes every claim look for a possible duplicate of its
// lead: the earliest lead of the same client, under another key and not
// along its amendment chain, with the same content (ClaimParams.ContentHMAC)
// and claimed less than window earlier. It is set once, before the store is
// used; zero (the default) looks for none.
func (s *Store) FlagDuplicates(window time.Duration) { s.dupWindow = window }

// Jobs is the work the store's transactions start, inserted in the same
// transaction so that it exists exactly when the transaction commits: the
// job of a claimed (or re-opened, or resumed) lead, the delivery of a finish
// to the client's callback, the wake-up of an amendment that waits for the
// key it supersedes. jobs.Queue is River's.
type Jobs interface {
	// ProcessLeads inserts, in tx, the job of each lead, and returns the
	// jobs' ids in the order of leads. traceParents are, in the same
	// order, the W3C traceparent each job's work continues ("" for none):
	// each request's own, also when claims commit together.
	ProcessLeads(ctx context.Context, tx pgx.Tx, leads []uuid.UUID, traceParents []string) ([]int64, error)
	// Callback reports whether the client's finishes are announced to a
	// callback of its own.
	Callback(clientID string) bool
	// DeliverCallbacks inserts, in tx, the delivery job of each callback.
	DeliverCallbacks(ctx context.Context, tx pgx.Tx, callbacks []uuid.UUID) error
	// Wake makes jobs that wait available at once, in tx.
	Wake(ctx context.Context, tx pgx.Tx, jobs []int64) error
}

// UseJobs sets the store's Jobs. It is set once, before the store is used
// for anything that starts work (a claim, a finish, a resume).
func (s *Store) UseJobs(j Jobs) { s.jobs = j }

// selectAll runs the query sql and returns its rows as T, a column a field
// in order; what names the query in its errors.
func selectAll[T any](ctx context.Context, db DB, what, sql string, args ...any) ([]T, error) {
	rows, err := db.Query(ctx, sql, args...)
	var all []T
	if err == nil {
		all, err = pgx.CollectRows(rows, pgx.RowToStructByPos[T])
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return all, nil
}

// errNoJobs is the error of a transaction that would start work on a store
// without Jobs.
var errNoJobs = errors.New("store: no Jobs to start work with (UseJobs)")

// New returns a Store on db.
func New(db DB) *Store {
	s := &Store{db: db}
	s.pool, _ = db.(*pgxpool.Pool)
	if s.pool != nil {
		s.announcer = &queue[uuid.UUID]{maxBatch: 500, maxInFlight: 1, run: s.announceGroup}
	}
	s.claims = &batcher[*groupedClaim, *ClaimResult]{name: "claim keys (grouped)", run: s.claimGroup,
		single: func(ctx context.Context, c *groupedClaim) (*ClaimResult, error) { return s.claimAlone(ctx, c.p) },
		twin:   func(c *groupedClaim) any { return KeyName{c.p.ClientID, c.p.Key} }, retryOne: true}
	s.peeks = newKeyReader(s, "peek keys (grouped)", peekColumns, scanPeeked)
	s.ops = newKeyReader(s, "read operations (grouped)", operationColumns, scanOperation)
	s.loads = &batcher[uuid.UUID, *Lead]{name: "load leads (grouped)", run: s.loadGroup, single: s.loadOne}
	s.saves = &batcher[pendingSave, savedLead]{name: "save leads (grouped)", run: s.saveGroup, single: s.saveOne,
		twin: func(p pendingSave) any { return p.row.LeadID }}
	s.durables = &batcher[pendingSave, savedLead]{name: "save leads durably (grouped)", run: s.durableGroup, single: s.durableOne,
		twin: func(p pendingSave) any { return p.row.LeadID }}
	s.checks = &batcher[Run, struct{}]{name: "check holds (grouped)", run: s.checkGroup, single: s.checkOne}
	s.finishes = &batcher[*Finish, *Finished]{name: "finish leads (grouped)", run: s.finishGroup, single: s.finishOne,
		twin: func(f *Finish) any { return f.LeadID }}
	return s
}

// durably makes the transaction it runs in durable: on disk before its
// commit returns, whatever the session's synchronous_commit (the worker's is
// off).
const durably = "set local synchronous_commit to on"

// genericPlans makes the prepared statements of the transaction it runs in
// use their cached generic plan. A group's statements take arrays
// (unnest($1::uuid[])), and left to itself PostgreSQL plans them again at
// every execution: it weighs its custom plan for the group at hand against
// the generic plan's guess of ten rows, and the custom one always looks
// cheaper, though planning it costs more than running it. The api's
// sessions keep the default for everything else (an operator's listing
// with optional filters needs its custom plan); the worker's sessions force
// generic plans throughout (cmd/worker).
const genericPlans = "set local plan_cache_mode to force_generic_plan"

// inTx runs fn in a transaction on the store's database, and commits it
// when fn returns nil.
func (s *Store) inTx(ctx context.Context, fn func(pgx.Tx) error) error {
	tx, err := s.db.Begin(ctx)
	if err != nil {
		return err
	}
	// The rollback stays within ctx's deadline: a database that hangs
	// after the work would otherwise hold the caller until it answered
	// again. Once ctx is done the rollback fails at once and the connection
	// is closed, which is what a connection whose statement timed out
	// deserves.
	committing := false
	defer func() {
		if !committing {
			_ = tx.Rollback(ctx)
		}
	}()
	if err := fn(tx); err != nil {
		return err
	}
	committing = true
	_, err = uncancelled(ctx, func(ctx context.Context) (struct{}, error) { return struct{}{}, tx.Commit(ctx) })
	return err
}

// uncancelled runs fn, which commits, with ctx's values but never
// cancelled, and returns when fn does or ctx ends, whichever is first.
//
// pgx cancels the statement of a context that ends (it sends PostgreSQL a
// cancel request), and a commit waiting for a synchronous standby that is
// cancelled is committed on the primary all the same: PostgreSQL only
// warns, every later transaction there sees it, and the standby may never
// get it, so that a failover loses what was answered from it. Left alone,
// the commit ends when the standby has it or the primary goes away. The
// caller stops waiting at ctx's end all the same, the outcome unknown to
// it, as after a lost connection.
func uncancelled[T any](ctx context.Context, fn func(context.Context) (T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := fn(context.WithoutCancel(ctx))
		done <- result{v, err}
	}()
	select {
	case r := <-done:
		return r.v, r.err
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
}
