package destinationtest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/leadintake/leadintake/destination"
	"github.com/leadintake/leadintake/lead"
)

// RejectMessage makes the channel's stand-in refuse the next message for
// the channel's own reasons (a channel archived or not found, a message
// the vendor will not take): the channel is given up for the lead.
const RejectMessage Fault = 100

// ChannelStandIn is a notification kind's stand-in as the suite drives it.
type ChannelStandIn interface {
	// Inject makes the stand-in misbehave (see Fault, RejectMessage).
	Inject(f Fault)
	// Messages counts the messages received for the reference ref, each
	// delivery counted, repeats included.
	Messages(ref string) int
	// Distinct counts them as the receiver shows them once it recognised
	// repeats (by Idempotency-Key, by Message-ID); Messages for a channel
	// that cannot tell.
	Distinct(ref string) int
	// Text is the latest text of the message for ref (its fallback text,
	// its body, its card's text), "" for none.
	Text(ref string) string
}

// ChannelSetup is one case's channel and stand-in.
type ChannelSetup struct {
	StandIn ChannelStandIn
	// Secrets are the configuration's secrets: no error may show one.
	Secrets []string
}

// ChannelHarness is what a notification kind's test gives RunChannel.
type ChannelHarness struct {
	// New starts a fresh stand-in (on 127.0.0.1, stopped by t.Cleanup)
	// and returns the channel configured for it.
	New func(t *testing.T) (destination.Channel, ChannelSetup)
}

