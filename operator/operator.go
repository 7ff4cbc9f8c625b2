// Package operator is the one way in for everything an operator does to
// keys and leads, whether from the command line (`api erase`, `api keys`,
// `api leads`, `api spam`, `api audit`), the admin listener's JSON (POST
// /admin/erasures, /admin/redrives) or the console's pages: list keys,
// leads and quarantined enquiries, show a key with its lead and delivery
// log, show an enquiry, release, redrive, settle, erase, the destinations'
// state and the audit. Each method that acts, or shows personal data, takes
// the Actor who asks, refuses a viewer (ErrForbidden), and has the store
// write the audit's row in the action's own transaction. It goes through
// the same store and the same state machine as the worker: a settle is
// lead.Settle and store.Settle, as the reconciler's resume.
package operator

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"

	"github.com/leadintake/leadintake/callers"
	"github.com/leadintake/leadintake/lead"
	"github.com/leadintake/leadintake/response"
	"github.com/leadintake/leadintake/store"
)

// Operator acts on keys and leads. Its River client may be insert-only.
type Operator struct {
	Store *store.Store
	River *river.Client[pgx.Tx]
	// HashKey keys the email's hash that finds a person's leads.
	HashKey lead.HashKey
	// Callers are the clients in force; nil for none. (The store's Jobs
	// announce an erasure's finishes to the clients' callbacks.)
	Callers *callers.Holder
	// KeyRetention is how long the keys an erasure finishes are kept.
	KeyRetention time.Duration
	// Erased counts the leads erased on request; may be nil.
	Erased *prometheus.CounterVec
}

// ErrBadEmail is returned by Erase for an address that is not one.
var ErrBadEmail = errors.New("want one email address")

// ErrUnknownClient is returned by Erase for a client that is not among the
// clients in force (Callers; none when Callers is nil): a mistyped id would
// erase nothing and record an erasure for a client that does not exist.
// Nothing is erased or recorded.
var ErrUnknownClient = errors.New("no such client among the clients in force")

// Erase erases the personal data of every lead of clientID whose email is
// email (lower-cased, whole), at once, and returns how many; the audit
// records the request (who, the client, the email's HMAC, how many), also
// when none matched. Leads not yet finished are finished as failed, 422
// erased, as every finish is (store.Erase): their callbacks enqueued and
// the amendments waiting for them woken. It returns ErrForbidden for a
// viewer, ErrUnknownClient or ErrBadEmail for a bad request.
func (o *Operator) Erase(ctx context.Context, who Actor, clientID, email string) (int, error) {
	by, err := who.may()
	if err != nil {
		return 0, err
	}
	if o.Callers == nil {
		return 0, ErrUnknownClient
	}
	if _, ok := o.Callers.Set().Client(clientID); !ok {
		return 0, ErrUnknownClient
	}
	email = strings.TrimSpace(email)
	if email == "" || strings.ContainsAny(email, " \t\r\n") || !strings.Contains(email, "@") {
		return 0, ErrBadEmail
	}
	erased, err := o.Store.Erase(ctx, &store.EraseParams{
		ClientID: clientID, EmailHMAC: o.HashKey.Email(email), By: by, Retention: o.KeyRetention,
	})
	if err != nil {
		return 0, err
	}
	if o.Erased != nil {
		o.Erased.WithLabelValues("request").Add(float64(erased.Count))
	}
	return erased.Count, nil
}

// ErrState is returned by Settle for a key that does not await
// reconciliation (any more): nothing changed.
type ErrState struct{ State lead.KeyState }

func (e *ErrState) Error() string {
	return fmt.Sprintf("the key is %s, not needs_reconciliation: nothing changed", e.State)
}

// Settle settles a key awaiting reconciliation with what the operator
// found in the CRM: the record (crmID, the lead resumes at its
// notification) or, with found false, none (the lead resumes at its CRM
// step and is posted again); the audit records it. Against the reconciler,
// one of the two wins; a key in another state changes nothing, is not
// recorded, and gives *ErrState. A viewer gets ErrForbidden.
func (o *Operator) Settle(ctx context.Context, who Actor, clientID, key string, found bool, crmID string) error {
	by, err := who.may()
	if err != nil {
		return err
	}
	d, err := o.Store.ShowKey(ctx, clientID, key)
	if err != nil {
		return err
	}
	l, err := o.Store.Lead(ctx, d.LeadID)
	if err != nil {
		return err
	}
	if l.KeyState.State != lead.KeyNeedsReconciliation {
		return &ErrState{State: l.KeyState.State}
	}
	resumed, err := o.Store.Settle(ctx, l, lead.Settle(l.State, found, crmID), by)
	if err != nil {
		return err
	}
	if !resumed {
		now, err := o.Store.ShowKey(ctx, clientID, key)
		if err != nil {
			return err
		}
		return &ErrState{State: now.State}
	}
	return nil
}

