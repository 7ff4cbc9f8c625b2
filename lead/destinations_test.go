package lead_test

import (
	"strings"
	"testing"
	"time"

	"github.com/leadintake/leadintake/lead"
)

// TestNextAsksTheCRMsCapabilities pins what each capability changes in a
// lead's CRM step.
func TestNextAsksTheCRMsCapabilities(t *testing.T) {
	t.Parallel()
	updatable := lead.CRMCapabilities{ConsistentLookup: true, UpdateByID: true}
	keyedUpdatable := lead.CRMCapabilities{Upsert: true, ConsistentLookup: true, UpdateByID: true}
	lagging := lead.CRMCapabilities{}
	preparing := lead.CRMCapabilities{ConsistentLookup: true, UpdateByID: true, Prepares: true}
	amendment := with(enriched, func(s *lead.State) { s.Amendment, s.RefUsedBefore, s.ChainCRMID = 1, true, "crm_7" })
	tests := []struct {
		name      string
		caps      lead.CRMCapabilities
		s         lead.State
		ran       lead.Action
		failure   *lead.Failure
		found     bool
		wantAct   lead.Action
		wantState lead.State
	}{
		{name: "AmendmentOfAKnownRecordUpdatesIt", caps: keyedUpdatable, s: amendment,
			wantAct: lead.Action{Kind: lead.ActUpdate, CRMID: "crm_7"}, wantState: amendment},
		{name: "AmendmentOfAKnownRecordUpdatesItInACreateKind", caps: updatable, s: amendment,
			wantAct: lead.Action{Kind: lead.ActUpdate, CRMID: "crm_7"}, wantState: amendment},
		{name: "AmendmentWithoutUpdateByIDUpserts", caps: upsert, s: amendment, wantAct: act(lead.ActUpsert), wantState: amendment},
		{name: "AmendmentOfAnUnknownRecordLooksUp", caps: updatable, s: with(amendment, func(s *lead.State) { s.ChainCRMID = "" }),
			wantAct: act(lead.ActLookup), wantState: with(amendment, func(s *lead.State) { s.ChainCRMID = "" })},
		{name: "UpdateAccepted", caps: updatable, s: amendment, ran: lead.Action{Kind: lead.ActUpdate, CRMID: "crm_7"}, failure: ok,
			wantAct: act(lead.ActNotify), wantState: with(amendment, func(s *lead.State) {
				s.CRM, s.CRMID, s.ChannelsSet, s.Channels[0].Name = lead.CRMAccepted, "crm_1", true, "notification"
			})},
		{name: "UpdateRefused", caps: updatable, s: amendment, ran: lead.Action{Kind: lead.ActUpdate, CRMID: "crm_7"}, failure: permanent,
			wantAct: finish(lead.OutcomeCRMRejected), wantState: with(amendment, func(s *lead.State) { s.CRM = lead.CRMRejected })},
		{name: "UpdateFailureRetried", caps: updatable, s: amendment, ran: lead.Action{Kind: lead.ActUpdate, CRMID: "crm_7"}, failure: uncertain,
			wantAct: act(lead.ActRetry), wantState: amendment},
		{name: "RecordOfAnEarlierLeadFoundIsUpdated", caps: updatable, s: with(enriched, func(s *lead.State) { s.RefUsedBefore = true }),
			ran: act(lead.ActLookup), failure: ok, found: true,
			wantAct: lead.Action{Kind: lead.ActUpdate, CRMID: "crm_1"}, wantState: with(enriched, func(s *lead.State) { s.RefUsedBefore = true })},
		{name: "OwnRecordFoundIsNotUpdated", caps: updatable, s: with(enriched, func(s *lead.State) { s.CRM = lead.CRMUncertain }),
			ran: act(lead.ActLookup), failure: ok, found: true,
			wantAct: act(lead.ActNotify), wantState: with(notifying, func(s *lead.State) {})},
		{name: "NotFoundByALaggingLookupIsAskedAgain", caps: lagging, s: with(enriched, func(s *lead.State) { s.CRM = lead.CRMUncertain }),
			ran: act(lead.ActLookup), failure: ok,
			wantAct: act(lead.ActRetry), wantState: with(enriched, func(s *lead.State) { s.CRM = lead.CRMUncertain })},
		{name: "APreparingKindPreparesFirst", caps: preparing, s: enriched, wantAct: act(lead.ActPrepare), wantState: enriched},
		{name: "WhatWasPreparedIsKeptAndTheWriteFollows", caps: preparing, s: enriched, ran: act(lead.ActPrepare), failure: ok,
			wantAct: act(lead.ActCreate), wantState: with(enriched, func(s *lead.State) { s.CRMPrepared = "person_1"; s.CRM = lead.CRMUncertain })},
		{name: "APreparedLeadIsNotPreparedAgain", caps: preparing, s: with(enriched, func(s *lead.State) { s.CRMPrepared = "person_1"; s.CRM = lead.CRMUncertain }),
			wantAct: act(lead.ActLookup), wantState: with(enriched, func(s *lead.State) { s.CRMPrepared = "person_1"; s.CRM = lead.CRMUncertain })},
		{name: "APreparationRefusedRejectsTheLead", caps: preparing, s: enriched, ran: act(lead.ActPrepare), failure: permanent,
			wantAct: finish(lead.OutcomeCRMRejected), wantState: with(enriched, func(s *lead.State) { s.CRM = lead.CRMRejected })},
		{name: "RefusedCredentialsWait", caps: upsert, s: enriched, ran: act(lead.ActUpsert),
			failure: &lead.Failure{Transient: true, Hold: lead.HoldUnauthorized, RetryAfter: time.Hour},
			wantAct: wait(lead.ActUpsert, time.Hour), wantState: enriched},
		{name: "RefusedCredentialsOfTheEnrichmentSkipIt", caps: upsert, s: lead.State{CRM: lead.CRMPending, CRMDestination: "crm", OwnerDecided: true}, ran: act(lead.ActEnrich),
			failure: &lead.Failure{Transient: true, Hold: lead.HoldUnauthorized, RetryAfter: time.Hour},
			wantAct: act(lead.ActUpsert), wantState: lead.State{CRM: lead.CRMPending, CRMDestination: "crm", OwnerDecided: true, Enrichment: lead.EnrichmentUnavailable}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			in := input(tt.caps)
			if tt.ran.Kind != 0 {
				r := &lead.Result{Action: tt.ran, Failure: tt.failure, Found: tt.found}
				if tt.failure == nil {
					r.CRMID, r.Prepared = "crm_1", "person_1"
				}
				in.Note(r)
			}
			gotAct, gotState := lead.Next(tt.s, in)
			gotAct.Save = lead.SaveNone
			if gotAct != tt.wantAct {
				t.Errorf("action %+v, want %+v", gotAct, tt.wantAct)
			}
			if gotState != tt.wantState {
				t.Errorf("state %+v,\nwant  %+v", gotState, tt.wantState)
			}
		})
	}
}

