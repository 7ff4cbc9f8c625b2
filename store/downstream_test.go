package store_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/leadintake/leadintake/internal/dbtest"
	"github.com/leadintake/leadintake/lead"
	"github.com/leadintake/leadintake/store"
)

var report = store.ReportOpts{Failures: 3, ProbeInterval: time.Hour}

func failures(t *testing.T, s *store.Store, name string, leads ...uuid.UUID) store.Reported {
	t.Helper()
	var r store.Reported
	for _, id := range leads {
		var err error
		if r, err = s.ReportFailure(t.Context(), name, id, 0, report); err != nil {
			t.Fatal(err)
		}
	}
	return r
}

func admit(t *testing.T, s *store.Store, name string, o store.AdmitOpts) store.Admission {
	t.Helper()
	a, err := s.Admit(t.Context(), name, o)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// The detector: a downstream is down after a few transient failures in a
// row of at least two leads, never for one lead's bad luck; a success
// between starts the count again; the first success after an outage ends
// it.
func TestDownstreamOutages(t *testing.T) {
	t.Parallel()
	a, b := uuid.New(), uuid.New()

	t.Run("OneLeadsFailuresAreNoOutage", func(t *testing.T) {
		t.Parallel()
		s, _ := newStore(t, dbtest.Tx(t))
		if r := failures(t, s, store.DownstreamCRM, a, a, a, a, a, a); r.Down {
			t.Fatalf("six failures of one lead: %+v, want up", r)
		}
		if got := admit(t, s, store.DownstreamCRM, store.AdmitOpts{}); !got.Go {
			t.Fatalf("admission: %+v", got)
		}
	})

	t.Run("FailuresOfTwoLeadsInARowAreAnOutage", func(t *testing.T) {
		t.Parallel()
		s, _ := newStore(t, dbtest.Tx(t))
		if r := failures(t, s, store.DownstreamCRM, a, b); r.Down {
			t.Fatalf("two failures: %+v, want up", r)
		}
		if r := failures(t, s, store.DownstreamCRM, a); !r.Down {
			t.Fatalf("three failures of two leads: %+v, want down", r)
		}
		if got := admit(t, s, store.DownstreamCRM, store.AdmitOpts{ProbeInterval: time.Hour}); got.Go || got.Hold != lead.HoldDown || got.Wait < 50*time.Minute {
			t.Fatalf("admission while down: %+v, want none until the probe in an hour", got)
		}
		// The other downstreams are up.
		if got := admit(t, s, store.DownstreamNotification, store.AdmitOpts{}); !got.Go {
			t.Fatalf("another downstream's admission: %+v", got)
		}
		r, err := s.ReportSuccess(t.Context(), store.DownstreamCRM)
		if err != nil || !r.Recovered {
			t.Fatalf("success after the outage: %+v %v, want recovered", r, err)
		}
		if got := admit(t, s, store.DownstreamCRM, store.AdmitOpts{}); !got.Go {
			t.Fatalf("admission after the recovery: %+v", got)
		}
		if r, _ := s.ReportSuccess(t.Context(), store.DownstreamCRM); r.Recovered {
			t.Fatal("a second success recovered again")
		}
	})

	t.Run("ASuccessBetweenStartsAgain", func(t *testing.T) {
		t.Parallel()
		s, _ := newStore(t, dbtest.Tx(t))
		failures(t, s, store.DownstreamCRM, a, b)
		if _, err := s.ReportSuccess(t.Context(), store.DownstreamCRM); err != nil {
			t.Fatal(err)
		}
		if r := failures(t, s, store.DownstreamCRM, a, b); r.Down {
			t.Fatalf("failures after a success: %+v, want up", r)
		}
	})

	t.Run("AHoldIsNoOutage", func(t *testing.T) {
		t.Parallel()
		s, _ := newStore(t, dbtest.Tx(t))
		for _, id := range []uuid.UUID{a, b, a, b} {
			r, err := s.ReportFailure(t.Context(), store.DownstreamCRM, id, 20*time.Second, report)
			if err != nil || r.Down || r.Held < 15*time.Second {
				t.Fatalf("a 429 with Retry-After: %+v %v, want held, not down", r, err)
			}
		}
		got := admit(t, s, store.DownstreamCRM, store.AdmitOpts{})
		if got.Go || got.Hold != lead.HoldCalls || got.Wait < 15*time.Second || got.Wait > 20*time.Second {
			t.Fatalf("admission while held: %+v", got)
		}
	})

	// A lead's failure is shared when another lead failed after its first
	// failure of the run, with no success between; a lead's first failure,
	// and its failures while no other lead's came after its first, are its
	// own.
	t.Run("SharedFailures", func(t *testing.T) {
		t.Parallel()
		s, _ := newStore(t, dbtest.Tx(t))
		never := store.ReportOpts{Failures: 1000, ProbeInterval: time.Hour}
		c := uuid.New()
		fail := func(id uuid.UUID, holdFor time.Duration) bool {
			t.Helper()
			r, err := s.ReportFailure(t.Context(), store.DownstreamNotification, id, holdFor, never)
			if err != nil {
				t.Fatal(err)
			}
			return r.Shared
		}
		for i, step := range []struct {
			lead   uuid.UUID
			shared bool
		}{
			{a, false}, {a, false}, {b, false}, {a, true}, {a, true}, {b, true},
			// c's failures are its own until another lead's comes after its
			// first.
			{c, false}, {c, false}, {b, true}, {c, true},
		} {
			if got := fail(step.lead, 0); got != step.shared {
				t.Fatalf("failure %d: shared %t, want %t", i+1, got, step.shared)
			}
		}
		// A success starts a new run; a hold is no failure of it.
		if _, err := s.ReportSuccess(t.Context(), store.DownstreamNotification); err != nil {
			t.Fatal(err)
		}
		if fail(a, 0) || fail(b, time.Second) || fail(a, 0) {
			t.Fatal("failures of one lead, with another's hold between: shared, want its own")
		}
		if fail(b, 0) || !fail(a, 0) {
			t.Fatal("a's failure after b's first: want b's own, then a's shared")
		}
		// Past the failures kept, a lead's earliest kept failure counts as
		// its first.
		for range 70 {
			fail(uuid.New(), 0)
		}
		if fail(a, 0) || fail(b, 0) || !fail(a, 0) {
			t.Fatal("leads whose failures are no longer kept: want their own failures, then a shared one")
		}
	})

	// Of many workers asking at once for a downstream whose probe is due,
	// one probes.
	t.Run("OneProbeAtATime", func(t *testing.T) {
		t.Parallel()
		_, pool := dbtest.New(t)
		s, _ := newStore(t, pool)
		failures(t, s, store.DownstreamNotification, a, b, a)
		if _, err := pool.Exec(t.Context(), `UPDATE downstreams SET next_probe_at = now() WHERE name = 'notification'`); err != nil {
			t.Fatal(err)
		}
		for _, limited := range []bool{false, true} {
			o := store.AdmitOpts{ProbeInterval: time.Hour, MaxAhead: time.Minute}
			if limited {
				o.Limit = store.Limit{N: 100, Per: time.Second}
				if _, err := pool.Exec(t.Context(), `UPDATE downstreams SET next_probe_at = now() WHERE name = 'notification'`); err != nil {
					t.Fatal(err)
				}
			}
			var (
				mu     sync.Mutex
				probes int
				wg     sync.WaitGroup
			)
			for range 20 {
				wg.Go(func() {
					got, err := s.Admit(context.Background(), store.DownstreamNotification, o)
					if err != nil {
						t.Error(err)
						return
					}
					if got.Go != got.Probe || !got.Go && got.Hold != lead.HoldDown {
						t.Errorf("admission while down: %+v", got)
					}
					if got.Probe {
						mu.Lock()
						probes++
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			if probes != 1 {
				t.Errorf("limited %t: %d probes of 20 callers, want 1", limited, probes)
			}
		}
	})
}

// A rate limit is one budget for every caller: a burst of N at once, then
// calls booked ahead at the rate, and none booked past MaxAhead.
func TestDownstreamRateLimit(t *testing.T) {
	t.Parallel()
	_, pool := dbtest.New(t)
	s, _ := newStore(t, pool)
	o := store.AdmitOpts{ProbeInterval: time.Minute, Limit: store.Limit{N: 10, Per: 10 * time.Second}, MaxAhead: 5 * time.Second}
	var (
		mu     sync.Mutex
		now    int
		waits  []time.Duration
		refuse int
		wg     sync.WaitGroup
	)
	for range 30 {
		wg.Go(func() {
			got, err := s.Admit(context.Background(), store.DownstreamCRM, o)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			switch {
			case got.Go && got.Wait == 0:
				now++
			case got.Go:
				waits = append(waits, got.Wait)
			case got.Hold == lead.HoldRate:
				refuse++
			default:
				t.Errorf("admission: %+v", got)
			}
		})
	}
	wg.Wait()
	// 10 at once, then one a second booked up to 5 s ahead (the refill of
	// the test's own run may add one), and the rest refused.
	if now < 10 || now > 11 || len(waits) < 4 || len(waits) > 6 || now+len(waits)+refuse != 30 {
		t.Fatalf("%d now, %d booked ahead (%v), %d refused; want 10, 5, 15", now, len(waits), waits, refuse)
	}
	for _, w := range waits {
		if w > 5*time.Second {
			t.Errorf("booked %s ahead, past MaxAhead", w)
		}
	}
}

// A lease takes several tokens at once while the bucket holds at least
// twice as many, and one a call after that: leased tokens count against the
// limit as spent ones do.
func TestDownstreamRateLimitLeases(t *testing.T) {
	t.Parallel()
	_, pool := dbtest.New(t)
	s, _ := newStore(t, pool)
	// A refill of one token an hour: the test's own time adds none.
	o := store.AdmitOpts{ProbeInterval: time.Minute, Limit: store.Limit{N: 50, Per: 50 * time.Hour}, MaxAhead: time.Second, Lease: 10}
	var taken []int
	total := 0
	for total < 50 {
		got, err := s.Admit(t.Context(), store.DownstreamCRM, o)
		if err != nil {
			t.Fatal(err)
		}
		if !got.Go || got.Wait != 0 {
			t.Fatalf("after %d tokens taken (%v): %+v, want a call that starts now", total, taken, got)
		}
		taken = append(taken, got.Tokens)
		total += got.Tokens
	}
	want := []int{10, 10, 10, 10, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}
	if !slices.Equal(taken, want) {
		t.Errorf("tokens taken by each admission: %v, want %v", taken, want)
	}
	if got, err := s.Admit(t.Context(), store.DownstreamCRM, o); err != nil || got.Go || got.Hold != lead.HoldRate {
		t.Errorf("admission past the limit: %+v %v, want held by the rate limit", got, err)
	}
}

// The delivery log: every call a run saves with, oldest first, gone with the
// lead's key.
func TestDeliveryLog(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t, dbtest.Tx(t))
	l := claimed(t, s)
	start := time.Now().Add(-time.Second).UTC().Truncate(time.Millisecond)
	calls := []store.Call{
		{LeadID: l.ID, Step: "enrichment", Attempt: 1, StartedAt: start, Duration: 12 * time.Millisecond, Outcome: "200"},
		{LeadID: l.ID, Step: "crm", Attempt: 1, StartedAt: start.Add(time.Millisecond), Outcome: store.CallNotSent},
	}
	if err := s.Save(t.Context(), &l.Run, store.SaveParams{State: l.State, Calls: calls, WaitingFor: store.DownstreamCRM}); err != nil {
		t.Fatal(err)
	}
	got, err := s.Calls(t.Context(), l.ID)
	if err != nil || len(got) != 2 || got[0].Step != "enrichment" || got[0].Duration != 12*time.Millisecond ||
		got[1].Outcome != store.CallNotSent || !got[0].StartedAt.Equal(start) {
		t.Fatalf("calls %+v %v", got, err)
	}
	if now, _ := s.Lead(t.Context(), l.ID); now.WaitingFor != store.DownstreamCRM {
		t.Fatalf("waiting for %q, want crm", now.WaitingFor)
	}
	states, err := s.DownstreamStates(t.Context())
	if err != nil || len(states) != 3 {
		t.Fatalf("states %+v %v", states, err)
	}
	for _, st := range states {
		if want := map[bool]int{true: 1, false: 0}[st.Name == store.DownstreamCRM]; st.Waiting != want || !st.Up {
			t.Errorf("%+v, want %d waiting", st, want)
		}
	}
}
