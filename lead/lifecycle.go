package lead

import (
	"time"

	"github.com/leadintake/leadintake/response"
)

// Mode is how the CRM step writes a lead.
type Mode string

// CRM modes.
const (
	// ModeUpsert puts the lead under its external reference: safe to
	// repeat.
	ModeUpsert Mode = "upsert"
	// ModeCreate posts the lead, and looks the reference up before it ever
	// posts again after an outcome that may have been applied.
	ModeCreate Mode = "create"
)

// Enrichment is the enrichment step's state, as stored in
// leads.enrichment_outcome (NULL while pending).
type Enrichment string

// Enrichment states.
const (
	EnrichmentPending     Enrichment = ""
	EnrichmentData        Enrichment = "data"
	EnrichmentNoData      Enrichment = "no_data"
	EnrichmentUnavailable Enrichment = "unavailable"
)

// CRM is the CRM step's state, as stored in leads.crm_state.
type CRM string

// CRM states.
const (
	// CRMPending: nothing sent, or nothing that may have been applied.
	CRMPending CRM = "pending"
	// CRMUncertain: a post may have been applied; look the reference up
	// before posting again. Written ahead of every post.
	CRMUncertain CRM = "uncertain"
	CRMAccepted  CRM = "accepted"
	CRMRejected  CRM = "rejected"
)

// Notification is the notification step's state, as stored in
// leads.notify_outcome (NULL while pending): every channel's, once each
// has accepted or been given up.
type Notification string

// Notification states.
const (
	NotificationPending Notification = ""
	// NotificationSent: every channel accepted.
	NotificationSent Notification = "sent"
	// NotificationFailed: a channel was given up.
	NotificationFailed Notification = "failed"
	// NotificationNone: the lead's client has no channel (notify: []).
	NotificationNone Notification = "none"
)

// MaxChannels bounds the notification channels of a lead.
const MaxChannels = 5

// ChannelState is one channel's state for a lead.
type ChannelState string

// Channel states.
const (
	ChannelPending ChannelState = ""
	// ChannelUncertain: a message may have been sent: a channel that can
	// find its messages looks before it sends again. Written ahead of
	// every send of such a channel.
	ChannelUncertain ChannelState = "uncertain"
	ChannelSent      ChannelState = "sent"
	ChannelFailed    ChannelState = "failed"
)

// Channel is what is saved of one notification channel of a lead.
type Channel struct {
	// Name is the channel's destination.
	Name     string
	State    ChannelState
	Failures int
	// Receipt is what the channel returned of its message (Slack's ts),
	// to update it for an amendment.
	Receipt string
	// Since is when (Unix seconds) the first send that may have been
	// applied started: a look-up for the message looks from then.
	Since int64
}

// done reports whether the channel accepted or was given up.
func (c *Channel) done() bool { return c.State == ChannelSent || c.State == ChannelFailed }

// State is what is saved of a lead between its steps. Each call's result is
// saved before the next call starts, so that a later attempt resumes instead
// of calling again.
type State struct {
	Enrichment         Enrichment
	EnrichmentFailures int
	// CRMDestination is the destination the lead's record is written
	// to, chosen at its first CRM step (Input.CRMDestination) and kept: a
	// write that may have been applied is looked up where it was made.
	CRMDestination string
	CRM            CRM
	CRMID          string
	// CRMPrepared is what the CRM's preparing step gave (Pipedrive's
	// person); empty until it ran, for a kind that prepares.
	CRMPrepared  string
	Notification Notification
	// ChannelsSet is true once the lead's channels are chosen (at its
	// first notification step, from Input.Channels); Channels are their
	// states, in the client's order.
	ChannelsSet bool
	Channels    [MaxChannels]Channel
	// CRMNotUpdated is set when an amendment, in create mode, found its
	// reference's record already there: it is not posted again, and the
	// lead completes with the warning crm_not_updated.
	CRMNotUpdated bool
	// RefUsedBefore is true when an earlier lead used this lead's external
	// reference (its key expired and was submitted again, or this lead
	// amends another): the CRM may hold a record under it, so create mode
	// looks it up before posting. It is read, never written.
	RefUsedBefore bool
	// Amendment is the lead's number along a chain of amendments (1 for
	// the first), 0 for a lead that amends nothing. It is read, never
	// written.
	Amendment int
	// SupersededUnfinished is true while the key this lead amends is
	// unfinished (processing, or awaiting reconciliation): the amendment
	// makes no CRM call until it finishes. It is read, never written.
	SupersededUnfinished bool
	// PossibleDuplicate is true when an earlier lead of the client, under
	// another key, has the same email and content: the lead completes with
	// the warning possible_duplicate. It is read, never written.
	PossibleDuplicate bool
	// ChainCRMID is the CRM's id of the record of the lead this one amends,
	// when it was accepted; empty otherwise. It is read, never written.
	ChainCRMID string
	// Owner is the lead's owner (a name of its client's owners), chosen
	// once (OwnerDecided) before its first CRM step: empty when no rule
	// matched or every owner of the pool was away.
	Owner        string
	OwnerDecided bool
	// ChainOwner is the owner of the lead this one amends, when it was
	// decided (ChainOwnerDecided): an amendment keeps its chain's owner.
	// They are read, never written.
	ChainOwner        string
	ChainOwnerDecided bool
}