// TestNextChoosesTheCRMDestinationOnce pins that a lead keeps the CRM
// destination of its first CRM step, whatever its client says later.
func TestNextChoosesTheCRMDestinationOnce(t *testing.T) {
	t.Parallel()
	s := lead.State{Enrichment: lead.EnrichmentData, CRM: lead.CRMPending}
	in := input(upsert)
	in.CRMDestination = "acme-hubspot"
	a, s := lead.Next(s, in)
	if a.Kind != lead.ActUpsert || s.CRMDestination != "acme-hubspot" {
		t.Fatalf("first CRM step: %s, destination %q", a.Kind, s.CRMDestination)
	}
	if a.Save == lead.SaveNone {
		t.Error("the choice is not saved before the write")
	}
	in.CRMDestination = "other"
	if _, s = lead.Next(s, in); s.CRMDestination != "acme-hubspot" {
		t.Errorf("destination changed to %q", s.CRMDestination)
	}
	// The enrichment, before it, chooses nothing (and saves nothing).
	a, s = lead.Next(lead.State{CRM: lead.CRMPending}, in)
	if a.Kind != lead.ActEnrich || s.CRMDestination != "" || a.Save != lead.SaveNone {
		t.Errorf("enrichment: %+v, destination %q", a, s.CRMDestination)
	}
}

