package jobs

import (
	"context"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/leadintake/leadintake/intake"
)

// ProcessLeadArgs are the arguments of the job that takes one lead through
// enrichment, scoring, the CRM and the notification. They carry the lead's
// id only: personal data stays in the leads table, out of River UI.
type ProcessLeadArgs struct {
	LeadID uuid.UUID `json:"lead_id"`
}

// Kind is the job's kind in River.
func (ProcessLeadArgs) Kind() string { return "process_lead" }

// Enqueuer returns the intake.EnqueueFunc that inserts a ProcessLead job with
// client, inside the claim's transaction.
func Enqueuer(client *river.Client[pgx.Tx]) intake.EnqueueFunc {
	return func(ctx context.Context, tx pgx.Tx, leadID uuid.UUID) error {
		_, err := client.InsertTx(ctx, tx, ProcessLeadArgs{LeadID: leadID}, nil)
		return err
	}
}