// Enriched reports whether the enrichment returned data.
func (s State) Enriched() bool { return s.Enrichment == EnrichmentData }

// Warnings are the codes of the optional steps given up, for a completed
// lead's response.
func (s State) Warnings() []string {
	w := []string{}
	if s.Enrichment == EnrichmentUnavailable {
		w = append(w, response.WarnEnrichmentUnavailable)
	}
	if s.Notification == NotificationFailed {
		w = append(w, response.WarnNotificationFailed)
	}
	if s.CRMNotUpdated {
		w = append(w, response.WarnCRMNotUpdated)
	}
	if s.PossibleDuplicate {
		w = append(w, response.WarnPossibleDuplicate)
	}
	return w
}

// Kind names an action.
type Kind int

// The actions.
const (
	// ActEnrich asks the enrichment service.
	ActEnrich Kind = iota + 1
	// ActUpsert puts the lead to the CRM under its reference.
	ActUpsert
	// ActLookup looks the reference up in the CRM.
	ActLookup
	// ActCreate posts the lead to the CRM; the state saved before it says
	// CRMUncertain.
	ActCreate
	// ActNotify notifies sales.
	ActNotify
	// ActFinish records the lead's final response (Action.Outcome).
	ActFinish
	// ActReconcile leaves the key to reconciliation: a post may have been
	// applied and no look-up could settle it.
	ActReconcile
	// ActRetry ends the attempt; another follows after Action.RetryAfter,
	// or the retry policy's delay when that is zero.
	ActRetry
	// ActStop ends the attempt without spending it: the worker is stopping.
	ActStop
	// ActAwaitSuperseded ends the attempt without spending it, to try again
	// once the key this amendment supersedes has finished.
	ActAwaitSuperseded
	// ActSkip ends the attempt with nothing to do: the key is not
	// processing (an earlier run finished it and this job's completion was
	// lost, it awaits reconciliation, it expired and was deleted) or the
	// lead's personal data was erased.
	ActSkip
	// ActWait ends the attempt without spending it: the downstream of
	// Action.Waits is down, holds every call, or has no room in its rate
	// limit. The lead tries again after Action.RetryAfter, or when the
	// downstream recovers.
	ActWait
	// ActUpdate writes the lead over the CRM record Action.CRMID: the
	// record of the amendment's chain, or one a look-up found.
	ActUpdate
	// ActFind looks for the message channel Action.Channel may have sent
	// (a send whose outcome is uncertain).
	ActFind
	// ActPrepare runs the CRM's preparing step (CRMCapabilities.Prepares).
	ActPrepare
)

var kindNames = [...]string{"", "enrich", "upsert", "lookup", "create", "notify", "finish", "reconcile", "retry", "stop", "await_superseded", "skip", "wait", "update", "find", "prepare"}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "unknown"
}

// Calls reports whether the action makes a downstream call.
func (k Kind) Calls() bool {
	switch k {
	case ActEnrich, ActUpsert, ActLookup, ActCreate, ActNotify, ActUpdate, ActFind, ActPrepare:
		return true
	}
	return false
}

// Acts reports whether the action's call may change something downstream,
// or decides on the CRM's record or a message: such a call needs the lead
// held by the run that makes it (Input.Held). An enrichment look-up only
// reads.
func (k Kind) Acts() bool { return k.Calls() && k != ActEnrich }

// CRMStep reports whether the action is a call of the CRM step.
func (k Kind) CRMStep() bool {
	switch k {
	case ActUpsert, ActLookup, ActCreate, ActUpdate, ActPrepare:
		return true
	}
	return false
}

