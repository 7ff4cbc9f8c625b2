// Package destinationtest is the conformance suite every destination kind
// runs against its stand-in, as River's drivers run riverdrivertest: the
// same cases for every kind, asked of the capabilities the kind declares,
// so that the lead's life can rely on them whichever vendor it writes to.
//
// A kind's test calls RunCRM (or RunChannel) with a harness that starts a
// fresh stand-in for each case and configures the kind against it. The
// stand-in must keep the vendor's shapes, refuse what the vendor refuses,
// and misbehave on demand (StandIn.Inject): lose an answer after applying
// the request, fail with a 5xx, throttle with the vendor's own rate-limit
// answer, and refuse credentials until they are restored.
package destinationtest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/leadintake/leadintake/destination"
	"github.com/leadintake/leadintake/lead"
)

// Fault is a misbehaviour a stand-in is asked for.
type Fault int

// The faults.
const (
	// LoseAnswer applies the next write (a create, an upsert, an update, a
	// send), then drops the connection without answering.
	LoseAnswer Fault = iota + 1
	// FailServer answers the next call with a 5xx, applying nothing.
	FailServer
	// RateLimit answers the next call as the vendor does when its rate
	// limit is spent (a 429 with the vendor's own headers and body).
	RateLimit
	// RefuseCredentials refuses the credentials of every call, as the
	// vendor does for a revoked token, until Restore.
	RefuseCredentials
	// Restore accepts the credentials again.
	Restore
)

// StandIn is a kind's stand-in as the suite drives it.
type StandIn interface {
	// Inject makes the stand-in misbehave (see Fault).
	Inject(f Fault)
	// Records counts what the stand-in holds of the kind's records (a
	// CRM's records of leads, a channel's messages).
	Records() int
	// Email is the email of the CRM record id ("" when there is none);
	// for a channel, the number of messages for the lead's reference.
	Email(id string) string
}

// Setup is one case's destination and stand-in.
type Setup struct {
	StandIn StandIn
	// Secrets are the configuration's secrets: no error may show one.
	Secrets []string
}

// CRMHarness is what a CRM kind's test gives RunCRM.
type CRMHarness struct {
	// New starts a fresh stand-in (on 127.0.0.1, stopped by t.Cleanup)
	// and returns the destination configured for it.
	New func(t *testing.T) (destination.CRM, Setup)
	// Reject edits r into a lead the vendor refuses for its own sake (an
	// email it does not take, a required field missing).
	Reject func(r *destination.Record)
}

// Record returns a lead's record for the cases, under a fresh reference.
func Record(t *testing.T) *destination.Record {
	t.Helper()
	id := fmt.Sprintf("%x", time.Now().UnixNano())
	return &destination.Record{
		LeadID:      "0190c6a2-7e1a-7b3c-9d4e-" + id[len(id)-12:],
		ExternalRef: "li_" + id,
		Lead: &lead.Lead{
			Email: "ada." + id + "@example.com", Source: "referral", Name: "Ada Lovelace",
			Company: "Analytical Engines", Phone: "+44 20 7946 0000", Website: "https://ae.example",
			Message: "We would like a demo.", Fields: map[string]string{"budget": "10k"},
		},
		Score: 85, Tier: "hot",
	}
}

