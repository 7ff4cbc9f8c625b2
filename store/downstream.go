package store

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/leadintake/leadintake/lead"
)

// The downstreams the environment configures, as named in the downstreams
// table, in leads.waiting_for and in the metrics; the clients file's
// destinations have names of their own.
const (
	DownstreamEnrichment   = "enrichment"
	DownstreamCRM          = "crm"
	DownstreamNotification = "notification"
)

// EnsureDownstreams makes sure each of names has its row of shared state
// (a destination added to the clients file gets one, up).
func (s *Store) EnsureDownstreams(ctx context.Context, names []string) error {
	if _, err := s.db.Exec(ctx, `INSERT INTO downstreams (name) SELECT unnest($1::text[]) ON CONFLICT (name) DO NOTHING`, names); err != nil {
		return fmt.Errorf("ensure downstreams: %w", err)
	}
	return nil
}

// DownstreamNames returns the name of every downstream that has shared
// state.
func (s *Store) DownstreamNames(ctx context.Context) ([]string, error) {
	rows, err := s.db.Query(ctx, `SELECT name FROM downstreams ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("downstream names: %w", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("downstream names: %w", err)
	}
	return names, nil
}

// ProbeSoon makes the downstreams names that are down due for a probe now:
// their configuration changed (a corrected token), so the next call may
// succeed.
func (s *Store) ProbeSoon(ctx context.Context, names []string) error {
	if _, err := s.db.Exec(ctx, `UPDATE downstreams SET next_probe_at = now() WHERE name = ANY($1) AND NOT up`, names); err != nil {
		return fmt.Errorf("probe downstreams: %w", err)
	}
	return nil
}

// Limit is a downstream's rate limit: at most N calls started per Per on
// average, in bursts of at most N, across every worker of the database. The
// zero Limit is none.
type Limit struct {
	N   int
	Per time.Duration
}

// IsZero reports whether l sets no limit.
func (l Limit) IsZero() bool { return l.N <= 0 || l.Per <= 0 }

// rate is l's refill in tokens a second.
func (l Limit) rate() float64 { return float64(l.N) / l.Per.Seconds() }

// AdmitOpts are how a downstream is admitted to: the settings of the
// process (PROBE_INTERVAL, the *_RATE_LIMIT).
type AdmitOpts struct {
	// ProbeInterval is how often one call probes a downstream that is down.
	ProbeInterval time.Duration
	// Limit is the downstream's rate limit; the zero Limit is none.
	Limit Limit
	// MaxAhead bounds how far ahead a call is booked in the rate limit;
	// a call that would wait longer is not booked (Hold lead.HoldRate).
	MaxAhead time.Duration
	// Lease is how many tokens of the bucket a call that may start now
	// takes at once, when the bucket holds at least twice as many: the
	// caller spends the others on its next calls (Admission.Tokens). Zero
	// or one takes one token a call.
	Lease int
}

// Admission is what Admit decided of one call.
type Admission struct {
	// Go: the call may start, after Wait (a call the rate limit booked
	// ahead).
	Go bool
	// Probe: the downstream is down, and this call is its probe.
	Probe bool
	// Hold says why the call may not start (Go false): the downstream is
	// down, holds all calls, or its rate limit has no room; Wait is then
	// how long it says to wait.
	Hold lead.Hold
	Wait time.Duration
	// Clean: the downstream is up with no failure in a row since its last
	// success: a success needs no report (ReportSuccess) to keep it so.
	Clean bool
	// Tokens is how many tokens of a rate limit the admission took: one
	// for this call, and the rest leased (AdmitOpts.Lease).
	Tokens int
}

// admitReadSQL reads a downstream's state, without a lock: the way of a
// downstream without a rate limit.
const admitReadSQL = `
SELECT up, coalesce(next_probe_at <= now(), false), coalesce(extract(epoch FROM next_probe_at - now()), 0),
       coalesce(extract(epoch FROM held_until - now()), 0), failures = 0
FROM downstreams WHERE name = $1`

// takeProbeSQL makes the caller the probe of a downstream that is down,
// when one is due: of concurrent callers one wins.
const takeProbeSQL = `
UPDATE downstreams SET next_probe_at = now() + $2 * interval '1 second'
WHERE name = $1 AND NOT up AND next_probe_at <= now()
RETURNING true`

// admitLimitedSQL decides, under the row's lock, a call to a downstream
// with a rate limit: the probe when it is down, no call while it holds
// calls, and otherwise a token of its bucket, taken now or booked ahead
// (tokens below zero) up to @max_ahead seconds; a call that starts now
// takes @lease tokens at once from a bucket that holds at least twice as
// many. It returns what it decided, the wait of a booked call in seconds,
// and the tokens taken.
const admitLimitedSQL = `
WITH cur AS (
    SELECT name, up, next_probe_at, held_until, failures,
           least(@burst::float8, coalesce(tokens, @burst::float8)
                 + extract(epoch FROM now() - coalesce(tokens_at, now())) * @rate::float8) AS tokens
    FROM downstreams WHERE name = @name
    FOR UPDATE
), d AS (
    SELECT cur.*,
           NOT up AND next_probe_at <= now() AS probe,
           coalesce(held_until > now(), false) AS held,
           greatest(0, (1 - cur.tokens) / @rate::float8) AS wait
    FROM cur
), g AS (
    SELECT d.*, NOT d.held AND (d.up OR d.probe) AND d.wait <= @max_ahead::float8 AS go FROM d
), t AS (
    SELECT g.*, CASE WHEN NOT g.go THEN 0
                     WHEN g.up AND g.tokens >= 2 * @lease::int THEN greatest(@lease::int, 1)
                     ELSE 1 END AS take
    FROM g
)
UPDATE downstreams t SET
    tokens = g.tokens - g.take,
    tokens_at = now(),
    next_probe_at = CASE WHEN g.probe AND g.go THEN now() + @probe_interval::float8 * interval '1 second' ELSE t.next_probe_at END
FROM t g WHERE t.name = g.name
RETURNING g.go, g.probe AND g.go, g.up, g.held,
    coalesce(extract(epoch FROM g.held_until - now()), 0), coalesce(extract(epoch FROM g.next_probe_at - now()), 0), g.wait,
    g.up AND NOT g.held AND g.failures = 0, g.take`

// Admit decides whether one call of leadID to the downstream name may start
// now, as every worker of the database sees it: not while the downstream is
// down (but for one probe a ProbeInterval), not while it holds all calls
// (a Retry-After), and within its rate limit. A downstream without a rate
// limit is read without a lock.
func (s *Store) Admit(ctx context.Context, name string, o AdmitOpts) (Admission, error) {
	if o.Limit.IsZero() {
		var (
			up, probeDue, clean bool
			probeIn, heldLeft   float64
		)
		err := s.db.QueryRow(ctx, admitReadSQL, name).Scan(&up, &probeDue, &probeIn, &heldLeft, &clean)
		if errors.Is(err, pgx.ErrNoRows) {
			// No state kept yet (EnsureDownstreams): nothing is known
			// against it.
			return Admission{Go: true, Clean: true}, nil
		}
		if err != nil {
			return Admission{}, fmt.Errorf("admit %s: %w", name, err)
		}
		switch {
		case heldLeft > 0:
			return Admission{Hold: lead.HoldCalls, Wait: seconds(heldLeft)}, nil
		case up:
			return Admission{Go: true, Clean: clean}, nil
		case !probeDue:
			return Admission{Hold: lead.HoldDown, Wait: seconds(probeIn)}, nil
		}
		var took bool
		err = s.db.QueryRow(ctx, takeProbeSQL, name, o.ProbeInterval.Seconds()).Scan(&took)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return Admission{Hold: lead.HoldDown, Wait: o.ProbeInterval}, nil
		case err != nil:
			return Admission{}, fmt.Errorf("admit %s: %w", name, err)
		}
		return Admission{Go: true, Probe: true}, nil
	}
	var (
		a                         Admission
		up, held                  bool
		heldLeft, probeIn, booked float64
	)
	err := s.db.QueryRow(ctx, admitLimitedSQL, pgx.NamedArgs{
		"name": name, "burst": float64(o.Limit.N), "rate": o.Limit.rate(),
		"max_ahead": o.MaxAhead.Seconds(), "probe_interval": o.ProbeInterval.Seconds(), "lease": o.Lease,
	}).Scan(&a.Go, &a.Probe, &up, &held, &heldLeft, &probeIn, &booked, &a.Clean, &a.Tokens)
	if errors.Is(err, pgx.ErrNoRows) {
		return Admission{Go: true, Clean: true, Tokens: 1}, nil
	}
	if err != nil {
		return Admission{}, fmt.Errorf("admit %s: %w", name, err)
	}
	switch {
	case a.Go:
		a.Wait = seconds(booked)
	case held:
		a.Hold, a.Wait = lead.HoldCalls, seconds(heldLeft)
	case !up:
		a.Hold, a.Wait = lead.HoldDown, max(seconds(probeIn), time.Second)
	default:
		a.Hold, a.Wait = lead.HoldRate, seconds(booked)
	}
	return a, nil
}

func seconds(s float64) time.Duration {
	if math.IsNaN(s) || s <= 0 {
		return 0
	}
	return time.Duration(s * float64(time.Second))
}

// Call is how a downstream call of a lead ended, as Report and the delivery
// log take it.
type Call struct {
	LeadID uuid.UUID
	// Step is the delivery log's step: enrichment, crm, crm_lookup,
	// crm_token, crm_person, notification or notification_lookup.
	Step string
	// Destination is the name of the destination called, and Kind its
	// kind; empty for a call logged before destinations (Calls then names
	// the environment's destination of its step).
	Destination, Kind string
	// Attempt is the attempt of the lead's job the call started in, from 1.
	Attempt   int
	StartedAt time.Time
	Duration  time.Duration
	// Outcome is the HTTP status ("200"), timeout, connection_error, or
	// not_sent (held by a limit or an outage).
	Outcome string
}

// Outcomes of a call that got no HTTP status.
const (
	CallTimeout         = "timeout"
	CallConnectionError = "connection_error"
	CallNotSent         = "not_sent"
)

// ReportOpts are how Report judges a failure: the detector's settings.
type ReportOpts struct {
	// Failures is how many transient failures in a row, of at least two
	// leads, make a downstream down.
	Failures int
	// ProbeInterval is how long after it went down it is first probed.
	ProbeInterval time.Duration
}

// Reported is what a report found of the downstream.
type Reported struct {
	// Down: the downstream is down (it went down with this failure, or it
	// was already).
	Down bool
	// Recovered: this success ended an outage.
	Recovered bool
	// NextProbe is how long until it may be probed again, while down.
	NextProbe time.Duration
	// Held is how long the downstream holds every call (a Retry-After).
	Held time.Duration
	// Shared: the lead failed before in this run of failures (no success
	// since), and another lead failed after its first failure of the run:
	// the downstream fails others as it fails this lead, an outage perhaps
	// not yet found, and the failure is not the lead's own. A lead's first
	// failure of a run is its own, and so are its failures while no other
	// lead's came after its first: leads that fail one after another, each
	// on its own, are no outage.
	Shared bool
}

// reportSuccessSQL records a success: the downstream is up, and its
// failures in a row start again from none. A downstream already so is only
// read, not locked.
const reportSuccessSQL = `
WITH old AS (
    SELECT name, up FROM downstreams
    WHERE name = $1 AND (failures > 0 OR NOT up)
    FOR UPDATE
)
UPDATE downstreams d SET up = true, unauthorized = false, failures = 0, failing_leads = '{}', down_since = NULL, next_probe_at = NULL
FROM old WHERE d.name = old.name
RETURNING NOT old.up`

// failingLeadsKept bounds downstreams.failing_leads: the leads of the
// latest failures in a row, one entry a failure, oldest first. A lead whose
// first failure of the run is no longer kept counts from its earliest one
// kept.
const failingLeadsKept = 64

// reportFailureSQL records a transient failure of @lead. It counts towards
// an outage (a few in a row, of at least two leads, and no success between)
// unless it is a hold: a Retry-After of @hold_for seconds that holds every
// call until then. The failure is shared (Reported.Shared) when another
// lead failed after @lead's first failure of the run. It returns the
// downstream's state after it.
const reportFailureSQL = `
WITH old AS (
    SELECT * FROM downstreams WHERE name = @name FOR UPDATE
), n AS (
    SELECT old.name, old.up,
           CASE WHEN @hold_for::float8 > 0 THEN old.failures ELSE old.failures + 1 END AS failures,
           CASE WHEN @hold_for::float8 > 0 THEN old.failing_leads
                ELSE (old.failing_leads || @lead::uuid)[greatest(cardinality(old.failing_leads) + 2 - @kept::int, 1):]
           END AS leads,
           @hold_for::float8 <= 0 AND EXISTS (
               SELECT FROM unnest(old.failing_leads) WITH ORDINALITY AS f(lead, i)
               WHERE f.lead <> @lead::uuid
                 AND f.i > (SELECT min(o.i) FROM unnest(old.failing_leads) WITH ORDINALITY AS o(lead, i) WHERE o.lead = @lead::uuid)
           ) AS shared
    FROM old
), m AS (
    SELECT n.*, n.up AND NOT (n.failures >= @threshold::int AND (SELECT count(DISTINCT l) FROM unnest(n.leads) AS l) >= 2) AS now_up FROM n
)
UPDATE downstreams d SET
    failures = m.failures, failing_leads = m.leads, up = m.now_up,
    down_since = CASE WHEN m.now_up THEN NULL ELSE coalesce(d.down_since, now()) END,
    next_probe_at = CASE WHEN m.now_up THEN NULL
                         WHEN m.up THEN now() + @probe_interval::float8 * interval '1 second'
                         ELSE d.next_probe_at END,
    held_until = CASE WHEN @hold_for::float8 > 0
                      THEN greatest(coalesce(d.held_until, now()), now() + @hold_for::float8 * interval '1 second')
                      ELSE d.held_until END
FROM m WHERE d.name = m.name
RETURNING NOT d.up, coalesce(extract(epoch FROM d.next_probe_at - now()), 0), coalesce(extract(epoch FROM d.held_until - now()), 0), m.shared`

// ReportSuccess records that a call to the downstream name succeeded:
// whatever failures were in a row end, and an outage ends (Recovered).
func (s *Store) ReportSuccess(ctx context.Context, name string) (Reported, error) {
	var r Reported
	err := s.db.QueryRow(ctx, reportSuccessSQL, name).Scan(&r.Recovered)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return r, fmt.Errorf("report %s: %w", name, err)
	}
	return r, nil
}

// ReportFailure records that a call of leadID to the downstream name failed
// transiently; holdFor, when positive, is the Retry-After of a 429 or 503,
// which holds every lead's calls for that long instead of counting towards
// an outage. It returns the downstream's state after it.
func (s *Store) ReportFailure(ctx context.Context, name string, leadID uuid.UUID, holdFor time.Duration, o ReportOpts) (Reported, error) {
	var (
		r               Reported
		probeIn, heldIn float64
	)
	err := s.db.QueryRow(ctx, reportFailureSQL, pgx.NamedArgs{
		"name": name, "lead": leadID, "hold_for": holdFor.Seconds(), "threshold": o.Failures,
		"probe_interval": o.ProbeInterval.Seconds(), "kept": failingLeadsKept,
	}).Scan(&r.Down, &probeIn, &heldIn, &r.Shared)
	if err != nil {
		return r, fmt.Errorf("report %s: %w", name, err)
	}
	r.NextProbe, r.Held = seconds(probeIn), seconds(heldIn)
	return r, nil
}

// reportUnauthorizedSQL records that the downstream refused its
// credentials: it is down at once (no other lead need fail first: the
// credentials are the destination's, not the lead's), until a call is
// accepted; its first probe comes a probe interval later.
const reportUnauthorizedSQL = `
UPDATE downstreams SET
    next_probe_at = CASE WHEN up OR NOT unauthorized THEN now() + $2 * interval '1 second' ELSE next_probe_at END,
    up = false, unauthorized = true, down_since = coalesce(down_since, now()), failures = 0, failing_leads = '{}'
WHERE name = $1
RETURNING coalesce(extract(epoch FROM next_probe_at - now()), 0)`

// ReportUnauthorized records that a call to the downstream name was
// refused its credentials: every lead bound for it waits, as in an outage
// (one probe a probeInterval), until a call is accepted again. It returns
// how long until the next probe.
func (s *Store) ReportUnauthorized(ctx context.Context, name string, probeInterval time.Duration) (time.Duration, error) {
	var in float64
	err := s.db.QueryRow(ctx, reportUnauthorizedSQL, name, probeInterval.Seconds()).Scan(&in)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return 0, fmt.Errorf("report %s unauthorized: %w", name, err)
	}
	return seconds(in), nil
}

// DownstreamState is one downstream as every worker sees it.
type DownstreamState struct {
	Name string
	Up   bool
	// Unauthorized: it is down because it refused its credentials.
	Unauthorized bool
	// DownSince is when it went down; zero while up.
	DownSince time.Time
	// Waiting counts the leads whose key is processing and that wait for
	// it; OldestWaiting is how long the longest of them has waited.
	Waiting       int
	OldestWaiting time.Duration
	// NextProbe is when a call may next probe it while down; zero while
	// up. HeldUntil is when a hold of its calls (a Retry-After) ends;
	// zero when none holds.
	NextProbe time.Time
	HeldUntil time.Time
}

// DownstreamStates returns every downstream's state and its waiting leads.
func (s *Store) DownstreamStates(ctx context.Context) ([]DownstreamState, error) {
	rows, err := s.db.Query(ctx, `
SELECT d.name, d.up, d.unauthorized, coalesce(d.down_since, 'epoch'), count(l.id),
       coalesce(extract(epoch FROM now() - min(l.waiting_since)), 0)::float8,
       coalesce(d.next_probe_at, 'epoch'), coalesce(CASE WHEN d.held_until > now() THEN d.held_until END, 'epoch')
FROM downstreams d
LEFT JOIN leads l ON l.waiting_for = d.name
    AND EXISTS (SELECT FROM idempotency_keys k
                WHERE k.client_id = l.client_id AND k.key = l.idempotency_key AND k.lead_id = l.id AND k.state = 'processing')
GROUP BY d.name, d.up, d.unauthorized, d.down_since, d.next_probe_at, d.held_until
ORDER BY d.name`)
	if err != nil {
		return nil, fmt.Errorf("downstream states: %w", err)
	}
	defer rows.Close()
	var out []DownstreamState
	for rows.Next() {
		var (
			st     DownstreamState
			oldest float64
		)
		var since, probe, held time.Time
		if err := rows.Scan(&st.Name, &st.Up, &st.Unauthorized, &since, &st.Waiting, &oldest, &probe, &held); err != nil {
			return nil, fmt.Errorf("downstream states: %w", err)
		}
		st.OldestWaiting = seconds(oldest)
		if !st.Up {
			st.DownSince, st.NextProbe = since, probe
		}
		if held.Unix() > 0 {
			st.HeldUntil = held
		}
		out = append(out, st)
	}
	return out, rows.Err()
}

// WakeWaiting makes the jobs of up to limit leads waiting for the downstream
// name available at once, oldest first, when the downstream is up (a
// recovery; the leads resume in order of arrival) or, with one lead, when
// it is down and a probe is due (that lead probes it); it returns how many
// it woke.
func (s *Store) WakeWaiting(ctx context.Context, name string, limit int) (int, error) {
	if s.jobs == nil {
		return 0, errNoJobs
	}
	var woken int
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var up, probeDue bool
		if err := tx.QueryRow(ctx, `SELECT up, coalesce(next_probe_at <= now(), false) FROM downstreams WHERE name = $1`,
			name).Scan(&up, &probeDue); err != nil {
			return err
		}
		if !up && !probeDue {
			return errNothingToCommit
		}
		if !up {
			limit = 1
		}
		rows, err := tx.Query(ctx, `
SELECT l.job_id FROM leads l
JOIN idempotency_keys k ON k.client_id = l.client_id AND k.key = l.idempotency_key AND k.lead_id = l.id
WHERE l.waiting_for = $1 AND k.state = 'processing' AND l.job_id IS NOT NULL
ORDER BY l.waiting_since, l.id
LIMIT $2`, name, limit)
		if err != nil {
			return err
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			return err
		}
		if len(ids) == 0 {
			return errNothingToCommit
		}
		woken = len(ids)
		return s.jobs.Wake(ctx, tx, ids)
	})
	if errors.Is(err, errNothingToCommit) {
		err = nil
	}
	if err != nil {
		return 0, fmt.Errorf("wake leads waiting for %s: %w", name, err)
	}
	return woken, nil
}

// callRow is a Call as the delivery log stores it (see rows.go).
type callRow struct {
	LeadID      uuid.UUID `db:"lead_id" pg:"uuid"`
	Step        string    `db:"step" pg:"text"`
	Destination *string   `db:"destination" pg:"text"`
	Kind        *string   `db:"kind" pg:"text"`
	Attempt     int32     `db:"attempt" pg:"int4"`
	StartedAt   time.Time `db:"started_at" pg:"timestamptz"`
	DurationMS  int32     `db:"duration_ms" pg:"int4"`
	Outcome     string    `db:"outcome" pg:"text"`
}

var insertCallsSQL = `
INSERT INTO lead_calls (` + columnList[callRow]("") + `)
SELECT ` + columnList[callRow]("r.") + ` FROM ` + unnestRows[callRow]("r")

func callRows(calls []Call) []callRow {
	rows := make([]callRow, len(calls))
	for i, c := range calls {
		rows[i] = callRow{
			LeadID: c.LeadID, Step: c.Step, Destination: nullIfEmpty(c.Destination), Kind: nullIfEmpty(c.Kind),
			Attempt: int32(c.Attempt), StartedAt: c.StartedAt,
			DurationMS: int32(c.Duration.Milliseconds()), Outcome: c.Outcome,
		}
	}
	return rows
}

// LogCalls adds calls to the delivery log.
func (s *Store) LogCalls(ctx context.Context, calls []Call) error {
	if len(calls) == 0 {
		return nil
	}
	if _, err := s.db.Exec(ctx, insertCallsSQL, rowArgs(callRows(calls), nil)); err != nil {
		return fmt.Errorf("log calls: %w", err)
	}
	return nil
}

// Calls returns the delivery log of a lead, oldest first.
func (s *Store) Calls(ctx context.Context, leadID uuid.UUID) ([]Call, error) {
	rows, err := s.db.Query(ctx, `
SELECT lead_id, step, coalesce(destination, CASE WHEN step LIKE 'crm%' THEN 'crm' ELSE step END),
       coalesce(kind, 'http'),
       attempt, started_at, duration_ms, outcome
FROM lead_calls WHERE lead_id = $1 ORDER BY id`, leadID)
	if err != nil {
		return nil, fmt.Errorf("calls of lead %s: %w", leadID, err)
	}
	defer rows.Close()
	var out []Call
	for rows.Next() {
		var (
			c  Call
			ms int32
		)
		if err := rows.Scan(&c.LeadID, &c.Step, &c.Destination, &c.Kind, &c.Attempt, &c.StartedAt, &ms, &c.Outcome); err != nil {
			return nil, fmt.Errorf("calls of lead %s: %w", leadID, err)
		}
		c.Duration = time.Duration(ms) * time.Millisecond
		out = append(out, c)
	}
	return out, rows.Err()
}
