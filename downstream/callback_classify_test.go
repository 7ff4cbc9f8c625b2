package downstream_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/leadintake/leadintake/destination"
	"github.com/leadintake/leadintake/downstream"
	"github.com/leadintake/leadintake/webhook"
)

// deliver makes one delivery to a server answering with h, and returns its
// error as a *destination.Error (nil for a delivery).
func deliver(t *testing.T, cb *downstream.Callbacks, h http.Handler) *destination.Error {
	t.Helper()
	secret, err := webhook.ParseSecret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	err = cb.Deliver(t.Context(), srv.URL+"/hook", secret, "msg_1", []byte(`{"lead_id":"l1"}`))
	if err == nil {
		return nil
	}
	e, ok := destination.AsError(err)
	if !ok {
		t.Fatalf("error %v (%T), want a *destination.Error", err, err)
	}
	if e.Op != downstream.TargetCallback {
		t.Errorf("error %q: op %q, want callback", e, e.Op)
	}
	return e
}

// The callbacks classify the receiver's answers by their status: a 5xx,
// 408 and 429 are worth another attempt (a 5xx may have been applied); any
// other 4xx (409, 401 and 403 too), and a redirect, is the receiver's
// verdict.
func TestCallbackClassifiesStatuses(t *testing.T) {
	t.Parallel()

	cb := downstream.NewCallbacks(patience, nil)
	tests := []struct {
		status               int
		transient, uncertain bool
	}{
		{http.StatusBadRequest, false, false},
		{http.StatusUnauthorized, false, false},
		{http.StatusForbidden, false, false},
		{http.StatusNotFound, false, false},
		{http.StatusRequestTimeout, true, false},
		{http.StatusConflict, false, true},
		{http.StatusGone, false, false},
		{http.StatusUnprocessableEntity, false, false},
		{http.StatusTooManyRequests, true, false},
		{http.StatusInternalServerError, true, true},
		{http.StatusBadGateway, true, true},
		{http.StatusServiceUnavailable, true, true},
		{http.StatusGatewayTimeout, true, true},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.status), func(t *testing.T) {
			t.Parallel()
			e := deliver(t, cb, answer(tt.status, `{"error":"no"}`))
			want := destination.Rejected
			if tt.transient {
				want = destination.Transient
			}
			if e == nil || e.Status != tt.status || e.Class != want || e.Uncertain != tt.uncertain {
				t.Fatalf("error %+v, want status %d, %s, uncertain %t", e, tt.status, want, tt.uncertain)
			}
		})
	}
	for _, status := range []int{http.StatusOK, http.StatusAccepted, http.StatusNoContent} {
		if e := deliver(t, cb, answer(status, "")); e != nil {
			t.Errorf("%d: %v, want a delivery", status, e)
		}
	}
}

func TestCallbackRetryAfter(t *testing.T) {
	t.Parallel()

	cb := downstream.NewCallbacks(patience, nil)
	seconds := func(v string) func(time.Time) string { return func(time.Time) string { return v } }
	date := func(in time.Duration) func(time.Time) string {
		return func(now time.Time) string { return now.Add(in).UTC().Format(http.TimeFormat) }
	}
	tests := []struct {
		name   string
		status int
		// header returns the Retry-After sent at now; "" sends none.
		header func(now time.Time) string
		// min and max bound the delay read.
		min, max time.Duration
	}{
		{"Seconds", http.StatusServiceUnavailable, seconds("2"), 2 * time.Second, 2 * time.Second},
		{"SecondsOnTooManyRequests", http.StatusTooManyRequests, seconds("120"), 2 * time.Minute, 2 * time.Minute},
		{"SecondsOnRequestTimeout", http.StatusRequestTimeout, seconds("5"), 5 * time.Second, 5 * time.Second},
		{"SecondsCappedAtAnHour", http.StatusServiceUnavailable, seconds("7200"), time.Hour, time.Hour},
		{"HugeSecondsCappedAtAnHour", http.StatusServiceUnavailable, seconds("1000000000000"), time.Hour, time.Hour},
		{"OverflowingSecondsCappedAtAnHour", http.StatusServiceUnavailable, seconds("99999999999999999999999"), time.Hour, time.Hour},
		{"OverflowingNegativeSeconds", http.StatusServiceUnavailable, seconds("-99999999999999999999999"), 0, 0},
		// An HTTP date has whole seconds, and the call takes a moment.
		{"HTTPDate", http.StatusServiceUnavailable, date(90 * time.Second), 80 * time.Second, 90 * time.Second},
		{"HTTPDateCappedAtAnHour", http.StatusServiceUnavailable, date(3 * time.Hour), time.Hour, time.Hour},
		{"HTTPDateInThePast", http.StatusServiceUnavailable, date(-time.Hour), 0, 0},
		{"Zero", http.StatusServiceUnavailable, seconds("0"), 0, 0},
		{"Negative", http.StatusServiceUnavailable, seconds("-5"), 0, 0},
		{"Garbage", http.StatusServiceUnavailable, seconds("soon"), 0, 0},
		{"None", http.StatusServiceUnavailable, seconds(""), 0, 0},
		{"IgnoredOnARefusal", http.StatusBadRequest, seconds("30"), 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := deliver(t, cb, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				var headers []string
				if v := tt.header(time.Now()); v != "" {
					headers = []string{"Retry-After", v}
				}
				answer(tt.status, `{"error":"later"}`, headers...)(w, r)
			}))
			if e == nil || e.RetryAfter < tt.min || e.RetryAfter > tt.max {
				t.Errorf("error %+v, want RetryAfter within [%v, %v]", e, tt.min, tt.max)
			}
		})
	}
}

