package store_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/leadintake/leadintake/internal/dbtest"
	"github.com/leadintake/leadintake/lead"
	"github.com/leadintake/leadintake/store"
)

// Concurrent claims of new keys commit in groups: every key is claimed
// once, with its lead and its job id; twins in one group and keys that
// exist are decided the single way; a group whose enqueue fails falls back
// to single claims, which succeed.
func TestGroupClaims(t *testing.T) {
	t.Parallel()

	setupGroup := func(t *testing.T) (*store.Store, *fakeJobs) {
		t.Helper()
		_, pool := dbtest.New(t)
		s, jobs := newStore(t, pool)
		if err := s.GroupClaims(store.GroupOpts{MaxGroup: 8, MaxInFlight: 2}); err != nil {
			t.Fatal(err)
		}
		return s, jobs
	}
	claimAll := func(t *testing.T, s *store.Store, ps []*store.ClaimParams) []*store.ClaimResult {
		t.Helper()
		res := make([]*store.ClaimResult, len(ps))
		var wg sync.WaitGroup
		for i, p := range ps {
			wg.Go(func() {
				r, err := s.Claim(fromCaller(t), p)
				if err != nil {
					t.Errorf("claim %d: %v", i, err)
					return
				}
				res[i] = r
			})
		}
		wg.Wait()
		return res
	}

	t.Run("ClaimsEachNewKeyOnce", func(t *testing.T) {
		t.Parallel()
		s, m := setupGroup(t)
		var ps []*store.ClaimParams
		for range 50 {
			p := claimParams(t, validBody)
			p.EmailHMAC = hashKey.Email("ada@example.com")
			p.RawHash = hashKey.Request(lead.RawHash([]byte(validBody), ""))
			ps = append(ps, p)
		}
		// Twins: the same key and body, twice more.
		ps = append(ps, ps[0], ps[1])
		res := claimAll(t, s, ps)
		claimed := map[uuid.UUID]bool{}
		for i, r := range res {
			if r == nil {
				continue
			}
			switch r.Outcome {
			case store.OutcomeClaimed:
				if claimed[r.LeadID] {
					t.Errorf("lead %s claimed twice", r.LeadID)
				}
				claimed[r.LeadID] = true
			case store.OutcomeInProgress:
				if i < 50 && ps[i] != ps[0] && ps[i] != ps[1] {
					t.Errorf("claim %d of a new key: %s", i, r.Outcome)
				}
			default:
				t.Errorf("claim %d: %s", i, r.Outcome)
			}
		}
		if len(claimed) != 50 {
			t.Fatalf("%d keys claimed, want 50", len(claimed))
		}
		if got := m.leads.Load(); got != 50 {
			t.Errorf("%d jobs enqueued, want 50", got)
		}
		if m.calls.Load() >= 50 {
			t.Logf("every claim went alone (%d groups): no two arrived together", m.calls.Load())
		}
		for id := range claimed {
			l, err := s.Lead(t.Context(), id)
			if err != nil || l.KeyState.State != lead.KeyProcessing || l.Lead.Email != "ada@example.com" {
				t.Errorf("lead %s: %+v %v", id, l, err)
			}
			if d, err := s.ShowKey(t.Context(), l.ClientID, l.Key); err != nil || d.JobID == nil {
				t.Errorf("key of lead %s without its job: %+v %v", id, d, err)
			}
		}
		// The raw hash is kept with the key.
		got, err := s.Peek(t.Context(), "a", ps[3].Key)
		if err != nil || string(got.RawHash) != string(ps[3].RawHash.MAC) {
			t.Errorf("peek: %+v %v", got, err)
		}
	})

	t.Run("FallsBackWhenTheGroupFails", func(t *testing.T) {
		t.Parallel()
		s, m := setupGroup(t)
		// Every group's enqueue fails; the single claims that follow do
		// not.
		m.failGroups.Store(true)
		var ps []*store.ClaimParams
		for range 10 {
			ps = append(ps, claimParams(t, validBody))
		}
		for i, r := range claimAll(t, s, ps) {
			if r == nil || r.Outcome != store.OutcomeClaimed {
				t.Errorf("claim %d after its group failed: %+v", i, r)
			}
		}
		if m.leads.Load() != 10 || m.calls.Load() <= 10 {
			t.Errorf("%d jobs in %d enqueues, want 10 single ones after failed groups", m.leads.Load(), m.calls.Load())
		}
	})

	t.Run("KeysThatExistGoTheSingleWay", func(t *testing.T) {
		t.Parallel()
		s, _ := setupGroup(t)
		p := claimParams(t, validBody)
		first := claim(t, s, p)
		other := claimParams(t, `{"email":"grace@example.com","source":"website"}`)
		other.Key = p.Key
		for _, tc := range []struct {
			p    *store.ClaimParams
			want store.Outcome
		}{{p, store.OutcomeInProgress}, {other, store.OutcomeMismatch}} {
			r := claim(t, s, tc.p)
			if r.Outcome != tc.want || r.LeadID != first.LeadID {
				t.Errorf("claim of an existing key: %s %s, want %s %s", r.Outcome, r.LeadID, tc.want, first.LeadID)
			}
		}
	})

	t.Run("PeeksTogether", func(t *testing.T) {
		t.Parallel()
		s, _ := setupGroup(t)
		var ps []*store.ClaimParams
		for range 20 {
			p := claimParams(t, validBody)
			p.RawHash = hashKey.Request(lead.RawHash([]byte(validBody), ""))
			ps = append(ps, p)
		}
		claimed := claimAll(t, s, ps)
		var wg sync.WaitGroup
		for i, p := range ps {
			wg.Go(func() {
				got, err := s.Peek(t.Context(), "a", p.Key)
				if err != nil || got.LeadID != claimed[i].LeadID || got.Key.State != lead.KeyProcessing ||
					string(got.Fingerprint) != string(p.Fingerprint.MAC) || string(got.RawHash) != string(p.RawHash.MAC) || got.PlainHashes {
					t.Errorf("peek of claimed key %d: %+v %v", i, got, err)
				}
			})
			wg.Go(func() {
				if got, err := s.Peek(t.Context(), "b", p.Key); !errors.Is(err, store.ErrNotFound) {
					t.Errorf("peek of another client's key: %+v %v", got, err)
				}
			})
		}
		wg.Wait()
	})

	t.Run("NeedsAPool", func(t *testing.T) {
		t.Parallel()
		s, _ := newStore(t, dbtest.Tx(t))
		if err := s.GroupClaims(store.GroupOpts{}); err == nil {
			t.Error("group commit on a transaction was accepted")
		}
	})
}