// Save says whether, and how, the state is saved before an action runs.
type Save int

// Saves.
const (
	// SaveNone: nothing to save.
	SaveNone Save = iota
	// SaveLazy: saved before the action runs, without waiting for the disk
	// (the worker's sessions run with synchronous_commit off). A save lost
	// to a crash of PostgreSQL makes the lead do a step again, which every
	// step allows (an enrichment look-up, an upsert under the external
	// reference, a notification with its Idempotency-Key) except a POST in
	// create mode.
	SaveLazy
	// SaveDurable: on disk before the action runs: the save written ahead
	// of a POST in create mode, whose record must never be forgotten.
	SaveDurable
	// SaveCheck: nothing written, but the run's hold on the lead checked
	// before the action runs (no later run took it, its personal data is
	// not erased): the state since the last save holds only the result
	// of an upsert, which a crash may make the lead repeat, under the
	// same external reference. The next save, or the finish, writes it.
	SaveCheck
)

// Outcome is how a finished lead ended.
type Outcome string

// Outcomes of ActFinish.
const (
	OutcomeCompleted             Outcome = "completed"
	OutcomeCRMRejected           Outcome = "crm_rejected"
	OutcomeDownstreamUnavailable Outcome = "downstream_unavailable"
)

// Action is what to do next.
type Action struct {
	Kind Kind
	// Outcome is the end of ActFinish.
	Outcome Outcome
	// RetryAfter is the delay a downstream asked for, for ActRetry; zero
	// leaves it to the retry policy.
	RetryAfter time.Duration
	// AfterConflict marks the ActLookup that follows a 409 to a post: a
	// record the CRM says exists but cannot find is asked about again
	// later, never posted at once.
	AfterConflict bool
	// Save is how the state Next returns is saved before the action runs.
	Save Save
	// Waits is the call an ActWait waits to make.
	Waits Kind
	// Channel is the channel (an index of State.Channels) of ActNotify
	// and ActFind, and of an ActWait for one.
	Channel int
	// CRMID is the record ActUpdate writes over.
	CRMID string
	// Assign: the lead's owner is chosen by the save before this action
	// (the lead's first CRM step), from its client's rules, and the turn
	// kept in the database.
	Assign bool
}

// Hold says that a downstream holds back a call for every lead alike, not
// for this lead's sake: the failure, or the call not made, spends none of
// the lead's attempts.
type Hold int

// Holds.
const (
	HoldNone Hold = iota
	// HoldDown: the downstream is down: its calls fail for every lead
	// (one lead's call probes it now and then).
	HoldDown
	// HoldCalls: the downstream asked, with a 429 or 503 and a Retry-After,
	// that nobody call it for a while.
	HoldCalls
	// HoldRate: the downstream's rate limit has no room for the call yet.
	HoldRate
	// HoldShared: the call failed, and another lead's call failed after
	// this lead's first failure, with no success between: an outage,
	// perhaps, not found yet. The failure is not the lead's own; it waits
	// a moment (RetryAfter) and tries again.
	HoldShared
	// HoldUnauthorized: the downstream refused its credentials: until a
	// call is accepted again (a corrected configuration), every lead bound
	// for it waits, as in an outage.
	HoldUnauthorized
)

// Failure is a failed call, classified.
type Failure struct {
	// Transient failures are worth another attempt; the others are a
	// verdict.
	Transient bool
	// Uncertain: the request may have been applied (a time-out, a broken
	// connection, a 5xx).
	Uncertain bool
	// Conflict: the CRM answered 409 to a post (the record exists).
	Conflict bool
	// Unauthorized: the downstream refused its credentials (until the
	// shared state makes it a Hold, HoldUnauthorized).
	Unauthorized bool
	// RetryAfter is the delay the downstream asked for.
	RetryAfter time.Duration
	// Stopping: the call was cut short because the worker is stopping.
	Stopping bool
	// Hold, when not HoldNone, says the failure is the downstream's (or the
	// call was not made, NotSent): RetryAfter is then how long it holds.
	Hold    Hold
	NotSent bool
}

