package jobs

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/leadintake/leadintake/store"
)

// ProcessLeadArgs are the arguments of the job that takes one lead through
// enrichment, scoring, the CRM and the notification. They carry the lead's
// id only: personal data stays in the leads table, out of River UI.
type ProcessLeadArgs struct {
	LeadID uuid.UUID `json:"lead_id"`
}

// Kind is the job's kind in River.
func (ProcessLeadArgs) Kind() string { return "process_lead" }

// Enqueuer returns the store.EnqueueFunc that inserts a ProcessLead job with
// client, inside the transaction that claims (or re-opens, or resumes) its
// lead.
func Enqueuer(client *river.Client[pgx.Tx]) store.EnqueueFunc {
	return func(ctx context.Context, tx pgx.Tx, leadID uuid.UUID) (int64, error) {
		res, err := client.InsertTx(ctx, tx, ProcessLeadArgs{LeadID: leadID}, nil)
		if err != nil {
			return 0, err
		}
		return res.Job.ID, nil
	}
}

// QueueMaintenance is the queue of the periodic jobs, apart from the leads.
const QueueMaintenance = "maintenance"

// ManyEnqueuer returns the store.EnqueueManyFunc that inserts the
// ProcessLead jobs of a group of claimed leads with client, in one insert
// inside the transaction that claims them.
func ManyEnqueuer(client *river.Client[pgx.Tx]) store.EnqueueManyFunc {
	return func(ctx context.Context, tx pgx.Tx, leadIDs []uuid.UUID) ([]int64, error) {
		params := make([]river.InsertManyParams, len(leadIDs))
		for i, id := range leadIDs {
			params[i] = river.InsertManyParams{Args: ProcessLeadArgs{LeadID: id}}
		}
		res, err := client.InsertManyTx(ctx, tx, params)
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
		ids := make([]int64, len(leadIDs))
		for i, id := range leadIDs {
			jobID, ok := byLead[id]
			if !ok {
				return nil, fmt.Errorf("no job inserted for lead %s", id)
			}
			ids[i] = jobID
		}
		return ids, nil
	}
}
