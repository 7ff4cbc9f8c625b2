package store_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/leadintake/leadintake/internal/dbtest"
	"github.com/leadintake/leadintake/internal/testkit"
	"github.com/leadintake/leadintake/lead"
	"github.com/leadintake/leadintake/store"
)

func TestMain(m *testing.M) { testkit.Main(m) }

const validBody = `{"email":"ada@example.com","source":"website","name":"Ada Lovelace"}`

// claimParams returns the params of a claim of a new key by client a for
// body.
func claimParams(t testing.TB, body string) *store.ClaimParams {
	t.Helper()
	payload, err := lead.Decode([]byte(body), nil)
	if err != nil {
		t.Fatal(err)
	}
	key := testkit.NewKey()
	return &store.ClaimParams{ClientID: "a", Key: key, ExternalRef: "ref-" + key, Payload: payload,
		Fingerprint: hashKey.Request(payload.Fingerprint[:])}
}

func claim(t testing.TB, s *store.Store, p *store.ClaimParams) *store.ClaimResult {
	t.Helper()
	res, err := s.Claim(t.Context(), p)
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	return res
}

func TestClaim(t *testing.T) {
	t.Parallel()

	t.Run("NewKeyIsClaimedWithItsJob", func(t *testing.T) {
		t.Parallel()
		s, jobs := newStore(t, dbtest.Tx(t))
		p := claimParams(t, validBody)
		res := claim(t, s, p)
		if res.Outcome != store.OutcomeClaimed || res.State != lead.KeyProcessing {
			t.Fatalf("claim: %+v", res)
		}
		l, err := s.Lead(t.Context(), res.LeadID)
		if err != nil {
			t.Fatal(err)
		}
		if l.JobID == nil || *l.JobID != jobs.leads.Load() || l.KeyState.State != lead.KeyProcessing || l.Lead.Email != "ada@example.com" {
			t.Fatalf("lead after the claim: %+v", l)
		}
	})

	t.Run("SameBodyInProgressThenReplayed", func(t *testing.T) {
		t.Parallel()
		s, jobs := newStore(t, dbtest.Tx(t))
		p := claimParams(t, validBody)
		first := claim(t, s, p)
		again := claim(t, s, p)
		if again.Outcome != store.OutcomeInProgress || again.LeadID != first.LeadID {
			t.Fatalf("second claim: %+v", again)
		}
		l, err := s.Lead(t.Context(), first.LeadID)
		if err != nil {
			t.Fatal(err)
		}
		finish := completed(l)
		if done, err := s.Finish(t.Context(), finish); err != nil || !done.Applied {
			t.Fatalf("finish: %+v, %v", done, err)
		}
		replay := claim(t, s, p)
		if replay.Outcome != store.OutcomeReplayed || string(replay.Response.Body) != string(finish.Response.Body) ||
			replay.Response.Status != 201 {
			t.Fatalf("replay: %+v", replay)
		}
		if jobs.leads.Load() != 1 {
			t.Fatalf("%d jobs enqueued, want 1", jobs.leads.Load())
		}
	})

	t.Run("OtherBodyIsAMismatch", func(t *testing.T) {
		t.Parallel()
		s, _ := newStore(t, dbtest.Tx(t))
		p := claimParams(t, validBody)
		claim(t, s, p)
		other := *p
		eve := claimParams(t, `{"email":"eve@example.com","source":"website"}`)
		other.Payload, other.Fingerprint = eve.Payload, eve.Fingerprint
		if res := claim(t, s, &other); res.Outcome != store.OutcomeMismatch {
			t.Fatalf("other body: %+v", res)
		}
	})

	t.Run("EnqueueFailureLeavesNothing", func(t *testing.T) {
		t.Parallel()
		s, jobs := newStore(t, dbtest.Tx(t))
		p := claimParams(t, validBody)
		jobs.failLeads.Store(true)
		if _, err := s.Claim(t.Context(), p); !errors.Is(err, errQueue) {
			t.Fatalf("claim: %v, want the enqueue's error", err)
		}
		jobs.failLeads.Store(false)
		if _, err := s.Operation(t.Context(), "a", p.Key); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("the failed claim left its key: %v", err)
		}
		if res := claim(t, s, p); res.Outcome != store.OutcomeClaimed {
			t.Fatalf("claim after the failure: %+v", res)
		}
	})

	t.Run("OperationsBelongToTheirClient", func(t *testing.T) {
		t.Parallel()
		s, _ := newStore(t, dbtest.Tx(t))
		p := claimParams(t, validBody)
		claim(t, s, p)
		if _, err := s.Operation(t.Context(), "b", p.Key); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("another client's key: %v, want ErrNotFound", err)
		}
		if _, err := s.Operation(t.Context(), "a", testkit.NewKey()); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("unknown key: %v, want ErrNotFound", err)
		}
		op, err := s.Operation(t.Context(), "a", p.Key)
		if err != nil || op.State != lead.KeyProcessing || op.Response != nil {
			t.Fatalf("own key: %+v, %v", op, err)
		}
	})

	// Fifty claims of one key at once, on connections of their own: one
	// wins, the others see it in progress, and there is one lead and one
	// job.
	t.Run("ConcurrentSameKeyOneLead", func(t *testing.T) {
		t.Parallel()
		_, pool := dbtest.New(t)
		s, jobs := newStore(t, pool)
		p := claimParams(t, validBody)
		const n = 50
		results := make([]*store.ClaimResult, n)
		errs := make([]error, n)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				<-start
				results[i], errs[i] = s.Claim(context.Background(), p)
			})
		}
		close(start)
		wg.Wait()
		claimed := 0
		for i := range n {
			if errs[i] != nil {
				t.Fatalf("claim %d: %v", i, errs[i])
			}
			if results[i].LeadID != results[0].LeadID {
				t.Fatalf("claim %d: lead %s, want %s", i, results[i].LeadID, results[0].LeadID)
			}
			switch results[i].Outcome {
			case store.OutcomeClaimed:
				claimed++
			case store.OutcomeInProgress:
			default:
				t.Fatalf("claim %d: outcome %s", i, results[i].Outcome)
			}
		}
		var leads, keys int
		if err := pool.QueryRow(context.Background(),
			"SELECT (SELECT count(*) FROM leads), (SELECT count(*) FROM idempotency_keys)").Scan(&leads, &keys); err != nil {
			t.Fatal(err)
		}
		if claimed != 1 || jobs.leads.Load() != 1 || leads != 1 || keys != 1 {
			t.Fatalf("%d claims won, %d jobs, %d leads, %d keys; want 1 of each", claimed, jobs.leads.Load(), leads, keys)
		}
	})
}