// Result is what the last action's call came back with.
type Result struct {
	Action Action
	// Failure is nil on success.
	Failure *Failure
	// Found is true when the enrichment returned data, or the look-up a
	// record.
	Found bool
	// CRMID is the CRM's id of the record, after an upsert, a post, an
	// update or a look-up that found it.
	CRMID string
	// Receipt is what a channel returned of its message (a send, or a
	// find that found it).
	Receipt string
	// Prepared is what the CRM's preparing step gave.
	Prepared string
}

// Input is what a transition needs besides the saved state.
type Input struct {
	// Key is the lead's key as the attempt found it: nothing is done for a
	// key that is not processing, nor for an erased lead.
	Key Key
	// CRM are the capabilities of the lead's CRM destination.
	CRM CRMCapabilities
	// CRMDestination is the CRM destination the lead's client writes to
	// now: the lead's own, unless it chose one already.
	CRMDestination string
	// Channels are the notification channels of the lead's client now:
	// the lead's, unless it chose them already. ChannelCaps are the
	// capabilities of the lead's channels, by their index in
	// State.Channels.
	Channels    []string
	ChannelCaps [MaxChannels]ChannelCapabilities
	// Tried is each channel whose call failed, or was held back, in this
	// attempt: it is not tried again before the attempt ends. The worker
	// keeps it, from the results it passes in Last.
	Tried [MaxChannels]Tried
	// Now is the time (Unix seconds) a send written ahead is recorded at.
	Now int64
	// LastAttempt is true on the job's last attempt: a transient failure
	// then ends the lead instead of asking for a retry.
	LastAttempt bool
	// Last is the result of the action just run; nil at the start of an
	// attempt.
	Last *Result
	// Held is true once a save of this attempt took the lead: its writes
	// fence out every earlier run. Every call that acts needs it.
	Held bool
	// DeliveryExpired is true once the lead's delivery started
	// DELIVERY_MAX_AGE ago: a lead held back by a downstream then ends as
	// at the end of its attempts.
	DeliveryExpired bool
}

// Note makes r the last result, and records in Tried what it means for the
// rest of the attempt: a channel whose call failed or was held back is not
// tried again before the attempt ends.
func (in *Input) Note(r *Result) {
	in.Last = r
	if f := r.Failure; f != nil && !f.Stopping && (r.Action.Kind == ActNotify || r.Action.Kind == ActFind) {
		in.Tried[r.Action.Channel] = Tried{Tried: true, Held: f.Hold != HoldNone, Retry: f.Hold == HoldNone, RetryAfter: f.RetryAfter}
	}
}

// Tried is a channel's failed or held call in the current attempt.
type Tried struct {
	Tried bool
	// Held: its destination held it back (down, refused credentials,
	// holding calls, rate); RetryAfter is then how long.
	Held bool
	// Retry: it failed and is worth another attempt, after RetryAfter
	// (zero: the retry policy's).
	Retry      bool
	RetryAfter time.Duration
}

// Optional steps (the enrichment, the notification) are given up, with a
// warning, after optionalStepAttempts transient failures, or at once when
// the service asks to wait longer than optionalStepMaxWait: their failures
// never fail a lead, nor hold it back for long.
const (
	optionalStepAttempts = 3
	optionalStepMaxWait  = time.Minute
)

// Next is the life of a lead: from its saved state and the result of the
// last call, the next action, the state to save before running it, and how
// to save it (Action.Save). It is pure: no database, no network, no clock.
//
// The state is saved whenever it changed, before the lead's first CRM step
// (whose save chooses its owner: Action.Assign), and before every call but
// an attempt's first enrichment look-up: a call after another needs a save
// between them (which finds out, before the call, whether a later run took
// the lead or its personal data was erased), and the first call that acts
// takes the lead for this run. The notification after an upsert that
// succeeded only checks the run's hold (SaveCheck). A write that may be
// applied and whose repeat is not safe (a create, a send of a channel that
// looks for its messages) is written ahead durably (SaveDurable). The end
// of a lead (ActFinish, ActReconcile) is not saved before: the finish
// writes the state itself, in the same transaction as the key's end.
func Next(s State, in Input) (Action, State) {
	act, next := decide(s, in)
	if act.Kind == ActFinish || act.Kind == ActReconcile {
		return act, next
	}
	if next != s || act.Assign || act.Kind == ActWait || (in.Last != nil && act.Kind.Calls()) || (!in.Held && act.Kind.Acts()) {
		switch {
		case act.Kind == ActCreate, act.Kind == ActNotify && in.ChannelCaps[act.Channel].Find:
			act.Save = SaveDurable
		case act.Kind == ActNotify && in.Held && in.Last != nil && in.Last.Action.Kind == ActUpsert && in.Last.Failure == nil && !act.Assign:
			act.Save = SaveCheck
		default:
			act.Save = SaveLazy
		}
	}
	return act, next
}

