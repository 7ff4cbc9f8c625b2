package jobs_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/leadintake/leadintake/downstream/fake"
	"github.com/leadintake/leadintake/internal/testkit"
	"github.com/leadintake/leadintake/internal/tracing"
	"github.com/leadintake/leadintake/store"
)

// Trace ids of the requests of TestTraceFollowsTheKey.
const (
	traceA = "0af7651916cd43dd8448eb211c80319c"
	traceB = "1bf7651916cd43dd8448eb211c80319c"
	traceC = "2cf7651916cd43dd8448eb211c80319c"
)

func tracedContext(traceID string) context.Context {
	return tracing.WithTraceParent(context.Background(), "00-"+traceID+"-b7ad6b7169203331-01")
}

// traceIDs are the trace ids of the traceparents a target received, in
// order ("" for a call without one).
func traceIDs(f *fake.Server, target fake.Target) []string {
	var out []string
	for _, tp := range f.TraceParents(target) {
		parts := strings.Split(tp, "-")
		if len(parts) != 4 {
			out = append(out, "")
			continue
		}
		out = append(out, parts[1])
	}
	return out
}

// The downstream calls and callback deliveries of a lead carry the trace
// of the request that last claimed or re-opened its key: a redrive (an
// operator's, in a trace of its own) continues the claim's trace; a retry
// that re-opens the key starts its own. No tracer provider is set: the
// trace context is carried all the same.
func TestTraceFollowsTheKey(t *testing.T) {
	t.Parallel()
	bundle := setup(t, &setupOpts{MaxAttempts: 2})
	bundle.fake.Script(fake.CRMUpsert, fake.Fault{Status: 503}, fake.Fault{Status: 503})
	key := testkit.NewKey()
	sub := bundle.claimIn(t, tracedContext(traceA), nil, key, adaBody)
	if sub.Outcome != store.OutcomeClaimed {
		t.Fatalf("claim: %s", sub.Outcome)
	}
	bundle.secrets.add(key)
	requireFailed(t, bundle.waitFinished(t, key), sub.LeadID, http.StatusBadGateway, "downstream_unavailable")
	testkit.Eventually(t, "the failure's callback", func() bool { return len(bundle.fake.TraceParents(fake.Callback)) == 1 })

	// Redriven by an operator whose context has a trace of its own.
	bundle.fake.Script(fake.CRMUpsert, fake.Fault{Status: 503}, fake.Fault{Status: 503})
	if _, err := bundle.store.Redrive(tracedContext(traceC), &store.RedriveParams{ClientID: clientID, Keys: []string{key}, By: &store.Who{Name: "cli", Via: store.ViaCLI}}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "the redriven lead failed again, and its callback", func() bool {
		return len(bundle.fake.TraceParents(fake.Callback)) == 2
	})

	// Re-opened by a retry: its own trace from now on.
	again := bundle.claimIn(t, tracedContext(traceB), nil, key, adaBody)
	if again.Outcome != store.OutcomeReopened {
		t.Fatalf("retry: %s", again.Outcome)
	}
	testkit.Eventually(t, "the re-opened lead's callback", func() bool { return len(bundle.fake.TraceParents(fake.Callback)) == 3 })

	for _, c := range []struct {
		target fake.Target
		want   []string
	}{
		{fake.Enrichment, []string{traceA}},
		{fake.CRMUpsert, []string{traceA, traceA, traceA, traceA, traceB}},
		{fake.Notify, []string{traceB}},
		{fake.Callback, []string{traceA, traceA, traceB}},
	} {
		if got := traceIDs(bundle.fake, c.target); strings.Join(got, ",") != strings.Join(c.want, ",") {
			t.Errorf("%s: trace ids %q, want %q", c.target, got, c.want)
		}
	}
}
