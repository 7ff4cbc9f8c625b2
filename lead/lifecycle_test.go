package lead_test

import (
	"testing"
	"time"

	"github.com/leadintake/leadintake/lead"
)

// Shorthands for the table.
var (
	ok        = (*lead.Failure)(nil)
	transient = &lead.Failure{Transient: true}
	uncertain = &lead.Failure{Transient: true, Uncertain: true}
	permanent = &lead.Failure{}
	conflict  = &lead.Failure{Transient: true, Uncertain: true, Conflict: true}
	stopping  = &lead.Failure{Transient: true, Uncertain: true, Stopping: true}
	waitLong  = &lead.Failure{Transient: true, RetryAfter: 2 * time.Minute}
	waitShort = &lead.Failure{Transient: true, RetryAfter: 30 * time.Second}
	// down, heldLong and notSent are held back by the downstream, for
	// every lead alike.
	down     = &lead.Failure{Transient: true, Uncertain: true, Hold: lead.HoldDown, RetryAfter: 30 * time.Second}
	heldLong = &lead.Failure{Transient: true, Hold: lead.HoldCalls, RetryAfter: 2 * time.Minute}
	notSent  = &lead.Failure{Transient: true, Hold: lead.HoldRate, NotSent: true, RetryAfter: 5 * time.Second}
	// shared failed after another lead's call failed, since this lead's
	// first failure, before an outage is found.
	shared = &lead.Failure{Transient: true, Uncertain: true, Hold: lead.HoldShared, RetryAfter: time.Second}
)

func wait(k lead.Kind, d time.Duration) lead.Action {
	return lead.Action{Kind: lead.ActWait, RetryAfter: d, Waits: k}
}

func act(k lead.Kind) lead.Action { return lead.Action{Kind: k} }

func finish(o lead.Outcome) lead.Action { return lead.Action{Kind: lead.ActFinish, Outcome: o} }

// enriched is a state past its enrichment, before the CRM.
var enriched = lead.State{Enrichment: lead.EnrichmentData, CRM: lead.CRMPending, CRMDestination: "crm", OwnerDecided: true}

// accepted is a state past the CRM, before the notification.
var accepted = lead.State{Enrichment: lead.EnrichmentData, CRM: lead.CRMAccepted, CRMID: "crm_1", CRMDestination: "crm", OwnerDecided: true}

// notifying is accepted with its one channel chosen.
var notifying = with(accepted, func(s *lead.State) { s.ChannelsSet = true; s.Channels[0].Name = "notification" })

// channel returns s with its first channel's state edited.
func channel(s lead.State, edit func(*lead.Channel)) lead.State {
	edit(&s.Channels[0])
	return s
}

// CRM capabilities: upsert and create modes of the http kind.
var (
	upsert = lead.CRMCapabilities{Upsert: true, ConsistentLookup: true}
	create = lead.CRMCapabilities{ConsistentLookup: true}
)

// input is the Input of a table's case: one channel, "notification".
func input(caps lead.CRMCapabilities) lead.Input {
	return lead.Input{Key: processing, CRM: caps, CRMDestination: "crm", Channels: []string{"notification"}}
}

func with(s lead.State, edit func(*lead.State)) lead.State {
	edit(&s)
	return s
}