// decide is Next without the save.
func decide(s State, in Input) (Action, State) {
	if in.Key.State != KeyProcessing || in.Key.Erased {
		return Action{Kind: ActSkip}, s
	}
	if r := in.Last; r != nil {
		if r.Failure != nil && r.Failure.Stopping {
			return Action{Kind: ActStop}, s
		}
		var act *Action
		s, act = apply(s, in, r)
		if act != nil {
			return *act, s
		}
	}
	return plan(s, in)
}

// apply records the result of a call in the state; it returns an action
// when the result decides one, and nil to go on with the plan.
func apply(s State, in Input, r *Result) (State, *Action) {
	f := r.Failure
	if f != nil && f.Hold != HoldNone {
		return held(s, in, r)
	}
	switch r.Action.Kind {
	case ActEnrich:
		switch {
		case f == nil && r.Found:
			s.Enrichment = EnrichmentData
		case f == nil:
			s.Enrichment = EnrichmentNoData
		case retryOptional(f, in.LastAttempt, s.EnrichmentFailures):
			s.EnrichmentFailures++
			return s, &Action{Kind: ActRetry, RetryAfter: f.RetryAfter}
		default:
			s.Enrichment = EnrichmentUnavailable
		}
	case ActPrepare:
		switch {
		case f == nil:
			s.CRMPrepared = r.Prepared
		case !f.Transient:
			s.CRM = CRMRejected
			return s, &Action{Kind: ActFinish, Outcome: OutcomeCRMRejected}
		default:
			return fail(s, in, f)
		}
	case ActUpsert, ActUpdate:
		switch {
		case f == nil:
			s.CRM, s.CRMID = CRMAccepted, r.CRMID
		case !f.Transient:
			s.CRM = CRMRejected
			return s, &Action{Kind: ActFinish, Outcome: OutcomeCRMRejected}
		default:
			return fail(s, in, f)
		}
	case ActLookup:
		switch {
		case f == nil && r.Found && s.CRM == CRMPending && in.CRM.UpdateByID:
			// A record made under the reference by an earlier lead (the
			// one amended, or one whose key expired): written over with
			// this lead.
			return s, &Action{Kind: ActUpdate, CRMID: r.CRMID}
		case f == nil && r.Found:
			// An amendment that finds the record before it posted
			// anything leaves it as it is.
			s.CRMNotUpdated = s.Amendment > 0 && s.CRM == CRMPending
			s.CRM, s.CRMID = CRMAccepted, r.CRMID
		case f != nil:
			// A look-up never decides the lead's fate, only whether a
			// record exists: any failure of it is worth another try.
			return fail(s, in, &Failure{Transient: true, Uncertain: true, RetryAfter: f.RetryAfter})
		case r.Action.AfterConflict, !in.CRM.ConsistentLookup:
			// Not found, by a look-up that may lag behind the write, or
			// after the CRM said the record exists: asked again later.
			return fail(s, in, &Failure{Transient: true, Uncertain: true})
		default:
			// A definite 404: nothing was applied. Post, written ahead as
			// uncertain.
			s.CRM = CRMUncertain
			return s, &Action{Kind: ActCreate}
		}
	case ActCreate:
		switch {
		case f == nil:
			s.CRM, s.CRMID = CRMAccepted, r.CRMID
		case f.Conflict:
			return s, &Action{Kind: ActLookup, AfterConflict: true}
		case !f.Transient:
			s.CRM = CRMRejected
			return s, &Action{Kind: ActFinish, Outcome: OutcomeCRMRejected}
		default:
			if !f.Uncertain {
				s.CRM = CRMPending // certainly not applied
			}
			return fail(s, in, f)
		}
	case ActNotify, ActFind:
		c := &s.Channels[r.Action.Channel]
		switch {
		case f == nil && (r.Action.Kind == ActNotify || r.Found):
			c.State, c.Receipt = ChannelSent, r.Receipt
		case f == nil:
			// Not found: nothing was sent; send it (written ahead again).
			c.State = ChannelPending
		case !f.Transient:
			c.State = ChannelFailed
		case retryOptional(f, in.LastAttempt, c.Failures):
			c.Failures++
			if r.Action.Kind == ActNotify && !f.Uncertain {
				c.State = ChannelPending // certainly not sent
			}
		default:
			c.State = ChannelFailed
		}
	}
	return s, nil
}

