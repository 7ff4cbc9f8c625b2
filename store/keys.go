package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/leadintake/leadintake/lead"
)

// KeyFilter selects keys for an operator.
type KeyFilter struct {
	// ClientID and State select one client's keys, and keys in one state;
	// empty for any.
	ClientID string
	State    lead.KeyState
	// OlderThan selects keys created longer ago than this; zero for any.
	OlderThan time.Duration
	// Limit bounds the keys returned; default 100.
	Limit int
}

// KeySummary is one key, as an operator lists it.
type KeySummary struct {
	ClientID  string        `json:"client_id"`
	Key       string        `json:"key"`
	State     lead.KeyState `json:"state"`
	LeadID    uuid.UUID     `json:"lead_id"`
	CreatedAt time.Time     `json:"created_at"`
	UpdatedAt time.Time     `json:"updated_at"`
	ExpiresAt *time.Time    `json:"expires_at"`
}

// ListKeys returns the keys f selects, oldest first; expired keys are left
// out.
func (s *Store) ListKeys(ctx context.Context, f KeyFilter) ([]KeySummary, error) {
	if f.Limit <= 0 {
		f.Limit = 100
	}
	return selectAll[KeySummary](ctx, s.db, "list keys", `
SELECT client_id, key, state, lead_id, created_at, updated_at, expires_at
FROM idempotency_keys
WHERE ($1 = '' OR client_id = $1) AND ($2 = '' OR state = $2)
  AND created_at < now() - $3::interval
  AND (expires_at IS NULL OR expires_at > now())
ORDER BY created_at, client_id, key
LIMIT $4`, f.ClientID, string(f.State), f.OlderThan, f.Limit)
}

// KeyDetail is one key and its lead as an operator reads it: states, ids,
// times and steps; no personal data.
type KeyDetail struct {
	KeySummary
	FinishedAt     *time.Time        `json:"finished_at"`
	ResponseStatus *int              `json:"response_status"`
	FailureCode    *string           `json:"failure_code"`
	Supersedes     *string           `json:"supersedes"`
	SupersededBy   *string           `json:"superseded_by"`
	ExternalRef    string            `json:"external_ref"`
	Enrichment     lead.Enrichment   `json:"enrichment"`
	CRM            lead.CRM          `json:"crm"`
	CRMID          string            `json:"crm_id"`
	Notification   lead.Notification `json:"notification"`
	// CRMDestination is the lead's CRM destination, empty until its
	// first CRM step.
	CRMDestination string `json:"crm_destination"`
	// Owner is the lead's owner, nil while none is assigned.
	Owner *string `json:"owner"`
	// Channels are the lead's notification channels and their states,
	// empty until they are chosen.
	Channels []ChannelDetail `json:"channels"`
	Run      int32           `json:"run"`
	JobID    *int64          `json:"job_id"`
	ErasedAt *time.Time      `json:"erased_at"`
	// WaitingFor is the destination the lead waits for, nil when it does
	// not wait.
	WaitingFor *string `json:"waiting_for"`
}

// ChannelDetail is one notification channel of a lead, as `api keys show`
// reports it.
type ChannelDetail struct {
	Name     string            `json:"name"`
	State    lead.ChannelState `json:"state"`
	Failures int               `json:"failures"`
}

// ShowKey returns the client's key with its lead; ErrNotFound when there is
// none (or it expired).
func (s *Store) ShowKey(ctx context.Context, clientID, key string) (*KeyDetail, error) {
	var (
		d        KeyDetail
		status   *int16
		channels []byte
	)
	err := s.db.QueryRow(ctx, `
SELECT k.client_id, k.key, k.state, k.lead_id, k.created_at, k.updated_at, k.expires_at,
       k.finished_at, k.response_status, k.failure_code, k.supersedes, k.superseded_by,
       l.external_ref, coalesce(l.enrichment_outcome, ''), l.crm_state, coalesce(l.crm_id, ''),
       coalesce(l.notify_outcome, ''), coalesce(l.crm_destination, ''), l.owner, l.channels, l.run, l.job_id, l.erased_at,
       CASE WHEN k.state = 'processing' AND l.waiting_for <> 'enrichment' THEN l.waiting_for END
FROM idempotency_keys k
JOIN leads l ON l.id = k.lead_id
WHERE k.client_id = $1 AND k.key = $2 AND (k.expires_at IS NULL OR k.expires_at > now())`,
		clientID, key).Scan(&d.ClientID, &d.Key, &d.State, &d.LeadID, &d.CreatedAt, &d.UpdatedAt, &d.ExpiresAt,
		&d.FinishedAt, &status, &d.FailureCode, &d.Supersedes, &d.SupersededBy,
		&d.ExternalRef, &d.Enrichment, &d.CRM, &d.CRMID, &d.Notification, &d.CRMDestination, &d.Owner, &channels, &d.Run, &d.JobID, &d.ErasedAt, &d.WaitingFor)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("show key: %w", err)
	}
	if status != nil {
		st := int(*status)
		d.ResponseStatus = &st
	}
	var st lead.State
	if err := scanChannels(channels, &st); err != nil {
		return nil, fmt.Errorf("show key: channels: %w", err)
	}
	d.Channels = []ChannelDetail{}
	for _, c := range st.Channels {
		if c.Name != "" {
			d.Channels = append(d.Channels, ChannelDetail{Name: c.Name, State: c.State, Failures: c.Failures})
		}
	}
	return &d, nil
}
