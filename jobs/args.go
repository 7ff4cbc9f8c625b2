package jobs

import (
	"context"

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