// Show returns a key with its lead, and, when its job is known to River,
// the job's attempts and last error.
func (o *Operator) Show(ctx context.Context, clientID, key string) (*KeyReport, error) {
	d, err := o.Store.ShowKey(ctx, clientID, key)
	if err != nil {
		return nil, err
	}
	r := &KeyReport{KeyDetail: *d, Calls: []CallReport{}}
	calls, err := o.Store.Calls(ctx, d.LeadID)
	if err != nil {
		return nil, err
	}
	for _, c := range calls {
		r.Calls = append(r.Calls, CallReport{
			Step: c.Step, Destination: c.Destination, Kind: c.Kind,
			Attempt: c.Attempt, StartedAt: c.StartedAt.UTC(), DurationMS: c.Duration.Milliseconds(), Outcome: c.Outcome,
		})
	}
	if d.JobID != nil {
		job, err := o.River.JobGet(ctx, *d.JobID)
		switch {
		case errors.Is(err, river.ErrNotFound):
		case err != nil:
			return nil, err
		default:
			r.JobState = string(job.State)
			r.Attempts = job.Attempt
			if n := len(job.Errors); n > 0 {
				r.LastError = job.Errors[n-1].Error
			}
		}
	}
	return r, nil
}

// KeyReport is what `api keys show` reports of a key: no personal data
// (downstream errors name the target and the status, never a body).
type KeyReport struct {
	store.KeyDetail
	JobState  string `json:"job_state,omitempty"`
	Attempts  int    `json:"attempts"`
	LastError string `json:"last_error,omitempty"`
	// Calls is the delivery log of the key's lead, oldest first.
	Calls []CallReport `json:"calls"`
}

// CallReport is one downstream call of a lead, as `api keys show` reports
// it.
type CallReport struct {
	Step string `json:"step"`
	// Destination is the name of the destination called, Kind its kind.
	Destination string    `json:"destination"`
	Kind        string    `json:"kind"`
	Attempt     int       `json:"attempt"`
	StartedAt   time.Time `json:"started_at"`
	DurationMS  int64     `json:"duration_ms"`
	Outcome     string    `json:"outcome"`
}

// ErrBadRedrive is returned by Redrive for a selection that is not one: it
// needs either keys (with the client) or the outcome
// downstream_unavailable, not both.
var ErrBadRedrive = errors.New("redrive needs either keys with a client, or the outcome downstream_unavailable; not both")

// MaxKeys bounds the keys one release or redrive names, and what one
// console redrive by outcome re-opens: one transaction re-opens them all,
// each with a new job.
const MaxKeys = 1000

// TooManyKeysError is returned for a release or a redrive that names more
// than MaxKeys keys: nothing is done.
type TooManyKeysError struct{ N int }

func (e *TooManyKeysError) Error() string {
	return fmt.Sprintf("%d keys named at once; at most %d: nothing was done, name fewer", e.N, MaxKeys)
}

// Redrive re-opens every selected key that a retry would re-open, exactly
// as a retry would (store.Redrive), and the audit records who asked and
// what it did; DryRun changes and records nothing (and needs no right to
// act). It returns ErrBadRedrive for a bad selection, *TooManyKeysError for
// more than MaxKeys keys named, ErrForbidden for a viewer.
func (o *Operator) Redrive(ctx context.Context, who Actor, p *store.RedriveParams) (*store.Redriven, error) {
	switch {
	case (len(p.Keys) > 0) == (p.Outcome != ""):
		return nil, ErrBadRedrive
	case len(p.Keys) > 0 && p.ClientID == "":
		return nil, ErrBadRedrive
	case p.Outcome != "" && p.Outcome != response.CodeDownstreamUnavailable:
		return nil, ErrBadRedrive
	case p.Since < 0 || p.Limit < 0:
		return nil, ErrBadRedrive
	case len(p.Keys) > MaxKeys:
		return nil, &TooManyKeysError{N: len(p.Keys)}
	}
	q := *p
	q.By = nil
	if !p.DryRun {
		by, err := who.may()
		if err != nil {
			return nil, err
		}
		q.By = by
	}
	return o.Store.Redrive(ctx, &q)
}

// ErrNoKeys is returned by Release without a key to release.
var ErrNoKeys = errors.New("name at least one key")

// Release runs the client's quarantined keys as a new claim would have
// (store.Release), never judged again; a key that is not quarantined (or is
// superseded, erased, expired) is left as it is and reported in Skipped.
// The audit records the release, also when it released none. It returns
// ErrNoKeys or *TooManyKeysError for a bad selection, ErrForbidden for a
// viewer.
func (o *Operator) Release(ctx context.Context, who Actor, clientID string, keys []string) (*store.Redriven, error) {
	by, err := who.may()
	if err != nil {
		return nil, err
	}
	switch {
	case clientID == "" || len(keys) == 0:
		return nil, ErrNoKeys
	case len(keys) > MaxKeys:
		return nil, &TooManyKeysError{N: len(keys)}
	}
	return o.Store.Release(ctx, &store.ReleaseParams{ClientID: clientID, Keys: keys, By: by})
}
