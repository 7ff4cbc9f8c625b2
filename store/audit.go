package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Actions an operator takes, as the audit records them.
const (
	ActionRelease     = "release"
	ActionRedrive     = "redrive"
	ActionSettle      = "settle"
	ActionErase       = "erase"
	ActionShowEnquiry = "show_enquiry"
)

// Ways an operator reaches the service, as the audit records them.
const (
	ViaCLI      = "cli"
	ViaAdminAPI = "admin_api"
	ViaConsole  = "console"
)

// Who is who asks for an operator action: the audit row of the action
// names them. Every store method that acts for an operator (Release,
// Redrive, Settle, Erase, Enquiry, QuarantinedEnquiry) takes one and
// writes its row in the action's own transaction: an action is recorded
// exactly when it happened.
type Who struct {
	// Name is the actor: "cli", "admin" (the admin API's ADMIN_USER), or
	// a console login.
	Name string
	// Via is how they reached the service: ViaCLI, ViaAdminAPI or
	// ViaConsole.
	Via string
}

// errNoWho is the error of an operator action asked for without saying who
// asks: nothing is done that the audit would not record.
var errNoWho = errors.New("store: an operator action needs who asks for it (Who)")

func (w *Who) check() error {
	if w == nil || w.Name == "" {
		return errNoWho
	}
	switch w.Via {
	case ViaCLI, ViaAdminAPI, ViaConsole:
		return nil
	}
	return fmt.Errorf("store: unknown way of asking %q", w.Via)
}

// audit is one row of the audit, as an action writes it.
type audit struct {
	who      *Who
	action   string
	clientID string
	// keys are those the action changed or showed.
	keys      []KeyName
	count     int
	emailHMAC []byte
	// detail is the action's own parameters; nil for none.
	detail map[string]any
}

// writeAudit writes a's row in tx, the transaction of its action.
func writeAudit(ctx context.Context, tx pgx.Tx, a *audit) error {
	if err := a.who.check(); err != nil {
		return err
	}
	keys := a.keys
	if keys == nil {
		keys = []KeyName{}
	}
	detail := a.detail
	if detail == nil {
		detail = map[string]any{}
	}
	_, err := tx.Exec(ctx, `
INSERT INTO audit (actor, via, action, client_id, keys, count, email_hmac, detail)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
		a.who.Name, a.who.Via, a.action, nullIfEmpty(a.clientID), keys, a.count, a.emailHMAC, detail)
	if err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	return nil
}

// AuditEntry is one recorded operator action: who, through what, what,
// when, which client and keys, how many. It holds no personal data.
type AuditEntry struct {
	ID     int64     `json:"id"`
	At     time.Time `json:"at"`
	Actor  string    `json:"actor"`
	Via    string    `json:"via"`
	Action string    `json:"action"`
	// ClientID is empty for an action across clients (a redrive by
	// outcome alone).
	ClientID string    `json:"client_id"`
	Keys     []KeyName `json:"keys"`
	Count    int       `json:"count"`
	// Detail is the action's own parameters: a redrive's outcome, since
	// and the keys it left, a settle's CRM id.
	Detail json.RawMessage `json:"detail"`
}

// AuditFilter selects audit entries: recorded within Since (zero for any),
// before the entry Before (zero for none: a page of the newest), at most
// Limit (default 100).
type AuditFilter struct {
	Since  time.Duration
	Before int64
	Limit  int
}

// AuditLog returns the audit entries f selects, newest first.
func (s *Store) AuditLog(ctx context.Context, f AuditFilter) ([]AuditEntry, error) {
	if f.Limit <= 0 {
		f.Limit = 100
	}
	rows, err := s.db.Query(ctx, `
SELECT id, at, actor, via, action, coalesce(client_id, ''), keys, count, detail
FROM audit
WHERE ($1::float8 = 0 OR at > now() - $1::float8 * interval '1 second')
  AND ($2::bigint = 0 OR id < $2)
ORDER BY id DESC
LIMIT $3`, f.Since.Seconds(), f.Before, f.Limit)
	if err != nil {
		return nil, fmt.Errorf("audit log: %w", err)
	}
	entries, err := pgx.CollectRows(rows, pgx.RowToStructByPos[AuditEntry])
	if err != nil {
		return nil, fmt.Errorf("audit log: %w", err)
	}
	return entries, nil
}

// Erasure is one recorded erasure request.
type Erasure struct {
	ClientID    string
	EmailHMAC   []byte
	Erased      int
	RequestedAt time.Time
	// Actor and Via are who asked, and how.
	Actor, Via string
}

// Erasures returns the erasure requests recorded for the client and the
// email's HMAC, oldest first.
func (s *Store) Erasures(ctx context.Context, clientID string, emailHMAC []byte) ([]Erasure, error) {
	rows, err := s.db.Query(ctx, `
SELECT client_id, email_hmac, count, at, actor, via FROM audit
WHERE action = 'erase' AND client_id = $1 AND email_hmac = $2 ORDER BY id`, clientID, emailHMAC)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowToStructByPos[Erasure])
}
