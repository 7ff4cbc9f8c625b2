package store_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/leadintake/leadintake/internal/dbtest"
	"github.com/leadintake/leadintake/lead"
	"github.com/leadintake/leadintake/store"
)

// manyJobs is an EnqueueMany that inserts nothing and counts the leads it
// was given, failing when fail says so.
type manyJobs struct {
	leads, calls atomic.Int64
	fail         atomic.Bool
}

func (m *manyJobs) enqueue(ctx context.Context, tx pgx.Tx, ids []uuid.UUID) ([]int64, error) {
	m.calls.Add(1)
	if m.fail.Load() {
		return nil, errors.New("enqueue refused")
	}
	// A real statement of the group's transaction.
	if _, err := tx.Exec(ctx, "SELECT 1"); err != nil {
		return nil, err
	}
	out := make([]int64, len(ids))
	for i := range ids {
		out[i] = m.leads.Add(1)
	}
	return out, nil
}

// Concurrent claims of new keys commit in groups: every key is claimed
// once, with its lead and its job id; twins in one group and keys that
// exist are decided the single way; a group whose enqueue fails falls back
// to single claims, which succeed.
func TestGroupClaims(t *testing.T) {
	t.Parallel()

	setupGroup := func(t *testing.T) (*store.Store, *manyJobs) {
		t.Helper()
		_, pool := dbtest.New(t)
		s := store.New(pool)
		m := &manyJobs{}
		if err := s.GroupClaims(store.GroupOpts{EnqueueMany: m.enqueue, MaxGroup: 8, MaxInFlight: 2}); err != nil {
			t.Fatal(err)
		}
		return s, m
	}
	claimAll := func(t *testing.T, s *store.Store, ps []*store.ClaimParams) []*store.ClaimResult {
		t.Helper()
		res := make([]*store.ClaimResult, len(ps))
		var wg sync.WaitGroup
		for i, p := range ps {
			wg.Go(func() {
				r, err := s.Claim(t.Context(), p)
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
		var single atomic.Int64
		var ps []*store.ClaimParams
		for range 50 {
			p := claimParams(t, validBody, &single)
			p.EmailHMAC = hashKey.Email("ada@example.com")
			p.RawHash = lead.RawHash([]byte(validBody), "")
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
		if got := m.leads.Load() + single.Load(); got != 50 {
			t.Errorf("%d jobs enqueued, want 50 (%d in groups)", got, m.leads.Load())
		}
		if m.calls.Load() >= 50 {
			t.Logf("every claim went alone (%d groups): no two arrived together", m.calls.Load())
		}
		for id := range claimed {
			l, err := s.LoadLead(t.Context(), id)
			if err != nil || l.KeyState != store.KeyProcessing || l.Lead.Email != "ada@example.com" {
				t.Errorf("lead %s: %+v %v", id, l, err)
			}
			if d, err := s.ShowKey(t.Context(), l.ClientID, l.Key); err != nil || d.JobID == nil {
				t.Errorf("key of lead %s without its job: %+v %v", id, d, err)
			}
		}
		// The raw hash is kept with the key.
		got, err := s.Peek(t.Context(), "a", ps[3].Key)
		if err != nil || string(got.RawHash) != string(ps[3].RawHash) {
			t.Errorf("peek: %+v %v", got, err)
		}
	})

	t.Run("FallsBackWhenTheGroupFails", func(t *testing.T) {
		t.Parallel()
		s, m := setupGroup(t)
		m.fail.Store(true)
		var single atomic.Int64
		var ps []*store.ClaimParams
		for range 10 {
			ps = append(ps, claimParams(t, validBody, &single))
		}
		for i, r := range claimAll(t, s, ps) {
			if r == nil || r.Outcome != store.OutcomeClaimed {
				t.Errorf("claim %d after its group failed: %+v", i, r)
			}
		}
		if single.Load() != 10 || m.calls.Load() == 0 {
			t.Errorf("%d single claims after %d failed groups, want 10", single.Load(), m.calls.Load())
		}
	})

	t.Run("KeysThatExistGoTheSingleWay", func(t *testing.T) {
		t.Parallel()
		s, _ := setupGroup(t)
		var single atomic.Int64
		p := claimParams(t, validBody, &single)
		first := claim(t, s, p)
		other := claimParams(t, `{"email":"grace@example.com","source":"website"}`, &single)
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
		var single atomic.Int64
		var ps []*store.ClaimParams
		for range 20 {
			p := claimParams(t, validBody, &single)
			p.RawHash = lead.RawHash([]byte(validBody), "")
			ps = append(ps, p)
		}
		claimed := claimAll(t, s, ps)
		var wg sync.WaitGroup
		for i, p := range ps {
			wg.Go(func() {
				got, err := s.Peek(t.Context(), "a", p.Key)
				if err != nil || got.LeadID != claimed[i].LeadID || got.State != store.KeyProcessing ||
					string(got.Fingerprint) != string(p.Payload.Fingerprint[:]) || string(got.RawHash) != string(p.RawHash) {
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
		m := &manyJobs{}
		if err := store.New(dbtest.Tx(t)).GroupClaims(store.GroupOpts{EnqueueMany: m.enqueue}); err == nil {
			t.Error("group commit on a transaction was accepted")
		}
	})
}