func TestNext(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		mode lead.CRMCapabilities
		last bool // the job's last attempt
		// expired: the lead's delivery started DELIVERY_MAX_AGE ago.
		expired bool
		s       lead.State
		// ran and got are the last action and its result; ran.Kind 0
		// starts an attempt.
		ran       lead.Action
		failure   *lead.Failure
		found     bool
		wantAct   lead.Action
		wantState lead.State
	}{
		// The start of an attempt resumes at the first unfinished step.
		{name: "NewLeadIsEnriched", mode: upsert, s: lead.State{CRM: lead.CRMPending, CRMDestination: "crm", OwnerDecided: true},
			wantAct: act(lead.ActEnrich), wantState: lead.State{CRM: lead.CRMPending, CRMDestination: "crm", OwnerDecided: true}},
		{name: "EnrichedLeadGoesToTheCRM", mode: upsert, s: enriched, wantAct: act(lead.ActUpsert), wantState: enriched},
		{name: "AcceptedLeadChoosesItsChannelsAndIsNotified", mode: create, s: accepted, wantAct: act(lead.ActNotify), wantState: notifying},
		{name: "NotifiedLeadCompletes", mode: upsert, s: with(accepted, func(s *lead.State) { s.Notification = lead.NotificationSent }),
			wantAct: finish(lead.OutcomeCompleted), wantState: with(accepted, func(s *lead.State) { s.Notification = lead.NotificationSent })},
		{name: "CreateIsWrittenAheadAsUncertain", mode: create, s: enriched,
			wantAct: act(lead.ActCreate), wantState: with(enriched, func(s *lead.State) { s.CRM = lead.CRMUncertain })},
		{name: "UncertainLeadIsLookedUpFirst", mode: create, s: with(enriched, func(s *lead.State) { s.CRM = lead.CRMUncertain }),
			wantAct: act(lead.ActLookup), wantState: with(enriched, func(s *lead.State) { s.CRM = lead.CRMUncertain })},
		{name: "ReusedReferenceIsLookedUpFirst", mode: create, s: with(enriched, func(s *lead.State) { s.RefUsedBefore = true }),
			wantAct: act(lead.ActLookup), wantState: with(enriched, func(s *lead.State) { s.RefUsedBefore = true })},
		{name: "UpsertNeedsNoLookUp", mode: upsert, s: with(enriched, func(s *lead.State) { s.CRM = lead.CRMUncertain; s.RefUsedBefore = true }),
			wantAct: act(lead.ActUpsert), wantState: with(enriched, func(s *lead.State) { s.CRM = lead.CRMUncertain; s.RefUsedBefore = true })},

		// Enrichment.
		{name: "EnrichmentData", mode: upsert, s: lead.State{CRM: lead.CRMPending, CRMDestination: "crm", OwnerDecided: true}, ran: act(lead.ActEnrich), failure: ok, found: true,
			wantAct: act(lead.ActUpsert), wantState: enriched},
		{name: "EnrichmentNoData", mode: upsert, s: lead.State{CRM: lead.CRMPending, CRMDestination: "crm", OwnerDecided: true}, ran: act(lead.ActEnrich), failure: ok,
			wantAct: act(lead.ActUpsert), wantState: lead.State{Enrichment: lead.EnrichmentNoData, CRM: lead.CRMPending, CRMDestination: "crm", OwnerDecided: true}},
		{name: "EnrichmentFailureRetried", mode: upsert, s: lead.State{CRM: lead.CRMPending, CRMDestination: "crm", OwnerDecided: true}, ran: act(lead.ActEnrich), failure: transient,
			wantAct: act(lead.ActRetry), wantState: lead.State{CRM: lead.CRMPending, CRMDestination: "crm", OwnerDecided: true, EnrichmentFailures: 1}},
		{name: "EnrichmentRetryAfterHonoured", mode: upsert, s: lead.State{CRM: lead.CRMPending, CRMDestination: "crm", OwnerDecided: true}, ran: act(lead.ActEnrich), failure: waitShort,
			wantAct: lead.Action{Kind: lead.ActRetry, RetryAfter: 30 * time.Second}, wantState: lead.State{CRM: lead.CRMPending, CRMDestination: "crm", OwnerDecided: true, EnrichmentFailures: 1}},
		{name: "EnrichmentGivenUpAfterThreeFailures", mode: upsert, s: lead.State{CRM: lead.CRMPending, CRMDestination: "crm", OwnerDecided: true, EnrichmentFailures: 2}, ran: act(lead.ActEnrich), failure: transient,
			wantAct: act(lead.ActUpsert), wantState: lead.State{Enrichment: lead.EnrichmentUnavailable, CRM: lead.CRMPending, CRMDestination: "crm", OwnerDecided: true, EnrichmentFailures: 2}},
		{name: "EnrichmentGivenUpOnLongWait", mode: upsert, s: lead.State{CRM: lead.CRMPending, CRMDestination: "crm", OwnerDecided: true}, ran: act(lead.ActEnrich), failure: waitLong,
			wantAct: act(lead.ActUpsert), wantState: lead.State{Enrichment: lead.EnrichmentUnavailable, CRM: lead.CRMPending, CRMDestination: "crm", OwnerDecided: true}},
		{name: "EnrichmentGivenUpOnLastAttempt", mode: upsert, last: true, s: lead.State{CRM: lead.CRMPending, CRMDestination: "crm", OwnerDecided: true}, ran: act(lead.ActEnrich), failure: transient,
			wantAct: act(lead.ActUpsert), wantState: lead.State{Enrichment: lead.EnrichmentUnavailable, CRM: lead.CRMPending, CRMDestination: "crm", OwnerDecided: true}},
		{name: "EnrichmentGivenUpOnRefusal", mode: upsert, s: lead.State{CRM: lead.CRMPending, CRMDestination: "crm", OwnerDecided: true}, ran: act(lead.ActEnrich), failure: permanent,
			wantAct: act(lead.ActUpsert), wantState: lead.State{Enrichment: lead.EnrichmentUnavailable, CRM: lead.CRMPending, CRMDestination: "crm", OwnerDecided: true}},

		// Upsert.
		{name: "UpsertAccepted", mode: upsert, s: enriched, ran: act(lead.ActUpsert), failure: ok,
			wantAct: act(lead.ActNotify), wantState: with(notifying, func(s *lead.State) {})},
		{name: "UpsertRefused", mode: upsert, s: enriched, ran: act(lead.ActUpsert), failure: permanent,
			wantAct: finish(lead.OutcomeCRMRejected), wantState: with(enriched, func(s *lead.State) { s.CRM = lead.CRMRejected })},
		{name: "UpsertFailureRetried", mode: upsert, s: enriched, ran: act(lead.ActUpsert), failure: uncertain,
			wantAct: act(lead.ActRetry), wantState: enriched},
		{name: "UpsertRetryAfterHonouredPastAMinute", mode: upsert, s: enriched, ran: act(lead.ActUpsert), failure: waitLong,
			wantAct: lead.Action{Kind: lead.ActRetry, RetryAfter: 2 * time.Minute}, wantState: enriched},
		{name: "UpsertFailureOnLastAttemptFails", mode: upsert, last: true, s: enriched, ran: act(lead.ActUpsert), failure: uncertain,
			wantAct: finish(lead.OutcomeDownstreamUnavailable), wantState: enriched},

		// Create.
		{name: "CreateAccepted", mode: create, s: with(enriched, func(s *lead.State) { s.CRM = lead.CRMUncertain }), ran: act(lead.ActCreate), failure: ok,
			wantAct: act(lead.ActNotify), wantState: with(notifying, func(s *lead.State) {})},
		{name: "CreateUncertainRetried", mode: create, s: with(enriched, func(s *lead.State) { s.CRM = lead.CRMUncertain }), ran: act(lead.ActCreate), failure: uncertain,
			wantAct: act(lead.ActRetry), wantState: with(enriched, func(s *lead.State) { s.CRM = lead.CRMUncertain })},
		{name: "CreateUncertainOnLastAttemptAwaitsReconciliation", mode: create, last: true, s: with(enriched, func(s *lead.State) { s.CRM = lead.CRMUncertain }), ran: act(lead.ActCreate), failure: uncertain,
			wantAct: act(lead.ActReconcile), wantState: with(enriched, func(s *lead.State) { s.CRM = lead.CRMUncertain })},
		{name: "CreateNotSentIsPendingAgain", mode: create, last: true, s: with(enriched, func(s *lead.State) { s.CRM = lead.CRMUncertain }), ran: act(lead.ActCreate), failure: transient,
			wantAct: finish(lead.OutcomeDownstreamUnavailable), wantState: enriched},
		{name: "CreateRefused", mode: create, s: with(enriched, func(s *lead.State) { s.CRM = lead.CRMUncertain }), ran: act(lead.ActCreate), failure: permanent,
			wantAct: finish(lead.OutcomeCRMRejected), wantState: with(enriched, func(s *lead.State) { s.CRM = lead.CRMRejected })},
		{name: "CreateConflictLooksUp", mode: create, s: with(enriched, func(s *lead.State) { s.CRM = lead.CRMUncertain }), ran: act(lead.ActCreate), failure: conflict,
			wantAct: lead.Action{Kind: lead.ActLookup, AfterConflict: true}, wantState: with(enriched, func(s *lead.State) { s.CRM = lead.CRMUncertain })},

		// Look-up.
		{name: "LookupFound", mode: create, s: with(enriched, func(s *lead.State) { s.CRM = lead.CRMUncertain }), ran: act(lead.ActLookup), failure: ok, found: true,
			wantAct: act(lead.ActNotify), wantState: with(notifying, func(s *lead.State) {})},
		{name: "LookupNotFoundPostsWrittenAhead", mode: create, s: with(enriched, func(s *lead.State) { s.RefUsedBefore = true }), ran: act(lead.ActLookup), failure: ok,
			wantAct: act(lead.ActCreate), wantState: with(enriched, func(s *lead.State) { s.CRM = lead.CRMUncertain; s.RefUsedBefore = true })},
		{name: "LookupAfterConflictNotFoundWaits", mode: create, s: with(enriched, func(s *lead.State) { s.CRM = lead.CRMUncertain }), ran: lead.Action{Kind: lead.ActLookup, AfterConflict: true}, failure: ok,
			wantAct: act(lead.ActRetry), wantState: with(enriched, func(s *lead.State) { s.CRM = lead.CRMUncertain })},
		{name: "LookupRefusalIsTransient", mode: create, s: with(enriched, func(s *lead.State) { s.CRM = lead.CRMUncertain }), ran: act(lead.ActLookup), failure: permanent,
			wantAct: act(lead.ActRetry), wantState: with(enriched, func(s *lead.State) { s.CRM = lead.CRMUncertain })},
		{name: "LookupFailureOnLastAttemptAwaitsReconciliation", mode: create, last: true, s: with(enriched, func(s *lead.State) { s.CRM = lead.CRMUncertain }), ran: act(lead.ActLookup), failure: uncertain,
			wantAct: act(lead.ActReconcile), wantState: with(enriched, func(s *lead.State) { s.CRM = lead.CRMUncertain })},

		// Notification.
		{name: "NotificationSent", mode: upsert, s: notifying, ran: act(lead.ActNotify), failure: ok,
			wantAct: finish(lead.OutcomeCompleted), wantState: with(channel(notifying, func(c *lead.Channel) { c.State = lead.ChannelSent }), func(s *lead.State) { s.Notification = lead.NotificationSent })},
		{name: "NotificationFailureRetried", mode: upsert, s: notifying, ran: act(lead.ActNotify), failure: transient,
			wantAct: act(lead.ActRetry), wantState: channel(notifying, func(c *lead.Channel) { c.Failures = 1 })},
		{name: "NotificationGivenUpCompletes", mode: upsert, s: channel(notifying, func(c *lead.Channel) { c.Failures = 2 }), ran: act(lead.ActNotify), failure: transient,
			wantAct: finish(lead.OutcomeCompleted), wantState: with(channel(notifying, func(c *lead.Channel) { c.Failures = 2; c.State = lead.ChannelFailed }), func(s *lead.State) { s.Notification = lead.NotificationFailed })},
		{name: "NoChannelCompletesUnnotified", mode: upsert, s: with(accepted, func(s *lead.State) { s.ChannelsSet = true }),
			wantAct: finish(lead.OutcomeCompleted), wantState: with(accepted, func(s *lead.State) { s.ChannelsSet = true; s.Notification = lead.NotificationNone })},

		// A downstream that holds calls back for every lead: the lead waits
		// without spending an attempt, up to DELIVERY_MAX_AGE.
		{name: "CRMDownWaits", mode: upsert, s: enriched, ran: act(lead.ActUpsert), failure: down,
			wantAct: wait(lead.ActUpsert, 30*time.Second), wantState: enriched},
		{name: "CRMDownWaitsEvenOnTheLastAttempt", mode: upsert, last: true, s: enriched, ran: act(lead.ActUpsert), failure: down,
			wantAct: wait(lead.ActUpsert, 30*time.Second), wantState: enriched},
		{name: "CRMNotSentWaits", mode: create, s: enriched, ran: act(lead.ActCreate), failure: notSent,
			wantAct: wait(lead.ActCreate, 5*time.Second), wantState: enriched},
		{name: "CRMHeldPastMaxAgeFails", mode: upsert, expired: true, s: enriched, ran: act(lead.ActUpsert), failure: heldLong,
			wantAct: finish(lead.OutcomeDownstreamUnavailable), wantState: enriched},
		{name: "UncertainPostHeldPastMaxAgeAwaitsReconciliation", mode: create, expired: true,
			s: with(enriched, func(s *lead.State) { s.CRM = lead.CRMUncertain }), ran: act(lead.ActCreate), failure: down,
			wantAct: act(lead.ActReconcile), wantState: with(enriched, func(s *lead.State) { s.CRM = lead.CRMUncertain })},
		{name: "EnrichmentDownIsSkipped", mode: upsert, s: lead.State{CRM: lead.CRMPending, CRMDestination: "crm", OwnerDecided: true}, ran: act(lead.ActEnrich), failure: down,
			wantAct: act(lead.ActUpsert), wantState: lead.State{Enrichment: lead.EnrichmentUnavailable, CRM: lead.CRMPending, CRMDestination: "crm", OwnerDecided: true}},
		{name: "EnrichmentHeldBrieflyWaits", mode: upsert, s: lead.State{CRM: lead.CRMPending, CRMDestination: "crm", OwnerDecided: true}, ran: act(lead.ActEnrich), failure: notSent,
			wantAct: wait(lead.ActEnrich, 5*time.Second), wantState: lead.State{CRM: lead.CRMPending, CRMDestination: "crm", OwnerDecided: true}},
		{name: "EnrichmentHeldLongIsSkipped", mode: upsert, s: lead.State{CRM: lead.CRMPending, CRMDestination: "crm", OwnerDecided: true}, ran: act(lead.ActEnrich), failure: heldLong,
			wantAct: act(lead.ActUpsert), wantState: lead.State{Enrichment: lead.EnrichmentUnavailable, CRM: lead.CRMPending, CRMDestination: "crm", OwnerDecided: true}},
		{name: "NotificationDownWaitsHoweverLong", mode: upsert, s: notifying, ran: act(lead.ActNotify), failure: heldLong,
			wantAct: wait(lead.ActNotify, 2*time.Minute), wantState: notifying},
		{name: "NotificationSharedFailureSpendsNothing", mode: upsert, s: channel(notifying, func(c *lead.Channel) { c.Failures = 2 }), ran: act(lead.ActNotify), failure: shared,
			wantAct: wait(lead.ActNotify, time.Second), wantState: channel(notifying, func(c *lead.Channel) { c.Failures = 2 })},
		{name: "NotificationSharedFailureOnTheLastAttemptWaits", mode: upsert, last: true, s: notifying, ran: act(lead.ActNotify), failure: shared,
			wantAct: wait(lead.ActNotify, time.Second), wantState: notifying},
		{name: "CRMSharedFailureOnTheLastAttemptWaits", mode: upsert, last: true, s: enriched, ran: act(lead.ActUpsert), failure: shared,
			wantAct: wait(lead.ActUpsert, time.Second), wantState: enriched},
		{name: "CreateSharedFailureWaitsUncertain", mode: create, s: with(enriched, func(s *lead.State) { s.CRM = lead.CRMUncertain }), ran: act(lead.ActCreate), failure: shared,
			wantAct: wait(lead.ActCreate, time.Second), wantState: with(enriched, func(s *lead.State) { s.CRM = lead.CRMUncertain })},
		{name: "EnrichmentSharedFailureWaits", mode: upsert, s: lead.State{CRM: lead.CRMPending, CRMDestination: "crm", OwnerDecided: true}, ran: act(lead.ActEnrich), failure: shared,
			wantAct: wait(lead.ActEnrich, time.Second), wantState: lead.State{CRM: lead.CRMPending, CRMDestination: "crm", OwnerDecided: true}},
		{name: "NotificationHeldPastMaxAgeCompletesWithWarning", mode: upsert, expired: true, s: notifying, ran: act(lead.ActNotify), failure: down,
			wantAct: finish(lead.OutcomeCompleted), wantState: with(channel(notifying, func(c *lead.Channel) { c.State = lead.ChannelFailed }), func(s *lead.State) { s.Notification = lead.NotificationFailed })},

		// Stopping ends the attempt, whatever the call.
		{name: "StoppingWhileEnriching", mode: upsert, s: lead.State{CRM: lead.CRMPending, CRMDestination: "crm", OwnerDecided: true}, ran: act(lead.ActEnrich), failure: stopping,
			wantAct: act(lead.ActStop), wantState: lead.State{CRM: lead.CRMPending, CRMDestination: "crm", OwnerDecided: true}},
		{name: "StoppingWhilePostingOnLastAttempt", mode: create, last: true, s: with(enriched, func(s *lead.State) { s.CRM = lead.CRMUncertain }), ran: act(lead.ActCreate), failure: stopping,
			wantAct: act(lead.ActStop), wantState: with(enriched, func(s *lead.State) { s.CRM = lead.CRMUncertain })},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			in := input(tt.mode)
			in.LastAttempt, in.DeliveryExpired = tt.last, tt.expired
			if tt.ran.Kind != 0 {
				r := &lead.Result{Action: tt.ran, Failure: tt.failure, Found: tt.found}
				if tt.failure == nil && (tt.found || tt.ran.Kind == lead.ActUpsert || tt.ran.Kind == lead.ActCreate) {
					r.CRMID = "crm_1"
				}
				in.Note(r)
			}
			if tt.wantState.CRM == lead.CRMAccepted {
				tt.wantState.CRMID = "crm_1"
			}
			gotAct, gotState := lead.Next(tt.s, in)
			gotAct.Save = lead.SaveNone // TestNextSaves pins the saves
			if gotAct != tt.wantAct {
				t.Errorf("action %+v, want %+v", gotAct, tt.wantAct)
			}
			if gotState != tt.wantState {
				t.Errorf("state %+v,\nwant  %+v", gotState, tt.wantState)
			}
		})
	}
}

