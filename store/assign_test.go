package store_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/leadintake/leadintake/internal/dbtest"
	"github.com/leadintake/leadintake/lead"
	"github.com/leadintake/leadintake/store"
)

// claimedN claims n leads, one a claim, in order.
func claimedN(t *testing.T, s *store.Store, n int) []*store.Lead {
	t.Helper()
	out := make([]*store.Lead, n)
	for i := range out {
		l := claimedAs(t, s, fmt.Sprintf(`{"email":"lead%d@example.com","source":"website"}`, i))
		out[i] = l
	}
	return out
}

// assign saves l before its first CRM step, choosing its owner from pool.
func assign(t *testing.T, s *store.Store, l *store.Lead, pool string, owners ...string) (string, error) {
	t.Helper()
	a := &store.Assign{Pool: pool, Owners: owners}
	st := l.State
	st.Enrichment, st.CRMDestination = lead.EnrichmentNoData, "crm"
	err := s.Save(t.Context(), &l.Run, store.SaveParams{State: st, Assign: a})
	return a.Owner, err
}

func TestAssign(t *testing.T) {
	t.Parallel()

	t.Run("TurnsInThePoolsOrderFromItsFirst", func(t *testing.T) {
		t.Parallel()
		s, _ := newStore(t, dbtest.Tx(t))
		var got []string
		for _, l := range claimedN(t, s, 7) {
			owner, err := assign(t, s, l, "acme/alice,bob,carol", "alice", "bob", "carol")
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, owner)
		}
		if fmt.Sprint(got) != "[alice bob carol alice bob carol alice]" {
			t.Errorf("owners %v", got)
		}
	})

	t.Run("ChosenOnceKeptAfter", func(t *testing.T) {
		t.Parallel()
		s, _ := newStore(t, dbtest.Tx(t))
		l := claimedN(t, s, 1)[0]
		first, err := assign(t, s, l, "acme/alice,bob", "alice", "bob")
		if err != nil || first != "alice" {
			t.Fatalf("%q, %v", first, err)
		}
		// A later save that assigns again (a stale state) keeps the owner,
		// and moves no turn.
		again, err := assign(t, s, l, "acme/alice,bob", "alice", "bob")
		if err != nil || again != "alice" {
			t.Fatalf("assigned again: %q, %v", again, err)
		}
		got, err := s.Lead(t.Context(), l.ID)
		if err != nil || got.State.Owner != "alice" || !got.State.OwnerDecided {
			t.Fatalf("lead %+v, %v", got.State, err)
		}
		if next, _ := assign(t, s, claimedN(t, s, 1)[0], "acme/alice,bob", "alice", "bob"); next != "bob" {
			t.Errorf("the next lead got %q, want bob: a kept owner moved the turn", next)
		}
	})

	t.Run("NoRuleOrEveryOwnerAwayIsNoOwnerDecided", func(t *testing.T) {
		t.Parallel()
		s, _ := newStore(t, dbtest.Tx(t))
		ls := claimedN(t, s, 2)
		for i, pool := range []string{"", "acme/alice"} {
			owner, err := assign(t, s, ls[i], pool)
			if err != nil || owner != "" {
				t.Fatalf("%q: owner %q, %v", pool, owner, err)
			}
			got, _ := s.Lead(t.Context(), ls[i].ID)
			if got.State.Owner != "" || !got.State.OwnerDecided {
				t.Errorf("%q: %+v, want decided without an owner", pool, got.State)
			}
		}
	})

	t.Run("FairAcrossConcurrentGroupedSaves", func(t *testing.T) {
		t.Parallel()
		s, _, direct := groupedRuns(t)
		const n, pool = 200, "acme/a,b,c,d"
		leads := claimedN(t, s, n)
		release := lockLeads(t, direct) // the saves gather into groups
		var (
			wg      sync.WaitGroup
			started atomic.Int64
			mu      sync.Mutex
			count   = map[string]int{}
		)
		for _, l := range leads {
			wg.Go(func() {
				started.Add(1)
				owner, err := assign(t, s, l, pool, "a", "b", "c", "d")
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				count[owner]++
				mu.Unlock()
			})
		}
		whenStarted(&started, n)
		release()
		wg.Wait()
		for _, o := range []string{"a", "b", "c", "d"} {
			if count[o] != n/4 {
				t.Errorf("owners %v: each should have %d", count, n/4)
				break
			}
		}
	})
}
