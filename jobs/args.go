package jobs

import (
	"github.com/google/uuid"
)

// ProcessLeadArgs are the arguments of the job that takes one lead through
// enrichment, scoring, the CRM and the notification. They carry the lead's
// id only: personal data stays in the leads table, out of River UI.
type ProcessLeadArgs struct {
	LeadID uuid.UUID `json:"lead_id"`
}

// Kind is the job's kind in River.
func (ProcessLeadArgs) Kind() string { return "process_lead" }

// QueueMaintenance is the queue of the periodic jobs, apart from the leads.
const QueueMaintenance = "maintenance"