// statementCounter counts the statements a pool sends that read keys as
// an operation.
type statementCounter struct{ n atomic.Int64 }

func (c *statementCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if strings.Contains(d.SQL, "superseded_by") && strings.Contains(d.SQL, "response_status") && !strings.Contains(d.SQL, "UPDATE") {
		c.n.Add(1)
	}
	return ctx
}

func (c *statementCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// Concurrent reads of operations (the polls, and the looks of the requests
// that wait for their keys) are read together, in one statement each
// group, as peeks are: the requests woken together by their finishes do
// not take a connection each.
func TestOperationsReadTogether(t *testing.T) {
	t.Parallel()
	url, direct := dbtest.New(t)
	counter := &statementCounter{}
	pool := dbtest.Traced(t, url, counter)
	s, _ := newStore(t, pool)
	if err := s.GroupClaims(store.GroupOpts{MaxGroup: 64, MaxInFlight: 1}); err != nil {
		t.Fatal(err)
	}
	const n = 200
	ps := make([]*store.ClaimParams, n)
	leads := make([]uuid.UUID, n)
	for i := range ps {
		ps[i] = claimParams(t, validBody)
		leads[i] = claim(t, s, ps[i]).LeadID
	}

	// The table locked: the first read waits, and the others gather
	// behind it.
	ctx := t.Context()
	lock, err := direct.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lock.Rollback(ctx) }()
	if _, err := lock.Exec(ctx, "LOCK TABLE idempotency_keys IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	before := counter.n.Load()
	var (
		wg      sync.WaitGroup
		started atomic.Int64
	)
	for i, p := range ps {
		wg.Go(func() {
			started.Add(1)
			op, err := s.Operation(ctx, "a", p.Key)
			if err != nil || op.LeadID != leads[i] || op.State != lead.KeyProcessing || op.Key != p.Key {
				t.Errorf("operation %d: %+v %v", i, op, err)
			}
		})
	}
	wg.Go(func() {
		if _, err := s.Operation(ctx, "b", ps[0].Key); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("another client's key: %v, want ErrNotFound", err)
		}
	})
	for started.Load() < n {
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond)
	if err := lock.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if got := counter.n.Load() - before; got > n/4 {
		t.Errorf("%d concurrent reads of operations took %d statements, want them read together", n+1, got)
	}
}
