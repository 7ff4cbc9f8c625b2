package jobs

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leadintake/leadintake/intake"
)

// Lead outcomes, as logged, counted and recorded on the job.
const (
	outcomeCompleted           = "completed"
	outcomeCRMRejected         = intake.CodeCRMRejected
	outcomeDownstreamUnavail   = intake.CodeDownstreamUnavailable
	outcomeNeedsReconciliation = intake.StateNeedsReconciliation
)

// completedBody is the final 201 body.
type completedBody struct {
	Status   string   `json:"status"`
	LeadID   string   `json:"lead_id"`
	CRMID    string   `json:"crm_id"`
	Score    int      `json:"score"`
	Tier     string   `json:"tier"`
	Notified bool     `json:"notified"`
	Warnings []string `json:"warnings"`
}

// failedBody is the final body of a failed lead.
type failedBody struct {
	Status string      `json:"status"`
	LeadID string      `json:"lead_id"`
	Error  failedError `json:"error"`
}

type failedError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// verdict is how a lead ends: its final response, or reconciliation.
type verdict struct {
	outcome string
	// state is the key's new state.
	state  string
	status int
	body   []byte
	failed string // failure code
}

func completedVerdict(l *lead, score int, tier string) (*verdict, error) {
	body, err := json.Marshal(completedBody{
		Status:   "completed",
		LeadID:   l.ID.String(),
		CRMID:    *l.CRMID,
		Score:    score,
		Tier:     tier,
		Notified: l.NotifyOutcome != nil && *l.NotifyOutcome == "sent",
		Warnings: l.warnings(),
	})
	return &verdict{outcome: outcomeCompleted, state: intake.StateCompleted, status: http.StatusCreated, body: body}, err
}

func failedVerdict(l *lead, code, message string) (*verdict, error) {
	status := http.StatusBadGateway
	if code == intake.CodeCRMRejected {
		status = http.StatusUnprocessableEntity
	}
	body, err := json.Marshal(failedBody{
		Status: "failed",
		LeadID: l.ID.String(),
		Error:  failedError{Code: code, Message: message},
	})
	return &verdict{outcome: code, state: intake.StateFailed, status: status, body: body, failed: code}, err
}

func reconciliationVerdict() *verdict {
	return &verdict{outcome: outcomeNeedsReconciliation, state: intake.StateNeedsReconciliation}
}

// finisher ends leads: one transaction holds the lead's result, the key's
// final response (or its move to needs_reconciliation) and, inside a job,
// the job's completion.
type finisher struct {
	pool      *pgxpool.Pool
	retention time.Duration
}

// finish applies v to l. completeJob, when not nil, completes the running
// job inside the same transaction. It returns false when the key was no
// longer the lead's to finish; the job is completed all the same.
func (f *finisher) finish(ctx context.Context, l *lead, v *verdict, completeJob func(context.Context, pgx.Tx) error) (bool, error) {
	ctx, cancel := dbContext(ctx)
	defer cancel()
	tx, err := f.pool.Begin(ctx)
	if err != nil {
		return false, fmt.Errorf("finish: begin: %w", err)
	}
	defer func() { _ = tx.Rollback(ctx) }()

	var applied bool
	if v.state == intake.StateNeedsReconciliation {
		applied, err = intake.SetKeyStateTx(ctx, tx, l.Key, intake.StateProcessing, intake.StateNeedsReconciliation)
	} else {
		applied, err = intake.FinishKeyTx(ctx, tx, l.Key, &intake.FinishParams{
			State: v.state, Status: v.status, Body: v.body, FailureCode: v.failed, Retention: f.retention,
		})
	}
	if err != nil {
		return false, err
	}
	if applied {
		score, tier := Score(&l.Submission, l.enriched())
		if err := saveResultTx(ctx, tx, l, score, tier, v.state != intake.StateNeedsReconciliation); err != nil {
			return false, err
		}
	}
	if completeJob != nil {
		if err := completeJob(ctx, tx); err != nil {
			return false, fmt.Errorf("finish: complete job: %w", err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return false, fmt.Errorf("finish: commit: %w", err)
	}
	return applied, nil
}