// attempt runs one attempt of a lead's notification step as the worker
// does, each channel's call answered by answer, and returns the action
// that ended it and the state.
func attempt(t *testing.T, s lead.State, in lead.Input, answer func(i int, kind lead.Kind) (*lead.Failure, bool)) (lead.Action, lead.State, []string) {
	t.Helper()
	var calls []string
	in.Last = nil
	in.Tried = [lead.MaxChannels]lead.Tried{}
	for range 20 {
		a, next := lead.Next(s, in)
		s = next
		if a.Kind != lead.ActNotify && a.Kind != lead.ActFind {
			return a, s, calls
		}
		name := s.Channels[a.Channel].Name
		calls = append(calls, a.Kind.String()+" "+name)
		f, found := answer(a.Channel, a.Kind)
		r := &lead.Result{Action: a, Failure: f, Found: found}
		if f == nil && (a.Kind == lead.ActNotify || found) {
			r.Receipt = "ts_" + name
		}
		in.Note(r)
	}
	t.Fatal("the attempt does not end")
	return lead.Action{}, s, nil
}

func TestNextNotifiesEachChannelOnce(t *testing.T) {
	t.Parallel()
	three := input(upsert)
	three.Channels = []string{"slack", "mail", "hook"}
	three.ChannelCaps[0] = lead.ChannelCapabilities{Find: true, Update: true}
	three.ChannelCaps[2] = lead.ChannelCapabilities{Dedupes: true}
	three.Held = true
	three.Now = 1700000000

	t.Run("EveryChannelAcceptsOnce", func(t *testing.T) {
		t.Parallel()
		a, s, calls := attempt(t, accepted, three, func(int, lead.Kind) (*lead.Failure, bool) { return ok, false })
		if a != finish(lead.OutcomeCompleted) || s.Notification != lead.NotificationSent {
			t.Fatalf("%+v, notification %q", a, s.Notification)
		}
		if want := "notify slack,notify mail,notify hook"; join(calls) != want {
			t.Errorf("calls %s, want %s", join(calls), want)
		}
		if s.Channels[0].Receipt != "ts_slack" || s.Channels[0].Since != three.Now {
			t.Errorf("slack kept %+v", s.Channels[0])
		}
	})

	t.Run("OneChannelsFailureRepeatsOnlyIt", func(t *testing.T) {
		t.Parallel()
		failMail := func(i int, _ lead.Kind) (*lead.Failure, bool) {
			if i == 1 {
				return transient, false
			}
			return ok, false
		}
		a, s, calls := attempt(t, accepted, three, failMail)
		if a.Kind != lead.ActRetry || join(calls) != "notify slack,notify mail,notify hook" {
			t.Fatalf("first attempt: %s after %s", a.Kind, join(calls))
		}
		if s.Channels[0].State != lead.ChannelSent || s.Channels[2].State != lead.ChannelSent || s.Channels[1].Failures != 1 {
			t.Fatalf("after the first attempt: %+v", s.Channels)
		}
		a, s, calls = attempt(t, s, three, failMail)
		if a.Kind != lead.ActRetry || join(calls) != "notify mail" {
			t.Fatalf("second attempt: %s after %s", a.Kind, join(calls))
		}
		a, s, calls = attempt(t, s, three, failMail)
		if a != finish(lead.OutcomeCompleted) || join(calls) != "notify mail" {
			t.Fatalf("third attempt: %+v after %s", a, join(calls))
		}
		if s.Notification != lead.NotificationFailed || s.Channels[1].State != lead.ChannelFailed {
			t.Errorf("mail given up: %q %+v", s.Notification, s.Channels[1])
		}
		if w := s.Warnings(); len(w) != 1 || w[0] != "notification_failed" {
			t.Errorf("warnings %v", w)
		}
	})

	t.Run("AHeldChannelWaitsAloneWithoutSpendingAnAttempt", func(t *testing.T) {
		t.Parallel()
		down := &lead.Failure{Transient: true, Hold: lead.HoldDown, RetryAfter: time.Minute}
		a, s, calls := attempt(t, accepted, three, func(i int, _ lead.Kind) (*lead.Failure, bool) {
			if i == 0 {
				return down, false
			}
			return ok, false
		})
		if a.Kind != lead.ActWait || a.Channel != 0 || a.Waits != lead.ActNotify || a.RetryAfter != time.Minute {
			t.Fatalf("%+v after %s", a, join(calls))
		}
		if join(calls) != "notify slack,notify mail,notify hook" || s.Channels[0].Failures != 0 {
			t.Errorf("calls %s; slack %+v", join(calls), s.Channels[0])
		}
	})

	t.Run("AnUncertainSendIsLookedForFirst", func(t *testing.T) {
		t.Parallel()
		a, s, _ := attempt(t, accepted, three, func(i int, _ lead.Kind) (*lead.Failure, bool) {
			if i == 0 {
				return uncertain, false
			}
			return ok, false
		})
		if a.Kind != lead.ActRetry || s.Channels[0].State != lead.ChannelUncertain {
			t.Fatalf("%+v; slack %+v", a, s.Channels[0])
		}
		// Found: accepted without a second send.
		a, found, calls := attempt(t, s, three, func(int, lead.Kind) (*lead.Failure, bool) { return ok, true })
		if join(calls) != "find slack" || a != finish(lead.OutcomeCompleted) || found.Channels[0].State != lead.ChannelSent {
			t.Errorf("found: %+v after %s", a, join(calls))
		}
		// Not found: sent, once.
		_, notFound, calls := attempt(t, s, three, func(int, lead.Kind) (*lead.Failure, bool) { return ok, false })
		if join(calls) != "find slack,notify slack" || notFound.Channels[0].State != lead.ChannelSent {
			t.Errorf("not found: %s", join(calls))
		}
	})

	t.Run("ASendThatLooksForItsMessagesIsWrittenAheadDurably", func(t *testing.T) {
		t.Parallel()
		s := with(accepted, func(s *lead.State) {
			s.ChannelsSet = true
			for i, n := range three.Channels {
				s.Channels[i].Name = n
			}
		})
		in := three
		in.Note(&lead.Result{Action: lead.Action{Kind: lead.ActUpsert}})
		a, next := lead.Next(s, in)
		if a.Kind != lead.ActNotify || a.Channel != 0 || a.Save != lead.SaveDurable || next.Channels[0].State != lead.ChannelUncertain {
			t.Errorf("%+v %+v", a, next.Channels[0])
		}
		// A channel that does not look for its messages is not.
		s.Channels[0].State = lead.ChannelSent
		in.Note(&lead.Result{Action: lead.Action{Kind: lead.ActNotify}, Receipt: "ts"})
		if a, next := lead.Next(s, in); a.Kind != lead.ActNotify || a.Channel != 1 || a.Save != lead.SaveLazy || next.Channels[1].State != lead.ChannelPending {
			t.Errorf("%+v %+v", a, next.Channels[1])
		}
	})
}

