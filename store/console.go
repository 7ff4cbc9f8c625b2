package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/leadintake/leadintake/lead"
)

// LeadFilter selects the keys of the leads page, newest first: of ClientID,
// in State, failed with Outcome, of Owner (each empty for any), created
// within Within and longer ago than OlderThan (each zero for any), after
// the cursor After (nil for the first page), at most Limit (default 50).
// Expired keys are left out.
type LeadFilter struct {
	ClientID  string
	State     lead.KeyState
	Outcome   string
	Owner     string
	Within    time.Duration
	OlderThan time.Duration
	After     *LeadCursor
	Limit     int
}

// LeadCursor is where a page of keys ended: the next page starts after it.
type LeadCursor struct {
	CreatedAt time.Time
	ClientID  string
	Key       string
}

// String encodes the cursor for a URL: the key's creation in microseconds,
// its client and the key, none of them personal, apart by "!", which
// neither a client id nor a key may hold.
func (c LeadCursor) String() string {
	return strconv.FormatInt(c.CreatedAt.UnixMicro(), 36) + "!" + c.ClientID + "!" + c.Key
}

// ParseLeadCursor decodes LeadCursor.String; ok is false for anything else.
func ParseLeadCursor(s string) (LeadCursor, bool) {
	parts := strings.Split(s, "!")
	if len(parts) != 3 || parts[1] == "" || parts[2] == "" {
		return LeadCursor{}, false
	}
	micros, err := strconv.ParseInt(parts[0], 36, 64)
	if err != nil {
		return LeadCursor{}, false
	}
	return LeadCursor{CreatedAt: time.UnixMicro(micros).UTC(), ClientID: parts[1], Key: parts[2]}, true
}

// LeadRow is one key of the leads page, with its lead: ids, states and
// times, no personal data.
type LeadRow struct {
	ClientID string        `json:"client_id"`
	Key      string        `json:"key"`
	LeadID   uuid.UUID     `json:"lead_id"`
	State    lead.KeyState `json:"state"`
	// Outcome is the failure code of a failed key; empty otherwise.
	Outcome string `json:"outcome"`
	// Owner is the lead's owner; empty when it has none (or none is
	// kept).
	Owner string `json:"owner"`
	// CRMDestination is the lead's CRM destination, empty until its
	// first CRM step.
	CRMDestination string     `json:"crm_destination"`
	CreatedAt      time.Time  `json:"created_at"`
	UpdatedAt      time.Time  `json:"updated_at"`
	FinishedAt     *time.Time `json:"finished_at"`
}

// LeadPage is one page of the leads page.
type LeadPage struct {
	Rows []LeadRow
	// Next is the cursor of the next page; nil on the last.
	Next *LeadCursor
}

// ListLeads returns the page of keys f selects, newest first, and where the
// next page starts. It pages by a keyset (created_at, client_id, key),
// never an offset: a page costs the same however deep it is. A client's
// keys are read from the index of client and state, state by state, merged
// (one state when f names one); other pages from the index of creation.
func (s *Store) ListLeads(ctx context.Context, f LeadFilter) (*LeadPage, error) {
	if f.Limit <= 0 {
		f.Limit = 50
	}
	const owner = `coalesce(l.owner, '')`
	args := pgx.NamedArgs{"limit": f.Limit + 1}
	conds := []string{"(k.expires_at IS NULL OR k.expires_at > now())"}
	if f.Outcome != "" {
		if f.State != "" && f.State != lead.KeyFailed {
			return &LeadPage{}, nil
		}
		f.State = lead.KeyFailed
		conds = append(conds, "k.failure_code = @outcome")
		args["outcome"] = f.Outcome
	}
	if f.Owner != "" {
		conds = append(conds, owner+" = @owner")
		args["owner"] = f.Owner
	}
	if f.Within > 0 {
		conds = append(conds, "k.created_at > now() - @within::float8 * interval '1 second'")
		args["within"] = f.Within.Seconds()
	}
	if f.OlderThan > 0 {
		conds = append(conds, "k.created_at < now() - @older::float8 * interval '1 second'")
		args["older"] = f.OlderThan.Seconds()
	}
	if f.After != nil {
		args["after_at"], args["after_client"], args["after_key"] = f.After.CreatedAt, f.After.ClientID, f.After.Key
	}
	columns := `k.client_id, k.key, k.lead_id, k.state, coalesce(k.failure_code, ''), ` + owner + `,
       coalesce(l.crm_destination, ''), k.created_at, k.updated_at, k.finished_at`
	const order = `ORDER BY k.created_at DESC, k.client_id DESC, k.key DESC`

	var sql string
	if f.ClientID == "" {
		if f.State != "" {
			conds = append(conds, "k.state = @state")
			args["state"] = string(f.State)
		}
		if f.After != nil {
			conds = append(conds, "(k.created_at, k.client_id, k.key) < (@after_at, @after_client, @after_key)")
		}
		sql = `SELECT ` + columns + `
FROM idempotency_keys k JOIN leads l ON l.id = k.lead_id
WHERE ` + strings.Join(conds, " AND ") + `
` + order + `
LIMIT @limit`
	} else {
		args["client"] = f.ClientID
		conds = append(conds, "k.client_id = @client")
		if f.After != nil {
			// Another client's cursor is a cursor all the same: the
			// page starts after its time.
			conds = append(conds, "(k.created_at, k.client_id, k.key) < (@after_at, @after_client, @after_key)")
		}
		states := lead.KeyStates
		if f.State != "" {
			states = []lead.KeyState{f.State}
		}
		branches := make([]string, len(states))
		for i, st := range states {
			name := "state" + strconv.Itoa(i)
			args[name] = string(st)
			branches[i] = `(SELECT ` + columns + `
FROM idempotency_keys k JOIN leads l ON l.id = k.lead_id
WHERE k.state = @` + name + ` AND ` + strings.Join(conds, " AND ") + `
` + order + `
LIMIT @limit)`
		}
		sql = `SELECT * FROM (` + strings.Join(branches, "\nUNION ALL\n") + `) k
ORDER BY created_at DESC, client_id DESC, key DESC
LIMIT @limit`
	}
	rows, err := s.db.Query(ctx, sql, args)
	if err != nil {
		return nil, fmt.Errorf("list leads: %w", err)
	}
	list, err := pgx.CollectRows(rows, pgx.RowToStructByPos[LeadRow])
	if err != nil {
		return nil, fmt.Errorf("list leads: %w", err)
	}
	page := &LeadPage{Rows: list}
	if len(list) > f.Limit {
		page.Rows = list[:f.Limit]
		last := page.Rows[f.Limit-1]
		page.Next = &LeadCursor{CreatedAt: last.CreatedAt, ClientID: last.ClientID, Key: last.Key}
	}
	return page, nil
}