// processing is the key of a lead that is being worked.
var processing = lead.Key{State: lead.KeyProcessing}

// TestNextSaves pins when the state is saved before an action, and how.
func TestNextSaves(t *testing.T) {
	t.Parallel()
	uncertainCRM := with(enriched, func(s *lead.State) { s.CRM = lead.CRMUncertain })
	tests := []struct {
		name string
		mode lead.CRMCapabilities
		s    lead.State
		held bool
		// ran is the action just run (Kind 0: the attempt starts), with
		// failure as its result.
		ran      lead.Action
		failure  *lead.Failure
		wantKind lead.Kind
		want     lead.Save
	}{
		{name: "FirstEnrichmentNeedsNoSave", mode: upsert, s: lead.State{CRM: lead.CRMPending, CRMDestination: "crm", OwnerDecided: true},
			wantKind: lead.ActEnrich, want: lead.SaveNone},
		{name: "FirstCallThatActsTakesTheLead", mode: upsert, s: enriched,
			wantKind: lead.ActUpsert, want: lead.SaveLazy},
		{name: "HeldLeadStartingAfreshNeedsNoSave", mode: upsert, s: enriched, held: true,
			wantKind: lead.ActUpsert, want: lead.SaveNone},
		{name: "ChangedStateIsSaved", mode: upsert, s: lead.State{CRM: lead.CRMPending, CRMDestination: "crm", OwnerDecided: true}, held: true,
			ran: act(lead.ActEnrich), failure: ok, wantKind: lead.ActUpsert, want: lead.SaveLazy},
		{name: "ACallAfterACallIsPrecededByASave", mode: create, s: uncertainCRM, held: true,
			ran: act(lead.ActCreate), failure: conflict, wantKind: lead.ActLookup, want: lead.SaveLazy},
		{name: "APostIsWrittenAheadDurably", mode: create, s: enriched, held: true,
			wantKind: lead.ActCreate, want: lead.SaveDurable},
		{name: "ARetryWithAChangedStateSavesIt", mode: upsert, s: lead.State{CRM: lead.CRMPending, CRMDestination: "crm", OwnerDecided: true}, held: true,
			ran: act(lead.ActEnrich), failure: transient, wantKind: lead.ActRetry, want: lead.SaveLazy},
		{name: "ARetryWithTheSameStateSavesNothing", mode: upsert, s: enriched, held: true,
			ran: act(lead.ActUpsert), failure: uncertain, wantKind: lead.ActRetry, want: lead.SaveNone},
		{name: "AFinishWritesTheStateItself", mode: upsert, s: notifying, held: true,
			ran: act(lead.ActNotify), failure: ok, wantKind: lead.ActFinish, want: lead.SaveNone},
		{name: "ANotificationAfterAnUpsertOnlyChecksTheHold", mode: upsert, s: enriched, held: true,
			ran: act(lead.ActUpsert), failure: ok, wantKind: lead.ActNotify, want: lead.SaveCheck},
		{name: "ANotificationAfterAPostIsSaved", mode: create, s: uncertainCRM, held: true,
			ran: act(lead.ActCreate), failure: ok, wantKind: lead.ActNotify, want: lead.SaveLazy},
		{name: "AWaitIsSaved", mode: upsert, s: enriched, held: true,
			ran: act(lead.ActUpsert), failure: down, wantKind: lead.ActWait, want: lead.SaveLazy},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			in := input(tt.mode)
			in.Held = tt.held
			if tt.ran.Kind != 0 {
				in.Note(&lead.Result{Action: tt.ran, Failure: tt.failure})
			}
			got, _ := lead.Next(tt.s, in)
			if got.Kind != tt.wantKind || got.Save != tt.want {
				t.Errorf("got %s with save %d, want %s with save %d", got.Kind, got.Save, tt.wantKind, tt.want)
			}
		})
	}
}