func join(calls []string) string { return strings.Join(calls, ",") }

// TestNextChoosesTheOwnerOnce pins when a lead's owner is chosen: by the
// save before its first CRM step, once; an amendment takes its chain's.
func TestNextChoosesTheOwnerOnce(t *testing.T) {
	t.Parallel()
	undecided := with(enriched, func(s *lead.State) { s.OwnerDecided = false })
	in := input(upsert)
	in.Held = true

	a, next := lead.Next(undecided, in)
	if a.Kind != lead.ActUpsert || !a.Assign || a.Save != lead.SaveLazy || next != undecided {
		t.Errorf("first CRM step: %+v; the save before it must choose the owner", a)
	}
	if a, _ := lead.Next(with(undecided, func(s *lead.State) { s.OwnerDecided, s.Owner = true, "alice" }), in); a.Assign || a.Save != lead.SaveNone {
		t.Errorf("a decided owner is chosen again: %+v", a)
	}
	if a, _ := lead.Next(with(undecided, func(s *lead.State) { s.OwnerDecided = true }), in); a.Assign {
		t.Errorf("a lead decided to have no owner is given one: %+v", a)
	}
	// The enrichment before the CRM chooses nothing.
	if a, _ := lead.Next(lead.State{CRM: lead.CRMPending}, in); a.Kind != lead.ActEnrich || a.Assign {
		t.Errorf("enrichment: %+v", a)
	}
	// An amendment keeps its chain's owner, saved before its CRM step.
	amendment := with(undecided, func(s *lead.State) {
		s.Amendment, s.RefUsedBefore, s.ChainOwner, s.ChainOwnerDecided = 1, true, "bob", true
	})
	a, next = lead.Next(amendment, in)
	if a.Assign || next.Owner != "bob" || !next.OwnerDecided || a.Save == lead.SaveNone {
		t.Errorf("amendment: %+v, owner %q decided %v", a, next.Owner, next.OwnerDecided)
	}
	// An amendment whose chain never decided chooses its own.
	if a, _ := lead.Next(with(amendment, func(s *lead.State) { s.ChainOwnerDecided = false }), in); !a.Assign {
		t.Errorf("amendment of an undecided chain: %+v", a)
	}
}