// held decides what a call held back by its downstream (Failure.Hold)
// means: the lead waits, spending no attempt, for as long as the downstream
// says, unless its delivery is past DELIVERY_MAX_AGE: then it ends as at
// the end of its attempts. The enrichment is optional: it is skipped while
// its service is down or refuses its credentials, and given up when it
// would wait longer than optionalStepMaxWait. A channel held back lets the
// others go on (see plan).
func held(s State, in Input, r *Result) (State, *Action) {
	f := r.Failure
	wait := &Action{Kind: ActWait, RetryAfter: f.RetryAfter, Waits: r.Action.Kind}
	switch r.Action.Kind {
	case ActEnrich:
		if f.Hold == HoldDown || f.Hold == HoldUnauthorized || in.DeliveryExpired || f.RetryAfter > optionalStepMaxWait {
			s.Enrichment = EnrichmentUnavailable
			return s, nil
		}
		return s, wait
	case ActNotify, ActFind:
		if in.DeliveryExpired {
			s.Channels[r.Action.Channel].State = ChannelFailed
		}
		return s, nil
	default: // the CRM
		if in.DeliveryExpired {
			last := in
			last.LastAttempt = true
			return fail(s, last, f)
		}
		return s, wait
	}
}

// plan returns the next step of a lead whose last result, if any, left the
// choice to its state.
func plan(s State, in Input) (Action, State) {
	act, s := planStep(s, in)
	if !act.Kind.CRMStep() {
		return act, s
	}
	if s.CRMDestination == "" {
		s.CRMDestination = in.CRMDestination
	}
	switch {
	case s.OwnerDecided:
	case s.Amendment > 0 && s.ChainOwnerDecided:
		s.Owner, s.OwnerDecided = s.ChainOwner, true
	default:
		act.Assign = true
	}
	return act, s
}

func planStep(s State, in Input) (Action, State) {
	caps := in.CRM
	switch {
	case s.Enrichment == EnrichmentPending:
		return Action{Kind: ActEnrich}, s
	case s.CRM == CRMRejected:
		return Action{Kind: ActFinish, Outcome: OutcomeCRMRejected}, s
	case s.CRM != CRMAccepted && s.Amendment > 0 && s.SupersededUnfinished:
		// Whatever the superseded lead still does to the CRM record, the
		// amendment's write must come after it.
		return Action{Kind: ActAwaitSuperseded}, s
	case s.CRM != CRMAccepted && caps.Prepares && s.CRMPrepared == "":
		return Action{Kind: ActPrepare}, s
	case s.CRM == CRMPending && s.Amendment > 0 && s.ChainCRMID != "" && caps.UpdateByID:
		// The chain's record is known: written over, whatever the lead's
		// members now say (an email changed, say).
		return Action{Kind: ActUpdate, CRMID: s.ChainCRMID}, s
	case s.CRM != CRMAccepted && caps.Upsert:
		return Action{Kind: ActUpsert}, s
	case s.CRM == CRMUncertain, s.CRM == CRMPending && s.RefUsedBefore:
		// Never post while an earlier post, of this lead or of an earlier
		// one under the same reference, may have been applied.
		return Action{Kind: ActLookup}, s
	case s.CRM != CRMAccepted:
		s.CRM = CRMUncertain // written ahead of the post
		return Action{Kind: ActCreate}, s
	case s.Notification == NotificationPending:
		return notify(s, in)
	default:
		return Action{Kind: ActFinish, Outcome: OutcomeCompleted}, s
	}
}

