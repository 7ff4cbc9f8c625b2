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
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leadintake/leadintake/internal/dbtest"
	"github.com/leadintake/leadintake/lead"
	"github.com/leadintake/leadintake/store"
)

// writeCounter counts the statements a pool sends that read, save or
// finish leads.
type writeCounter struct{ loads, saves, finishes atomic.Int64 }

func (c *writeCounter) count(sql string) {
	switch {
	case strings.Contains(sql, "FROM leads l") && strings.Contains(sql, "l.id = "):
		c.loads.Add(1)
	case strings.Contains(sql, "UPDATE leads") && strings.Contains(sql, "next_run"):
		c.saves.Add(1)
	case strings.Contains(sql, "UPDATE idempotency_keys k") && strings.Contains(sql, "to_state"):
		c.finishes.Add(1)
	}
}

func (c *writeCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	c.count(d.SQL)
	return ctx
}

func (c *writeCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (c *writeCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

func (c *writeCounter) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	c.count(d.SQL)
}

func (c *writeCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// groupedRuns is a store on a pool of its own whose runs' saves and
// finishes go in groups, the counter of its writes, and a second
// connection to the same database.
func groupedRuns(t *testing.T) (*store.Store, *writeCounter, *pgxpool.Pool) {
	t.Helper()
	url, direct := dbtest.New(t)
	counter := &writeCounter{}
	pool := dbtest.Traced(t, url, counter)
	s, _ := newStore(t, pool)
	if err := s.GroupRuns(store.GroupOpts{MaxGroup: 64, MaxInFlight: 1}); err != nil {
		t.Fatal(err)
	}
	return s, counter, direct
}

// lockLeads holds an exclusive lock on the leads table until the returned
// function is called: the first write waits, and the others gather behind
// it.
func lockLeads(t *testing.T, direct *pgxpool.Pool) (release func()) {
	t.Helper()
	ctx := t.Context()
	lock, err := direct.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lock.Exec(ctx, "LOCK TABLE leads IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	release = func() {
		once.Do(func() {
			if err := lock.Rollback(ctx); err != nil {
				t.Error(err)
			}
		})
	}
	t.Cleanup(release)
	return release
}

// whenStarted waits until n goroutines counted themselves in started, and
// a moment more for them to reach the database.
func whenStarted(started *atomic.Int64, n int) {
	for started.Load() < int64(n) {
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond)
}

// Concurrent saves and finishes of runs go in groups, and each is answered
// as alone: a save is fenced by its run, one of two twins acts, a finish
// of a key no longer as read applies nothing; a group that fails leaves
// each of its members to the single way, where only the bad one fails.
func TestGroupRuns(t *testing.T) {
	t.Parallel()
	const n = 60

	t.Run("SavesAndFinishesGoTogether", func(t *testing.T) {
		t.Parallel()
		s, counter, direct := groupedRuns(t)
		leads := make([]*store.Lead, n)
		for i := range leads {
			leads[i] = claimed(t, s)
		}
		// Reads, one of a lead that does not exist.
		release := lockLeads(t, direct)
		var (
			wg      sync.WaitGroup
			started atomic.Int64
		)
		read := make([]*store.Lead, n)
		for i, l := range leads {
			wg.Go(func() {
				started.Add(1)
				got, err := s.Lead(t.Context(), l.ID)
				if err != nil || got.ID != l.ID || got.Key != l.Key {
					t.Errorf("read of lead %s: %+v %v", l.ID, got, err)
				}
				read[i] = got
			})
		}
		wg.Go(func() {
			started.Add(1)
			if _, err := s.Lead(t.Context(), uuid.New()); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("read of no lead: %v, want ErrNotFound", err)
			}
		})
		whenStarted(&started, n+1)
		before := counter.loads.Load()
		release()
		wg.Wait()
		if got := counter.loads.Load() - before; got > n/4 {
			t.Errorf("%d concurrent reads took %d statements, want them together", n+1, got)
		}
		if t.Failed() {
			return
		}
		leads = read

		// A run that another took the lead from first.
		stale := *leads[0]
		if err := s.Save(t.Context(), &leads[0].Run, store.SaveParams{State: leads[0].State}); err != nil {
			t.Fatal(err)
		}

		release = lockLeads(t, direct)
		started.Store(0)
		want := lead.State{Enrichment: lead.EnrichmentNoData, CRM: lead.CRMAccepted, CRMID: "crm_9", ChannelsSet: true}
		want.Channels[0] = lead.Channel{Name: "notification", Failures: 1}
		for _, l := range leads[1:] {
			wg.Go(func() {
				started.Add(1)
				err := s.Save(t.Context(), &l.Run, store.SaveParams{
					State: want, Calls: []store.Call{{LeadID: l.ID, Step: "crm", Attempt: 1, StartedAt: time.Now(), Outcome: "200"}},
				})
				if err != nil || !l.Run.Taken {
					t.Errorf("save of %s: %v (taken %v)", l.ID, err, l.Run.Taken)
				}
			})
		}
		wg.Go(func() {
			started.Add(1)
			if err := s.Save(t.Context(), &stale.Run, store.SaveParams{State: want}); !errors.Is(err, store.ErrRunTaken) {
				t.Errorf("save of a run whose lead another took: %v, want ErrRunTaken", err)
			}
		})
		whenStarted(&started, n)
		before = counter.saves.Load()
		release()
		wg.Wait()
		if got := counter.saves.Load() - before; got > n/4 {
			t.Errorf("%d concurrent saves took %d statements, want them together", n, got)
		}
		for _, l := range leads[1:] {
			got, err := s.Lead(t.Context(), l.ID)
			if err != nil {
				t.Fatal(err)
			}
			if got.State != want || got.Run.Seq != l.Run.Seq {
				t.Errorf("lead %s read back %+v run %d, want %+v run %d", l.ID, got.State, got.Run.Seq, want, l.Run.Seq)
			}
			if calls, err := s.Calls(t.Context(), l.ID); err != nil || len(calls) != 1 {
				t.Errorf("lead %s: delivery log %+v %v, want its one call", l.ID, calls, err)
			}
		}

		// Finishes: one of them of a key already finished.
		if done, err := s.Finish(t.Context(), completed(leads[1])); err != nil || !done.Applied {
			t.Fatalf("first finish: %+v %v", done, err)
		}
		release = lockLeads(t, direct)
		started.Store(0)
		var applied atomic.Int64
		for _, l := range leads {
			wg.Go(func() {
				started.Add(1)
				done, err := s.Finish(t.Context(), completed(l))
				if err != nil {
					t.Errorf("finish of %s: %v", l.ID, err)
					return
				}
				if done.Applied {
					applied.Add(1)
				}
			})
		}
		whenStarted(&started, n)
		before = counter.finishes.Load()
		release()
		wg.Wait()
		if got := counter.finishes.Load() - before; got > n/4 {
			t.Errorf("%d concurrent finishes took %d statements, want them together", n, got)
		}
		if got := applied.Load(); got != n-1 {
			t.Errorf("%d finishes applied, want %d: all but the one of a key already finished", got, n-1)
		}
		for _, l := range leads {
			got, err := s.Lead(t.Context(), l.ID)
			if err != nil {
				t.Fatal(err)
			}
			if got.KeyState.State != lead.KeyCompleted {
				t.Errorf("lead %s: key %s, want completed", l.ID, got.KeyState.State)
			}
		}
	})

	// Durable saves (written ahead of a create or of a channel's send)
	// go in groups of their own: one transaction, one wait for the disk.
	t.Run("DurableSavesGoTogether", func(t *testing.T) {
		t.Parallel()
		s, counter, direct := groupedRuns(t)
		leads := make([]*store.Lead, n)
		for i := range leads {
			leads[i] = claimed(t, s)
		}
		release := lockLeads(t, direct)
		var (
			wg      sync.WaitGroup
			started atomic.Int64
		)
		want := lead.State{Enrichment: lead.EnrichmentNoData, CRM: lead.CRMPending, CRMPrepared: "prepared-1"}
		for _, l := range leads {
			wg.Go(func() {
				started.Add(1)
				err := s.Save(t.Context(), &l.Run, store.SaveParams{State: want, Durable: true})
				if err != nil || !l.Run.Taken {
					t.Errorf("durable save of %s: %v (taken %v)", l.ID, err, l.Run.Taken)
				}
			})
		}
		whenStarted(&started, n)
		before := counter.saves.Load()
		release()
		wg.Wait()
		if got := counter.saves.Load() - before; got > n/4 {
			t.Errorf("%d concurrent durable saves took %d statements, want them together", n, got)
		}
		for _, l := range leads {
			got, err := s.Lead(t.Context(), l.ID)
			if err != nil {
				t.Fatal(err)
			}
			if got.State.CRMPrepared != want.CRMPrepared || got.Run.Seq != l.Run.Seq {
				t.Errorf("lead %s read back %+v run %d, want %+v run %d", l.ID, got.State, got.Run.Seq, want, l.Run.Seq)
			}
		}
	})

	t.Run("OneOfTwinsActs", func(t *testing.T) {
		t.Parallel()
		s, _, direct := groupedRuns(t)
		l := claimed(t, s)
		a, b := *l, *l
		release := lockLeads(t, direct)
		var (
			wg      sync.WaitGroup
			started atomic.Int64
			errs    [2]error
		)
		for i, r := range []*store.Lead{&a, &b} {
			wg.Go(func() {
				started.Add(1)
				errs[i] = s.Save(t.Context(), &r.Run, store.SaveParams{State: lead.State{CRM: lead.CRMPending}})
			})
		}
		whenStarted(&started, 2)
		release()
		wg.Wait()
		if (errs[0] == nil) == (errs[1] == nil) || !errors.Is(errors.Join(errs[0], errs[1]), store.ErrRunTaken) {
			t.Errorf("two runs saved the same lead at once: %v, %v; want one saved and ErrRunTaken for the other", errs[0], errs[1])
		}
	})

	t.Run("AFailedGroupGoesTheSingleWay", func(t *testing.T) {
		t.Parallel()
		s, _, direct := groupedRuns(t)
		leads := make([]*store.Lead, 10)
		for i := range leads {
			leads[i] = claimed(t, s)
		}
		release := lockLeads(t, direct)
		var (
			wg      sync.WaitGroup
			started atomic.Int64
		)
		for i, l := range leads {
			wg.Go(func() {
				started.Add(1)
				f := completed(l)
				if i == 0 {
					f.Result.Tier = "lukewarm" // refused by the table's CHECK
				}
				done, err := s.Finish(t.Context(), f)
				switch {
				case i == 0 && err == nil:
					t.Errorf("the bad finish succeeded: %+v", done)
				case i > 0 && (err != nil || !done.Applied):
					t.Errorf("finish %d beside a bad one: %+v %v", i, done, err)
				}
			})
		}
		whenStarted(&started, len(leads))
		release()
		wg.Wait()
	})
}
