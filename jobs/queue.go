package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/leadintake/leadintake/callers"
)

// Queue is River's side of the store's Jobs: the jobs a claim, a finish or
// a resume starts, inserted in that transaction with the process's River
// client (the api's insert-only one, the worker's, a command's). It is safe
// for concurrent use.
type Queue struct {
	client  *river.Client[pgx.Tx]
	callers *callers.Holder
}

// NewQueue returns the Queue of client. clients tells which clients have a
// callback; nil for none.
func NewQueue(client *river.Client[pgx.Tx], clients *callers.Holder) *Queue {
	return &Queue{client: client, callers: clients}
}

// ProcessLeads inserts the ProcessLead job of each lead in one insert, and
// returns the jobs' ids in the order of leads. Each job's metadata holds
// its own traceparent (traceParents[i], none when empty): the trace its
// work continues (Traced).
func (q *Queue) ProcessLeads(ctx context.Context, tx pgx.Tx, leads []uuid.UUID, traceParents []string) ([]int64, error) {
	params := make([]river.InsertManyParams, len(leads))
	for i, id := range leads {
		params[i] = river.InsertManyParams{Args: ProcessLeadArgs{LeadID: id}}
		if i < len(traceParents) && traceParents[i] != "" {
			params[i].InsertOpts = &river.InsertOpts{Metadata: traceMetadata(traceParents[i])}
		}
	}
	res, err := q.client.InsertManyTx(ctx, tx, params)
	if err != nil {
		return nil, err
	}
	// Matched by the lead in each job's arguments: the order of an
	// insert's RETURNING is not promised.
	byLead := make(map[uuid.UUID]int64, len(res))
	for _, r := range res {
		var args ProcessLeadArgs
		if err := json.Unmarshal(r.Job.EncodedArgs, &args); err != nil {
			return nil, fmt.Errorf("job %d: %w", r.Job.ID, err)
		}
		byLead[args.LeadID] = r.Job.ID
	}
	ids := make([]int64, len(leads))
	for i, id := range leads {
		jobID, ok := byLead[id]
		if !ok {
			return nil, fmt.Errorf("no job inserted for lead %s", id)
		}
		ids[i] = jobID
	}
	return ids, nil
}

// Callback reports whether the client has a callback in force.
func (q *Queue) Callback(clientID string) bool {
	if q.callers == nil {
		return false
	}
	c, ok := q.callers.Set().Client(clientID)
	return ok && c.Callback != nil
}

// DeliverCallbacks inserts the DeliverCallback job of each callback.
func (q *Queue) DeliverCallbacks(ctx context.Context, tx pgx.Tx, callbacks []uuid.UUID) error {
	params := make([]river.InsertManyParams, len(callbacks))
	for i, id := range callbacks {
		params[i] = river.InsertManyParams{Args: DeliverCallbackArgs{CallbackID: id}}
	}
	_, err := q.client.InsertManyTx(ctx, tx, params)
	return err
}

// Wake makes the jobs available at once (River's JobRetryTx); a job gone
// meanwhile is left alone: its lead's next run finds out for itself.
func (q *Queue) Wake(ctx context.Context, tx pgx.Tx, jobs []int64) error {
	for _, id := range jobs {
		if _, err := q.client.JobRetryTx(ctx, tx, id); err != nil && !errors.Is(err, river.ErrNotFound) {
			return fmt.Errorf("wake job %d: %w", id, err)
		}
	}
	return nil
}