// RunCRM runs the suite's CRM cases. Each case starts its own stand-in.
func RunCRM(t *testing.T, h CRMHarness) {
	t.Helper()
	ctx := context.Background()
	var errs errorLog

	t.Run("WritesOneRecord", func(t *testing.T) {
		crm, s := h.New(t)
		r := Record(t)
		st := Drive(ctx, t, crm, r, lead.State{}, 1)
		requireAccepted(t, st)
		if n := s.StandIn.Records(); n != 1 {
			t.Errorf("%d records, want 1", n)
		}
		if got := s.StandIn.Email(st.CRMID); !strings.EqualFold(got, r.Lead.Email) {
			t.Errorf("record %s has email %q, want the lead's", st.CRMID, got)
		}
	})

	t.Run("RepeatAfterALostAnswerMakesNoSecondRecord", func(t *testing.T) {
		crm, s := h.New(t)
		r := Record(t)
		s.StandIn.Inject(LoseAnswer)
		st := Drive(ctx, t, crm, r, lead.State{}, 4)
		requireAccepted(t, st)
		if n := s.StandIn.Records(); n != 1 {
			t.Errorf("%d records after a lost answer and the repeat, want 1", n)
		}
		// Two more lost answers in a row, for another lead.
		r2 := Record(t)
		s.StandIn.Inject(LoseAnswer)
		s.StandIn.Inject(LoseAnswer)
		requireAccepted(t, Drive(ctx, t, crm, r2, lead.State{}, 6))
		if n := s.StandIn.Records(); n != 2 {
			t.Errorf("%d records for two leads, want 2", n)
		}
	})

	t.Run("WritingAgainUpdatesTheSameRecord", func(t *testing.T) {
		// A redrive, or a key submitted again after it expired: the same
		// reference, written by a new run that knows it was used.
		crm, s := h.New(t)
		r := Record(t)
		first := Drive(ctx, t, crm, r, lead.State{}, 1)
		requireAccepted(t, first)
		again := Drive(ctx, t, crm, r, lead.State{RefUsedBefore: true}, 2)
		requireAccepted(t, again)
		if n := s.StandIn.Records(); n != 1 {
			t.Errorf("%d records, want 1", n)
		}
		if again.CRMID != first.CRMID {
			t.Errorf("written again as %s, first as %s", again.CRMID, first.CRMID)
		}
	})

	t.Run("LookupOfAnUnknownReference", func(t *testing.T) {
		crm, _ := h.New(t)
		_, found, err := crm.Lookup(ctx, Record(t))
		errs.add(err)
		if err != nil || found {
			t.Errorf("found %v, error %v; want not found", found, err)
		}
	})

	t.Run("LookupFindsTheRecord", func(t *testing.T) {
		crm, _ := h.New(t)
		r := Record(t)
		st := Drive(ctx, t, crm, r, lead.State{}, 1)
		requireAccepted(t, st)
		id, found, err := crm.Lookup(ctx, r)
		errs.add(err)
		if crm.Capabilities().Upsert && err == nil && !found {
			// An upsert kind need not find by reference (it is keyed
			// otherwise); a create kind must, or it could never tell.
			t.Skip("the kind's writes are keyed; it does not look records up by reference")
		}
		if err != nil || !found || id != st.CRMID {
			t.Errorf("found %v (%s), error %v; want %s", found, id, err, st.CRMID)
		}
	})

	t.Run("AmendmentUpdatesTheSameRecord", func(t *testing.T) {
		crm, s := h.New(t)
		caps := crm.Capabilities()
		r := Record(t)
		first := Drive(ctx, t, crm, r, lead.State{}, 1)
		requireAccepted(t, first)
		amended := *r
		changed := *r.Lead
		changed.Name, changed.Email = "Ada King", "ada.king."+r.ExternalRef[3:]+"@example.com"
		amended.Lead, amended.Amendment, amended.Amends, amended.ChainCRMID = &changed, 1, r.LeadID, first.CRMID
		st := Drive(ctx, t, crm, &amended, lead.State{Amendment: 1, RefUsedBefore: true, ChainCRMID: first.CRMID}, 2)
		requireAccepted(t, st)
		if n := s.StandIn.Records(); n != 1 {
			t.Errorf("%d records after the amendment, want 1", n)
		}
		switch {
		case caps.UpdateByID || caps.Upsert && st.CRMID == first.CRMID && s.StandIn.Email(first.CRMID) == changed.Email:
			if st.CRMID != first.CRMID {
				t.Errorf("amendment written as %s, the chain's record is %s", st.CRMID, first.CRMID)
			}
			if got := s.StandIn.Email(first.CRMID); !strings.EqualFold(got, changed.Email) {
				t.Errorf("record's email %q, want the amendment's", got)
			}
		case caps.Upsert:
			t.Errorf("the kind upserts but the amendment did not update the chain's record (%s, email %q)", st.CRMID, s.StandIn.Email(first.CRMID))
		default:
			if !st.CRMNotUpdated {
				t.Error("a create kind without update left the record as it is, but without crm_not_updated")
			}
		}
	})

	t.Run("RefusedCredentials", func(t *testing.T) {
		crm, s := h.New(t)
		s.StandIn.Inject(RefuseCredentials)
		_, err := crm.Write(ctx, Record(t))
		errs.add(err)
		requireClass(t, err, destination.Unauthorized)
		if n := s.StandIn.Records(); n != 0 {
			t.Errorf("%d records with refused credentials", n)
		}
		s.StandIn.Inject(Restore)
		requireAccepted(t, Drive(ctx, t, crm, Record(t), lead.State{}, 1))
	})

	t.Run("RateLimited", func(t *testing.T) {
		crm, s := h.New(t)
		s.StandIn.Inject(RateLimit)
		_, err := crm.Write(ctx, Record(t))
		errs.add(err)
		requireClass(t, err, destination.Transient)
		if e, ok := destination.AsError(err); ok && e.RetryAfter <= 0 {
			t.Errorf("a rate-limit answer without the wait it asks for: %v", err)
		}
	})

	t.Run("ServerError", func(t *testing.T) {
		crm, s := h.New(t)
		s.StandIn.Inject(FailServer)
		_, err := crm.Write(ctx, Record(t))
		errs.add(err)
		requireClass(t, err, destination.Transient)
		if e, ok := destination.AsError(err); ok && !e.Uncertain {
			t.Errorf("a 5xx is certain: %v", err)
		}
	})

	t.Run("RejectedLead", func(t *testing.T) {
		crm, s := h.New(t)
		r := Record(t)
		h.Reject(r)
		st := Drive(ctx, t, crm, r, lead.State{}, 1)
		if st.CRM != lead.CRMRejected {
			t.Errorf("CRM state %s, want rejected", st.CRM)
		}
		_, err := crm.Write(ctx, r)
		errs.add(err)
		requireClass(t, err, destination.Rejected)
		if n := s.StandIn.Records(); n != 0 {
			t.Errorf("%d records of a rejected lead", n)
		}
	})

	t.Run("ErrorsShowNoSecret", func(t *testing.T) {
		_, s := h.New(t)
		for _, err := range errs.all() {
			for _, secret := range s.Secrets {
				if secret != "" && strings.Contains(err.Error(), secret) {
					t.Errorf("error %q shows a secret", err)
				}
			}
		}
		if len(errs.all()) == 0 {
			t.Error("no error was seen")
		}
	})
}

