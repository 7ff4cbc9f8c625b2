package generic_test

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/leadintake/leadintake/destination"
	"github.com/leadintake/leadintake/destination/destinationtest"
	"github.com/leadintake/leadintake/destination/generic"
	"github.com/leadintake/leadintake/downstream/fake"
)

// standIn drives the generic fake downstream as the suite asks.
type standIn struct{ f *fake.Server }

func (s standIn) Inject(f destinationtest.Fault) {
	writes := []fake.Target{fake.CRMUpsert, fake.CRMCreate}
	switch f {
	case destinationtest.LoseAnswer:
		for _, t := range writes {
			s.f.Script(t, fake.Fault{DropAfterApply: true})
		}
	case destinationtest.FailServer:
		for _, t := range writes {
			s.f.Script(t, fake.Fault{Status: 503})
		}
	case destinationtest.RateLimit:
		for _, t := range writes {
			s.f.Script(t, fake.Fault{Status: 429, RetryAfter: "2"})
		}
	case destinationtest.RefuseCredentials:
		s.f.SetRefuseCredentials(true)
	case destinationtest.Restore:
		s.f.SetRefuseCredentials(false)
	}
}

func (s standIn) Records() int { return s.f.State().Totals.CRMRecords }

func (s standIn) Email(id string) string {
	for _, r := range s.f.State().CRM {
		for _, rid := range r.IDs {
			if rid != id || len(r.Bodies) == 0 {
				continue
			}
			var body struct {
				Email string `json:"email"`
			}
			_ = json.Unmarshal(r.Bodies[len(r.Bodies)-1], &body)
			return body.Email
		}
	}
	return ""
}

func harness(mode string) destinationtest.CRMHarness {
	return destinationtest.CRMHarness{
		New: func(t *testing.T) (destination.CRM, destinationtest.Setup) {
			f := fake.New(&fake.Options{CRMToken: "crm-secret-token"})
			ts := httptest.NewServer(f)
			t.Cleanup(ts.Close)
			t.Cleanup(f.Close)
			c := &destination.Config{Name: "crm", Kind: generic.Kind, Values: map[string]string{
				"url": ts.URL + "/crm", "token": "crm-secret-token", "mode": mode,
			}}
			if err := generic.Spec.Validate(c); err != nil {
				t.Fatal(err)
			}
			crm, err := generic.Spec.NewCRM(c)
			if err != nil {
				t.Fatal(err)
			}
			return crm, destinationtest.Setup{StandIn: standIn{f}, Secrets: []string{"crm-secret-token"}}
		},
		Reject: func(r *destination.Record) {
			l := *r.Lead
			l.Email = "" // the protocol's one required field
			r.Lead = &l
		},
	}
}

func TestConformanceUpsert(t *testing.T) { destinationtest.RunCRM(t, harness(generic.ModeUpsert)) }

func TestConformanceCreate(t *testing.T) { destinationtest.RunCRM(t, harness(generic.ModeCreate)) }

// channelStandIn drives the fake's notification service as the suite asks.
type channelStandIn struct{ f *fake.Server }

func (s channelStandIn) Inject(f destinationtest.Fault) {
	switch f {
	case destinationtest.LoseAnswer:
		s.f.Script(fake.Notify, fake.Fault{DropAfterApply: true})
	case destinationtest.FailServer:
		s.f.Script(fake.Notify, fake.Fault{Status: 503})
	case destinationtest.RateLimit:
		s.f.Script(fake.Notify, fake.Fault{Status: 429, RetryAfter: "2"})
	case destinationtest.RejectMessage:
		s.f.Script(fake.Notify, fake.Fault{Status: 422})
	case destinationtest.RefuseCredentials:
		s.f.SetRefuseCredentials(true)
	case destinationtest.Restore:
		s.f.SetRefuseCredentials(false)
	}
}

// keys are the notification keys of ref: ref:notify, ref:notify:N.
func (s channelStandIn) keys(ref string) map[string]fake.Notification {
	out := map[string]fake.Notification{}
	for k, n := range s.f.State().Notifications {
		if k == ref+":notify" || strings.HasPrefix(k, ref+":notify:") {
			out[k] = n
		}
	}
	return out
}

func (s channelStandIn) Messages(ref string) int {
	n := 0
	for _, m := range s.keys(ref) {
		n += m.Deliveries
	}
	return n
}

func (s channelStandIn) Distinct(ref string) int { return len(s.keys(ref)) }

func (s channelStandIn) Text(ref string) string {
	keys := s.keys(ref)
	latest := ""
	for k := range keys {
		if len(k) > len(latest) || len(k) == len(latest) && k > latest {
			latest = k
		}
	}
	if latest == "" {
		return ""
	}
	n, _ := s.f.Notification(latest)
	return string(n.FirstBody)
}

func TestConformanceChannel(t *testing.T) {
	destinationtest.RunChannel(t, destinationtest.ChannelHarness{
		New: func(t *testing.T) (destination.Channel, destinationtest.ChannelSetup) {
			f := fake.New(&fake.Options{NotifyToken: "notify-secret-token"})
			ts := httptest.NewServer(f)
			t.Cleanup(ts.Close)
			t.Cleanup(f.Close)
			c := &destination.Config{Name: "notification", Kind: generic.Kind, Values: map[string]string{
				"url": ts.URL + "/notify", "token": "notify-secret-token",
			}}
			if err := generic.Spec.Validate(c); err != nil {
				t.Fatal(err)
			}
			ch, err := generic.Spec.NewChannel(c)
			if err != nil {
				t.Fatal(err)
			}
			return ch, destinationtest.ChannelSetup{StandIn: channelStandIn{f}, Secrets: []string{"notify-secret-token"}}
		},
	})
}
