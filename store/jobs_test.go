package store_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/leadintake/leadintake/store"
)

// fakeJobs is the store's Jobs in its own tests: it inserts no River job,
// but runs a real statement in the transaction for each call, hands out job
// ids, and records the callbacks and wake-ups a finish asked for.
type fakeJobs struct {
	ids, leads, calls atomic.Int64
	// failLeads and failCallbacks make the next calls fail; failGroups
	// fails the calls of group commits, told from a claim's own by the
	// context (fromCaller).
	failLeads, failCallbacks, failGroups atomic.Bool
	// callbackClients are the clients with a callback.
	callbackClients []string

	mu        sync.Mutex
	callbacks []uuid.UUID
	woken     []int64
}

var errQueue = errors.New("queue refused")

// callerKey marks the context of a claim's caller: a group commits on a
// context of its own.
type callerKey struct{}

// fromCaller returns a context that fakeJobs tells from a group's.
func fromCaller(t testing.TB) context.Context {
	return context.WithValue(t.Context(), callerKey{}, true)
}

func (j *fakeJobs) ProcessLeads(ctx context.Context, tx pgx.Tx, leads []uuid.UUID, _ []string) ([]int64, error) {
	j.calls.Add(1)
	if j.failLeads.Load() || j.failGroups.Load() && ctx.Value(callerKey{}) == nil {
		return nil, errQueue
	}
	if _, err := tx.Exec(ctx, "SELECT 1"); err != nil {
		return nil, err
	}
	out := make([]int64, len(leads))
	for i := range leads {
		out[i] = j.ids.Add(1)
	}
	j.leads.Add(int64(len(leads)))
	return out, nil
}

func (j *fakeJobs) Callback(clientID string) bool {
	return slices.Contains(j.callbackClients, clientID)
}

func (j *fakeJobs) DeliverCallbacks(ctx context.Context, tx pgx.Tx, ids []uuid.UUID) error {
	if j.failCallbacks.Load() {
		return errQueue
	}
	if _, err := tx.Exec(ctx, "SELECT 1"); err != nil {
		return err
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	j.callbacks = append(j.callbacks, ids...)
	return nil
}

func (j *fakeJobs) Wake(ctx context.Context, tx pgx.Tx, jobs []int64) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.woken = append(j.woken, jobs...)
	return nil
}

func (j *fakeJobs) callbackCount() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return len(j.callbacks)
}

// newStore returns a store on db with fake Jobs whose clients with a
// callback are callbackClients.
func newStore(t testing.TB, db store.DB, callbackClients ...string) (*store.Store, *fakeJobs) {
	t.Helper()
	s := store.New(db)
	j := &fakeJobs{callbackClients: callbackClients}
	s.UseJobs(j)
	return s, j
}

// Who asks for the operator actions of the tests: the command line, and the
// admin API.
var (
	cli      = &store.Who{Name: "cli", Via: store.ViaCLI}
	adminAPI = &store.Who{Name: "admin", Via: store.ViaAdminAPI}
)