func TestIsUnavailable(t *testing.T) {
	t.Parallel()

	pgErr := func(code string) error { return fmt.Errorf("claim: %w", &pgconn.PgError{Code: code}) }
	for _, tt := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{context.DeadlineExceeded, true},
		{fmt.Errorf("claim: begin: %w", context.DeadlineExceeded), true},
		{errors.New("dial tcp 127.0.0.1:5432: connect: connection refused"), true},
		{pgErr("08006"), true},  // connection failure
		{pgErr("28P01"), true},  // password refused
		{pgErr("28000"), true},  // role refused
		{pgErr("3D000"), true},  // no such database
		{pgErr("42P01"), true},  // no such table: not migrated
		{pgErr("40001"), true},  // serialization failure
		{pgErr("40P01"), true},  // deadlock
		{pgErr("53300"), true},  // too many connections
		{pgErr("57P01"), true},  // admin shutdown
		{pgErr("57014"), true},  // query cancelled
		{pgErr("23505"), false}, // unique violation
		{pgErr("23514"), false}, // check violation
		{pgErr("42601"), false}, // syntax error
		{pgErr("22P02"), false}, // invalid text representation
	} {
		if got := store.IsUnavailable(tt.err); got != tt.want {
			t.Errorf("IsUnavailable(%v) = %t, want %t", tt.err, got, tt.want)
		}
	}
}

// Supersedable judges the key an amendment names as the claim will, by one
// read: unknown (another client's, or a server's key to a page), already
// superseded by another key, or free to amend.
func TestSupersedable(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t, dbtest.Tx(t))
	server, page := claimParams(t, validBody), claimParams(t, validBody)
	page.Publishable = true
	claim(t, s, server)
	claim(t, s, page)
	amendment := claimParams(t, `{"email":"ada@example.com","source":"website","name":"Ada King"}`)
	amendment.Payload.Supersede(server.Key)
	if res := claim(t, s, amendment); res.Outcome != store.OutcomeClaimed {
		t.Fatalf("the amendment's claim: %+v", res)
	}
	other := testkit.NewKey()
	for _, tt := range []struct {
		client, supersedes, key string
		publishable             bool
		want                    store.Outcome
	}{
		{"a", page.Key, other, true, 0},
		{"a", page.Key, other, false, 0},
		{"a", server.Key, other, false, store.OutcomeAlreadySuperseded},
		{"a", server.Key, amendment.Key, false, 0}, // by this very key: the claim answers it
		{"a", amendment.Key, other, false, 0},
		{"a", amendment.Key, other, true, store.OutcomeSupersedesUnknown},
		{"a", testkit.NewKey(), other, false, store.OutcomeSupersedesUnknown},
		{"b", page.Key, other, false, store.OutcomeSupersedesUnknown},
	} {
		got, err := s.Supersedable(t.Context(), tt.client, tt.key, tt.supersedes, tt.publishable)
		if err != nil || got != tt.want {
			t.Errorf("Supersedable(%s, %s, publishable %t): %v %v, want %v", tt.client, tt.supersedes, tt.publishable, got, err, tt.want)
		}
	}
}