func TestCallbackTransportFailures(t *testing.T) {
	t.Parallel()

	secret, err := webhook.ParseSecret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	if err != nil {
		t.Fatal(err)
	}

	t.Run("ConnectionRefusedIsTransientAndNotUncertain", func(t *testing.T) {
		t.Parallel()
		srv := httptest.NewServer(answer(http.StatusOK, ""))
		// Nothing listens there any more.
		srv.Close()
		err := downstream.NewCallbacks(patience, nil).Deliver(t.Context(), srv.URL+"/hook", secret, "msg_1", []byte(`{}`))
		if e, ok := destination.AsError(err); !ok || e.Class != destination.Transient || e.Uncertain || e.Status != 0 {
			t.Errorf("error %v, want transient and certain, without a status", err)
		}
	})

	t.Run("DroppedAfterRequestIsTransientAndUncertain", func(t *testing.T) {
		t.Parallel()
		e := deliver(t, downstream.NewCallbacks(patience, nil), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			dropConnection(w)
		}))
		if e == nil || e.Class != destination.Transient || !e.Uncertain {
			t.Errorf("error %+v, want transient and uncertain", e)
		}
	})

	t.Run("HangPastTimeoutIsTransientAndUncertain", func(t *testing.T) {
		t.Parallel()
		start := time.Now()
		e := deliver(t, downstream.NewCallbacks(200*time.Millisecond, nil), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			<-r.Context().Done()
		}))
		if e == nil || e.Class != destination.Transient || !e.Uncertain {
			t.Errorf("error %+v, want transient and uncertain", e)
		}
		if elapsed := time.Since(start); elapsed > patience/2 {
			t.Errorf("Deliver returned after %v: the timeout did not end it", elapsed)
		}
	})
}

// The callbacks count their deliveries by result, and time them.
func TestCallbackMetrics(t *testing.T) {
	t.Parallel()

	reg := prometheus.NewRegistry()
	cb := downstream.NewCallbacks(patience, downstream.NewMetrics(reg))
	for _, status := range []int{http.StatusOK, http.StatusServiceUnavailable, http.StatusBadRequest, http.StatusNoContent} {
		deliver(t, cb, answer(status, ""))
	}

	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	var observed uint64
	for _, f := range families {
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			switch f.GetName() {
			case "leadintake_downstream_calls_total":
				got[labels["downstream"]+"/"+labels["target"]+"/"+labels["result"]] = m.GetCounter().GetValue()
			case "leadintake_downstream_call_duration_seconds":
				observed += m.GetHistogram().GetSampleCount()
			}
		}
	}
	want := map[string]float64{
		"callbacks/callback/success": 2, "callbacks/callback/transient": 1, "callbacks/callback/permanent": 1,
	}
	if len(got) != len(want) {
		t.Errorf("calls %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("calls %s = %v, want %v (all: %v)", k, got[k], v, got)
		}
	}
	if observed != 4 {
		t.Errorf("%d durations observed, want 4", observed)
	}
}