// RunChannel runs the suite's channel cases. Each case starts its own
// stand-in.
func RunChannel(t *testing.T, h ChannelHarness) {
	t.Helper()
	ctx := context.Background()
	var errs errorLog

	t.Run("SendsOneMessage", func(t *testing.T) {
		ch, s := h.New(t)
		r := Record(t)
		st := Notify(ctx, t, ch, r, lead.Channel{}, 1)
		requireSent(t, st)
		if n := s.StandIn.Messages(r.ExternalRef); n != 1 {
			t.Errorf("%d messages, want 1", n)
		}
		if text := s.StandIn.Text(r.ExternalRef); !strings.Contains(text, r.Lead.Company) || !strings.Contains(text, r.Tier) {
			t.Errorf("the message %q names neither the company nor the tier", text)
		}
	})

	t.Run("RepeatAfterALostAnswer", func(t *testing.T) {
		ch, s := h.New(t)
		caps := ch.Capabilities()
		r := Record(t)
		s.StandIn.Inject(LoseAnswer)
		requireSent(t, Notify(ctx, t, ch, r, lead.Channel{}, 4))
		messages, distinct := s.StandIn.Messages(r.ExternalRef), s.StandIn.Distinct(r.ExternalRef)
		switch {
		case caps.Find && messages != 1:
			t.Errorf("%d messages: a kind that finds its messages sends once", messages)
		case caps.Dedupes && distinct != 1:
			t.Errorf("%d messages as the receiver shows them: a kind whose repeats are recognised shows one", distinct)
		case messages < 1:
			t.Errorf("no message: at least once")
		}
		t.Logf("after a lost answer: %d messages received, %d as shown (find %v, dedupes %v)", messages, distinct, caps.Find, caps.Dedupes)
	})

	t.Run("AmendmentOfTheChainsMessage", func(t *testing.T) {
		ch, s := h.New(t)
		caps := ch.Capabilities()
		r := Record(t)
		first := Notify(ctx, t, ch, r, lead.Channel{}, 1)
		requireSent(t, first)
		amended := *r
		changed := *r.Lead
		changed.Company = "Difference Engines"
		amended.Lead, amended.Amendment, amended.Amends = &changed, 1, r.LeadID
		requireSent(t, Notify(ctx, t, ch, &amended, lead.Channel{Receipt: first.Receipt}, 1))
		if caps.Update {
			if n := s.StandIn.Messages(r.ExternalRef); n != 1 {
				t.Errorf("%d messages: a kind that updates its messages updates the chain's", n)
			}
		} else if n := s.StandIn.Distinct(r.ExternalRef); n != 2 {
			t.Errorf("%d messages: the amendment is announced in one of its own", n)
		}
		if text := s.StandIn.Text(r.ExternalRef); !strings.Contains(text, "Difference Engines") {
			t.Errorf("the latest message %q does not show the amendment", text)
		}
	})

	t.Run("VisitorTextBreaksNoLimit", func(t *testing.T) {
		ch, s := h.New(t)
		r := Record(t)
		l := *r.Lead
		l.Name = "<!channel> Eve\r\nBcc: victim@example.com \u202egnp.exe"
		l.Company = "<https://evil.example|click> & *bold* _it_ [link](https://evil.example)"
		l.Message = strings.Repeat("x", 4990) + " <@U1>"
		r.Lead = &l
		requireSent(t, Notify(ctx, t, ch, r, lead.Channel{}, 1))
		if n := s.StandIn.Messages(r.ExternalRef); n != 1 {
			t.Errorf("%d messages, want 1", n)
		}
	})

	t.Run("RefusedCredentials", func(t *testing.T) {
		ch, s := h.New(t)
		s.StandIn.Inject(RefuseCredentials)
		r := Record(t)
		_, err := ch.Send(ctx, r, "")
		errs.add(err)
		requireClass(t, err, destination.Unauthorized)
		s.StandIn.Inject(Restore)
		requireSent(t, Notify(ctx, t, ch, r, lead.Channel{}, 1))
	})

	t.Run("RateLimited", func(t *testing.T) {
		ch, s := h.New(t)
		s.StandIn.Inject(RateLimit)
		_, err := ch.Send(ctx, Record(t), "")
		errs.add(err)
		requireClass(t, err, destination.Transient)
		if e, ok := destination.AsError(err); ok && e.RetryAfter <= 0 {
			t.Errorf("a rate-limit answer without the wait it asks for: %v", err)
		}
	})

	t.Run("ServerError", func(t *testing.T) {
		ch, s := h.New(t)
		s.StandIn.Inject(FailServer)
		_, err := ch.Send(ctx, Record(t), "")
		errs.add(err)
		requireClass(t, err, destination.Transient)
	})

	t.Run("RejectedMessageGivesTheChannelUp", func(t *testing.T) {
		ch, s := h.New(t)
		s.StandIn.Inject(RejectMessage)
		r := Record(t)
		st := Notify(ctx, t, ch, r, lead.Channel{}, 1)
		if st.State != lead.ChannelFailed {
			t.Errorf("channel %s, want failed (given up)", st.State)
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

// Notify runs the notification step of r on channel ch alone, from the
// channel's state c, as the worker does, through lead.Next, for at most
// attempts attempts, and returns the channel's state at the end.
func Notify(ctx context.Context, t *testing.T, ch destination.Channel, r *destination.Record, c lead.Channel, attempts int) lead.Channel {
	t.Helper()
	c.Name = "channel"
	chain := destination.Receipt(c.Receipt)
	c.Receipt = ""
	s := lead.State{Enrichment: lead.EnrichmentData, CRM: lead.CRMAccepted, CRMID: "crm_1", ChannelsSet: true, Amendment: r.Amendment}
	s.Channels[0] = c
	for n := 1; n <= attempts; n++ {
		in := lead.Input{Key: lead.Key{State: lead.KeyProcessing}, Held: true, LastAttempt: n == attempts, Now: time.Now().Unix()}
		in.ChannelCaps[0] = ch.Capabilities()
		for {
			a, next := lead.Next(s, in)
			s = next
			if a.Kind != lead.ActNotify && a.Kind != lead.ActFind {
				break
			}
			res := &lead.Result{Action: a}
			var (
				rc  destination.Receipt
				err error
			)
			if a.Kind == lead.ActFind {
				rc, res.Found, err = ch.Find(ctx, r, time.Unix(s.Channels[0].Since, 0))
			} else {
				rc, err = ch.Send(ctx, r, chain)
			}
			res.Receipt, res.Failure = string(rc), FailureOf(err)
			in.Note(res)
		}
		if done := s.Channels[0].State; done == lead.ChannelSent || done == lead.ChannelFailed {
			break
		}
	}
	return s.Channels[0]
}

func requireSent(t *testing.T, c lead.Channel) {
	t.Helper()
	if c.State != lead.ChannelSent {
		t.Fatalf("channel %s, want sent", c.State)
	}
}
