// Package store owns leadintake's two tables, idempotency_keys and leads:
// every statement that reads or writes them is here, with typed states that
// match their CHECK constraints. The api claims keys and answers replays and
// polls through it; the worker runs leads, finishes them, reconciles and
// cleans up through it. Nothing here knows HTTP, River or the downstream
// services: the enqueue step of a claim, and the completion of a job in a
// finishing transaction, are handed in by the caller.
//
// A claimed key, its lead and its job commit in one transaction; a finished
// key's response, its lead's result and its job's completion in another.
// Every write of a worker's run is fenced: it applies only while no later
// run of the same lead has started (see Run).
package store

import (
	"context"
	"errors"
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

// Store is the key and lead store. It is safe for concurrent use.
type Store struct {
	db DB
	// pool is db when it is a pool: Ready needs one.
	pool *pgxpool.Pool
	// migrated is set once Ready found every migration applied.
	migrated atomic.Bool
	// group commits claims of new keys together, and peeks and ops read
	// keys together (GroupClaims); nil for none.
	group *claimGroup
	peeks *batcher[*pendingPeek]
	ops   *batcher[*pendingOperation]
	// runs groups the saves and finishes of concurrent runs (GroupRuns);
	// nil for none.
	runs *runGroup
	// announcer sends the announcements of finished keys (announce); nil
	// on a transaction.
	announcer *batcher[uuid.UUID]
	// jobs inserts the jobs the store's transactions start (UseJobs).
	jobs Jobs
	// dupWindow is how far back a claim looks for a possible duplicate
	// (FlagDuplicates); zero for not at all.
	dupWindow time.Duration
	// ownerKept is set once leads was found to keep an owner (hasOwner).
	ownerKept atomic.Bool
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

// errNoJobs is the error of a transaction that would start work on a store
// without Jobs.
var errNoJobs = errors.New("store: no Jobs to start work with (UseJobs)")

// New returns a Store on db.
func New(db DB) *Store {
	s := &Store{db: db}
	s.pool, _ = db.(*pgxpool.Pool)
	if s.pool != nil {
		s.announcer = &batcher[uuid.UUID]{maxBatch: 500, maxInFlight: 1, run: s.announceGroup}
	}
	return s
}

// durably makes the transaction it runs in durable: on disk before its
// commit returns, whatever the session's synchronous_commit (the worker's is
// off).
const durably = "set local synchronous_commit to on"

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