// TestNextSkips pins the attempts that have nothing to do.
func TestNextSkips(t *testing.T) {
	t.Parallel()
	for _, key := range []lead.Key{
		{},
		{State: lead.KeyCompleted},
		{State: lead.KeyFailed, Failure: "downstream_unavailable"},
		{State: lead.KeyNeedsReconciliation},
		{State: lead.KeyProcessing, Erased: true},
	} {
		if got, _ := lead.Next(enriched, lead.Input{Key: key, CRM: upsert}); got.Kind != lead.ActSkip || got.Save != lead.SaveNone {
			t.Errorf("key %+v: %+v, want a skip", key, got)
		}
	}
}

func TestAbandoned(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name      string
		s         lead.State
		wantAct   lead.Action
		wantNotif lead.Notification
	}{
		{"AcceptedCompletesNotificationUnknownCountsAsFailed", accepted, finish(lead.OutcomeCompleted), lead.NotificationFailed},
		{"AcceptedChannelUnknownCountsAsFailed", notifying, finish(lead.OutcomeCompleted), lead.NotificationFailed},
		{"AcceptedAndNotifiedCompletes", with(accepted, func(s *lead.State) { s.Notification = lead.NotificationSent }), finish(lead.OutcomeCompleted), lead.NotificationSent},
		{"UncertainAwaitsReconciliation", with(enriched, func(s *lead.State) { s.CRM = lead.CRMUncertain }), act(lead.ActReconcile), ""},
		{"RejectedStaysRejected", with(enriched, func(s *lead.State) { s.CRM = lead.CRMRejected }), finish(lead.OutcomeCRMRejected), ""},
		{"PendingFails", enriched, finish(lead.OutcomeDownstreamUnavailable), ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			gotAct, gotState := lead.Abandoned(tt.s)
			if gotAct != tt.wantAct || gotState.Notification != tt.wantNotif {
				t.Errorf("got %+v with notification %q, want %+v with %q", gotAct, gotState.Notification, tt.wantAct, tt.wantNotif)
			}
		})
	}
}

func TestSettle(t *testing.T) {
	t.Parallel()
	unsettled := with(enriched, func(s *lead.State) { s.CRM = lead.CRMUncertain })
	if got := lead.Settle(unsettled, true, "crm_9"); got.CRM != lead.CRMAccepted || got.CRMID != "crm_9" {
		t.Errorf("found: %+v", got)
	}
	got := lead.Settle(unsettled, false, "")
	if got.CRM != lead.CRMPending {
		t.Errorf("not found: %+v", got)
	}
	// Settled as not found, the lead posts again, written ahead.
	if a, s := lead.Next(got, input(create)); a.Kind != lead.ActCreate || s.CRM != lead.CRMUncertain {
		t.Errorf("after a settle as not found: %+v %+v, want a post written ahead", a, s)
	}
}