// notify plans the notification step: the lead's channels, chosen at its
// first notification step, each sent once, in order. A channel tried in
// this attempt is not tried again before the attempt ends: one channel's
// failure or outage holds back neither the others nor the ones after it.
// When every channel accepted or was given up, the step ends; when some
// are left, the attempt ends: a retry when one failed, a wait when all
// that are left are held back.
func notify(s State, in Input) (Action, State) {
	if !s.ChannelsSet {
		s.ChannelsSet = true
		for i, name := range in.Channels[:min(len(in.Channels), MaxChannels)] {
			s.Channels[i] = Channel{Name: name}
		}
	}
	var (
		left, retry bool
		retryAfter  time.Duration
		wait        = -1
	)
	for i := range s.Channels {
		c := &s.Channels[i]
		if c.Name == "" || c.done() {
			continue
		}
		left = true
		t := in.Tried[i]
		switch {
		case !t.Tried && c.State == ChannelUncertain && in.ChannelCaps[i].Find:
			return Action{Kind: ActFind, Channel: i}, s
		case !t.Tried:
			if in.ChannelCaps[i].Find {
				// Written ahead: a message may be sent from now on.
				c.State = ChannelUncertain
				if c.Since == 0 {
					c.Since = in.Now
				}
			}
			return Action{Kind: ActNotify, Channel: i}, s
		case t.Retry:
			retry, retryAfter = true, max(retryAfter, t.RetryAfter)
		case t.Held && (wait < 0 || t.RetryAfter < in.Tried[wait].RetryAfter):
			wait = i
		}
	}
	switch {
	case retry:
		return Action{Kind: ActRetry, RetryAfter: retryAfter}, s
	case left && wait >= 0:
		return Action{Kind: ActWait, RetryAfter: in.Tried[wait].RetryAfter, Waits: ActNotify, Channel: wait}, s
	case left:
		// Tried, neither failed nor held: cannot be, but never loop.
		return Action{Kind: ActRetry}, s
	}
	s.Notification = notificationOf(&s)
	return Action{Kind: ActFinish, Outcome: OutcomeCompleted}, s
}

// notificationOf is the notification step's end, from its channels'.
func notificationOf(s *State) Notification {
	n, sent := 0, 0
	for _, c := range s.Channels {
		switch {
		case c.Name == "":
			continue
		case c.State == ChannelSent:
			sent++
		}
		n++
	}
	switch {
	case n == 0:
		return NotificationNone
	case sent == n:
		return NotificationSent
	default:
		return NotificationFailed
	}
}

// fail decides what a transient failure of a required step means: another
// attempt, or, on the last one, the end: reconciliation when a post may have
// been applied, a failure that a retry of the key re-opens otherwise.
func fail(s State, in Input, f *Failure) (State, *Action) {
	switch {
	case !in.LastAttempt:
		return s, &Action{Kind: ActRetry, RetryAfter: f.RetryAfter}
	case s.CRM == CRMUncertain:
		return s, &Action{Kind: ActReconcile}
	default:
		return s, &Action{Kind: ActFinish, Outcome: OutcomeDownstreamUnavailable}
	}
}

// retryOptional reports whether an optional step's failure is worth another
// attempt: transient, not on the last attempt, within the step's budget, and
// not asking for a wait longer than optionalStepMaxWait.
func retryOptional(f *Failure, last bool, failures int) bool {
	return f.Transient && !last && failures+1 < optionalStepAttempts && f.RetryAfter <= optionalStepMaxWait
}

// Abandoned is the end of a lead whose job ended without recording one (a
// crash on its last attempt, a job cancelled or deleted by an operator): the
// end its last attempt would have given it. A lead the CRM accepted
// completes (a channel not known to have accepted counts as given up); one
// whose post may have been applied goes to reconciliation; any other fails,
// and a retry of its key re-opens it.
func Abandoned(s State) (Action, State) {
	switch s.CRM {
	case CRMAccepted:
		if s.Notification == NotificationPending {
			for i := range s.Channels {
				if c := &s.Channels[i]; c.Name != "" && !c.done() {
					c.State = ChannelFailed
				}
			}
			s.Notification = notificationOf(&s)
			if !s.ChannelsSet {
				s.Notification = NotificationFailed
			}
		}
		return Action{Kind: ActFinish, Outcome: OutcomeCompleted}, s
	case CRMUncertain:
		return Action{Kind: ActReconcile}, s
	case CRMRejected:
		return Action{Kind: ActFinish, Outcome: OutcomeCRMRejected}, s
	default:
		return Action{Kind: ActFinish, Outcome: OutcomeDownstreamUnavailable}, s
	}
}

// Settle applies what was learnt of a lead awaiting reconciliation, by the
// reconciler's look-up or by an operator: a record found is the CRM's
// acceptance (the lead resumes at its notification); none (a definite 404)
// means nothing was applied (the lead resumes at its CRM step and posts
// again).
func Settle(s State, found bool, crmID string) State {
	if found {
		s.CRM, s.CRMID = CRMAccepted, crmID
	} else {
		s.CRM = CRMPending
	}
	return s
}