// CallbackSummary is one finish announced to a lead's client: its type,
// when, and how its delivery went. Its payload is not shown.
type CallbackSummary struct {
	ID          uuid.UUID  `json:"id"`
	Type        string     `json:"type"`
	CreatedAt   time.Time  `json:"created_at"`
	Attempts    int        `json:"attempts"`
	DeliveredAt *time.Time `json:"delivered_at"`
	GivenUpAt   *time.Time `json:"given_up_at"`
}

// LeadCallbacks returns the callbacks owed for the lead's finishes, oldest
// first.
func (s *Store) LeadCallbacks(ctx context.Context, leadID uuid.UUID) ([]CallbackSummary, error) {
	rows, err := s.db.Query(ctx, `
SELECT id, coalesce(payload->>'type', ''), created_at, attempts, delivered_at, given_up_at
FROM callbacks WHERE lead_id = $1 ORDER BY created_at, id`, leadID)
	if err != nil {
		return nil, fmt.Errorf("lead callbacks: %w", err)
	}
	list, err := pgx.CollectRows(rows, pgx.RowToStructByPos[CallbackSummary])
	if err != nil {
		return nil, fmt.Errorf("lead callbacks: %w", err)
	}
	return list, nil
}

// Enquiry is a lead's personal data, for the operator who asked to see it.
type Enquiry struct {
	ClientID string
	Key      string
	LeadID   uuid.UUID
	// Submission is the enquiry as stored (canonical JSON), its
	// attribution included; nil once erased.
	Submission []byte
	// Enrichment is the enrichment service's answer; nil without one.
	Enrichment []byte
	ErasedAt   *time.Time
}

// Enquiry returns the enquiry of the client's key, for who asks, and records
// the look in the audit in the same transaction: nothing is shown that is
// not recorded. ErrNotFound when there is no such key (or it expired):
// nothing shown, nothing recorded.
func (s *Store) Enquiry(ctx context.Context, clientID, key string, by *Who) (*Enquiry, error) {
	if err := by.check(); err != nil {
		return nil, err
	}
	e := &Enquiry{}
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `
SELECT k.client_id, k.key, k.lead_id, l.submission, l.enrichment, l.erased_at
FROM idempotency_keys k JOIN leads l ON l.id = k.lead_id
WHERE k.client_id = $1 AND k.key = $2 AND (k.expires_at IS NULL OR k.expires_at > now())`,
			clientID, key).Scan(&e.ClientID, &e.Key, &e.LeadID, &e.Submission, &e.Enrichment, &e.ErasedAt)
		if err != nil {
			return err
		}
		return writeAudit(ctx, tx, &audit{
			who: by, action: ActionShowEnquiry, clientID: clientID, keys: []KeyName{{clientID, key}}, count: 1,
		})
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("enquiry: %w", err)
	}
	return e, nil
}
