package store_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/leadintake/leadintake/internal/dbtest"
	"github.com/leadintake/leadintake/lead"
	"github.com/leadintake/leadintake/store"
)

// allPages walks ListLeads page by page (of size) and returns every key,
// as client/key, in the order shown.
func allPages(t *testing.T, s *store.Store, f store.LeadFilter, size int) []string {
	t.Helper()
	f.Limit = size
	var out []string
	for range 100 {
		page, err := s.ListLeads(t.Context(), f)
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Rows) > size {
			t.Fatalf("a page of %d rows, want at most %d", len(page.Rows), size)
		}
		for _, r := range page.Rows {
			out = append(out, r.ClientID+"/"+r.Key)
		}
		if page.Next == nil {
			return out
		}
		// The cursor goes through a URL.
		next, ok := store.ParseLeadCursor(page.Next.String())
		if !ok || !next.CreatedAt.Equal(page.Next.CreatedAt) || next.ClientID != page.Next.ClientID || next.Key != page.Next.Key {
			t.Fatalf("cursor %q parsed as %+v, want %+v", page.Next.String(), next, *page.Next)
		}
		f.After = &next
	}
	t.Fatal("more than 100 pages")
	return nil
}

// The leads page: newest first, a keyset page at a time (every key once,
// whatever the page size), filtered by client, state, outcome and age, with
// no owner where leads keep none.
func TestListLeads(t *testing.T) {
	t.Parallel()
	tx := dbtest.Tx(t)
	s, _ := newStore(t, tx)

	// Keys of two clients, created an hour apart, the newest last: a
	// failed one, a quarantined one, the others processing.
	type made struct {
		name  string
		state lead.KeyState
	}
	var keys []made
	for i := range 9 {
		var l *store.Lead
		switch i {
		case 3, 7:
			l = failedUnavailable(t, s)
		case 5:
			p := claimParams(t, validBody)
			res := quarantine(t, s, p, "honeypot")
			var err error
			if l, err = s.Lead(t.Context(), res.LeadID); err != nil {
				t.Fatal(err)
			}
		default:
			p := claimParams(t, validBody)
			if i%3 == 1 {
				p.ClientID = "b"
			}
			res := claim(t, s, p)
			var err error
			if l, err = s.Lead(t.Context(), res.LeadID); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := tx.Exec(t.Context(), `UPDATE idempotency_keys SET created_at = now() - $3 * interval '1 hour' WHERE client_id = $1 AND key = $2`,
			l.ClientID, l.Key, 10-i); err != nil {
			t.Fatal(err)
		}
		op, err := s.Operation(t.Context(), l.ClientID, l.Key)
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, made{l.ClientID + "/" + l.Key, op.State})
	}
	newestFirst := func(keep func(i int, m made) bool) []string {
		var out []string
		for i := len(keys) - 1; i >= 0; i-- {
			if keep(i, keys[i]) {
				out = append(out, keys[i].name)
			}
		}
		return out
	}
	clientOf := func(m made) string { return m.name[:1] }

	for _, c := range []struct {
		name   string
		filter store.LeadFilter
		want   []string
	}{
		{"All", store.LeadFilter{}, newestFirst(func(int, made) bool { return true })},
		{"Client", store.LeadFilter{ClientID: "a"}, newestFirst(func(_ int, m made) bool { return clientOf(m) == "a" })},
		{"ClientAndState", store.LeadFilter{ClientID: "a", State: lead.KeyProcessing},
			newestFirst(func(_ int, m made) bool { return clientOf(m) == "a" && m.state == lead.KeyProcessing })},
		{"State", store.LeadFilter{State: lead.KeyQuarantined}, newestFirst(func(_ int, m made) bool { return m.state == lead.KeyQuarantined })},
		{"Outcome", store.LeadFilter{Outcome: "downstream_unavailable"}, newestFirst(func(_ int, m made) bool { return m.state == lead.KeyFailed })},
		{"OutcomeOfAnotherState", store.LeadFilter{Outcome: "downstream_unavailable", State: lead.KeyCompleted}, nil},
		{"Within", store.LeadFilter{Within: 4*time.Hour + 30*time.Minute}, newestFirst(func(i int, _ made) bool { return 10-i <= 4 })},
		{"OlderThan", store.LeadFilter{OlderThan: 4*time.Hour + 30*time.Minute}, newestFirst(func(i int, _ made) bool { return 10-i >= 5 })},
		{"ClientStateAndAge", store.LeadFilter{ClientID: "a", State: lead.KeyProcessing, Within: 6*time.Hour + 30*time.Minute},
			newestFirst(func(i int, m made) bool { return clientOf(m) == "a" && m.state == lead.KeyProcessing && 10-i <= 6 })},
		{"OwnerWhereNoneIsKept", store.LeadFilter{Owner: "alice"}, nil},
	} {
		for _, size := range []int{1, 2, 50} {
			t.Run(fmt.Sprintf("%s/%d", c.name, size), func(t *testing.T) {
				if got := allPages(t, s, c.filter, size); !slices.Equal(got, c.want) {
					t.Errorf("got %v\nwant %v", got, c.want)
				}
			})
		}
	}

	page, err := s.ListLeads(t.Context(), store.LeadFilter{Limit: 1})
	if err != nil || len(page.Rows) != 1 {
		t.Fatalf("first page: %+v %v", page, err)
	}
	if r := page.Rows[0]; r.Owner != "" || r.LeadID.String() == "" || r.CreatedAt.IsZero() || r.State == "" {
		t.Errorf("row %+v", r)
	}
	for _, bad := range []string{"", "x", "1!a", "zz!a!", "!a!b", "a b!c!d"} {
		if _, ok := store.ParseLeadCursor(bad); ok {
			t.Errorf("cursor %q parsed", bad)
		}
	}
}

// Where leads keep an owner, the page shows it and filters by it.
func TestListLeadsWithOwners(t *testing.T) {
	t.Parallel()
	_, pool := dbtest.New(t)
	ctx := context.Background()
	s, _ := newStore(t, pool)
	alice, bob := claimed(t, s), claimed(t, s)
	if _, err := pool.Exec(ctx, `UPDATE leads SET owner = 'alice' WHERE id = $1`, alice.ID); err != nil {
		t.Fatal(err)
	}
	page, err := s.ListLeads(ctx, store.LeadFilter{Owner: "alice"})
	if err != nil || len(page.Rows) != 1 || page.Rows[0].Key != alice.Key || page.Rows[0].Owner != "alice" {
		t.Fatalf("alice's leads: %+v %v", page, err)
	}
	page, err = s.ListLeads(ctx, store.LeadFilter{ClientID: "a"})
	if err != nil || len(page.Rows) != 2 {
		t.Fatalf("all leads: %+v %v", page, err)
	}
	if d, err := s.ShowKey(ctx, bob.ClientID, bob.Key); err != nil || d.Owner != nil {
		t.Errorf("bob's lead's owner %v %v", d.Owner, err)
	}
	if d, err := s.ShowKey(ctx, alice.ClientID, alice.Key); err != nil || d.Owner == nil || *d.Owner != "alice" {
		t.Errorf("alice's lead's owner %v %v", d.Owner, err)
	}
}