// Drive runs the CRM step of r from state s (its enrichment done) as the
// worker does, through lead.Next, for at most attempts attempts, and
// returns the state it ends in: accepted, rejected, or what the last
// attempt left.
func Drive(ctx context.Context, t *testing.T, crm destination.CRM, r *destination.Record, s lead.State, attempts int) lead.State {
	t.Helper()
	s.Enrichment = lead.EnrichmentData
	if s.CRM == "" {
		s.CRM = lead.CRMPending
	}
	for n := 1; n <= attempts; n++ {
		in := lead.Input{Key: lead.Key{State: lead.KeyProcessing}, CRM: crm.Capabilities(), CRMDestination: "d", Held: true, LastAttempt: n == attempts}
		for {
			a, next := lead.Next(s, in)
			s = next
			if s.CRM == lead.CRMAccepted || s.CRM == lead.CRMRejected || !a.Kind.CRMStep() {
				break
			}
			res := &lead.Result{Action: a}
			rec := *r
			rec.Prepared = s.CRMPrepared
			r := &rec
			var err error
			switch a.Kind {
			case lead.ActUpsert, lead.ActCreate:
				res.CRMID, err = crm.Write(ctx, r)
			case lead.ActLookup:
				res.CRMID, res.Found, err = crm.Lookup(ctx, r)
			case lead.ActUpdate:
				res.CRMID, err = crm.Update(ctx, a.CRMID, r)
			case lead.ActPrepare:
				res.Prepared, err = crm.Prepare(ctx, r)
			}
			res.Failure = FailureOf(err)
			in.Note(res)
		}
		if s.CRM == lead.CRMAccepted || s.CRM == lead.CRMRejected {
			return s
		}
	}
	return s
}

// FailureOf is how the lead's life sees err (destination.FailureOf).
func FailureOf(err error) *lead.Failure { return destination.FailureOf(err) }

func requireAccepted(t *testing.T, s lead.State) {
	t.Helper()
	if s.CRM != lead.CRMAccepted || s.CRMID == "" {
		t.Fatalf("CRM state %s (id %q), want accepted", s.CRM, s.CRMID)
	}
}

func requireClass(t *testing.T, err error, want destination.Class) {
	t.Helper()
	e, ok := destination.AsError(err)
	switch {
	case err == nil:
		t.Fatalf("no error, want %s", want)
	case !ok:
		t.Fatalf("error %v is not a *destination.Error", err)
	case e.Class != want:
		t.Fatalf("error %v is %s, want %s", err, e.Class, want)
	}
}

// errorLog keeps the errors the cases met, for ErrorsShowNoSecret.
type errorLog struct{ errs []error }

func (l *errorLog) add(err error) {
	if err != nil && !errors.Is(err, context.Canceled) {
		l.errs = append(l.errs, err)
	}
}

func (l *errorLog) all() []error { return l.errs }
