package jobs_test

import (
	"math"
	"testing"
	"time"

	"github.com/riverqueue/river/rivertype"

	"github.com/leadintake/leadintake/jobs"
	"github.com/leadintake/leadintake/store"
)

func TestRetryPolicy(t *testing.T) {
	t.Parallel()

	// Delays are random: each case draws many times.
	const draws = 200

	t.Run("DoublesWithinTheUpperHalf", func(t *testing.T) {
		t.Parallel()
		p := &jobs.RetryPolicy{Base: time.Second, Max: 10 * time.Minute}
		for attempt, d := range map[int]time.Duration{
			1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 5: 16 * time.Second, 10: 512 * time.Second,
		} {
			requireDelays(t, p, attempt, d/2, d)
		}
	})

	t.Run("CappedAtMax", func(t *testing.T) {
		t.Parallel()
		p := &jobs.RetryPolicy{Base: time.Second, Max: 10 * time.Minute}
		for _, attempt := range []int{11, 12, 30, 62, 63, 64, 100, math.MaxInt32} {
			requireDelays(t, p, attempt, 5*time.Minute, 10*time.Minute)
		}
	})

	t.Run("NoOverflow", func(t *testing.T) {
		t.Parallel()
		// A century as Max: 1 h doubled 20 times passes it.
		p := &jobs.RetryPolicy{Base: time.Hour, Max: 100 * 365 * 24 * time.Hour}
		requireDelays(t, p, 20, 1<<18*time.Hour, 1<<19*time.Hour)
		for _, attempt := range []int{21, 40, 62, 63, 100} {
			requireDelays(t, p, attempt, p.Max/2, p.Max)
		}
		// The largest Max there is, from the smallest Base.
		p = &jobs.RetryPolicy{Base: 1, Max: math.MaxInt64}
		requireDelays(t, p, 62, 1<<60, 1<<61)
		for _, attempt := range []int{63, 64, 100} {
			requireDelays(t, p, attempt, math.MaxInt64/2, math.MaxInt64)
		}
	})

	t.Run("BaseAboveMaxIsMax", func(t *testing.T) {
		t.Parallel()
		p := &jobs.RetryPolicy{Base: time.Minute, Max: time.Second}
		requireDelays(t, p, 1, time.Second/2, time.Second)
	})

	t.Run("AttemptZeroIsBase", func(t *testing.T) {
		t.Parallel()
		p := &jobs.RetryPolicy{Base: time.Second, Max: time.Minute}
		requireDelays(t, p, 0, time.Second/2, time.Second)
	})

	t.Run("SpreadsRetries", func(t *testing.T) {
		t.Parallel()
		p := &jobs.RetryPolicy{Base: time.Second, Max: time.Minute}
		seen := map[time.Duration]bool{}
		for range draws {
			seen[p.Delay(3)] = true
		}
		if len(seen) < draws/2 {
			t.Errorf("%d distinct delays in %d draws: no jitter", len(seen), draws)
		}
	})

	t.Run("NextRetryIsNowPlusDelay", func(t *testing.T) {
		t.Parallel()
		now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
		p := &jobs.RetryPolicy{Base: time.Second, Max: time.Minute, Now: func() time.Time { return now }}
		for range draws {
			at := p.NextRetry(&rivertype.JobRow{Attempt: 3})
			if d := at.Sub(now); d < 2*time.Second || d > 4*time.Second {
				t.Fatalf("NextRetry after attempt 3 = now + %v, want within [2s, 4s]", d)
			}
		}
	})
}

// requireDelays draws p.Delay(attempt) and checks every draw is within
// [lo, hi].
func requireDelays(t *testing.T, p *jobs.RetryPolicy, attempt int, lo, hi time.Duration) {
	t.Helper()
	for range 200 {
		if d := p.Delay(attempt); d < lo || d > hi {
			t.Fatalf("Delay(%d) = %v, want within [%v, %v]", attempt, d, lo, hi)
		}
	}
}

func TestParseRateLimit(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]store.Limit{
		"20/s": {N: 20, Per: time.Second}, "100/m": {N: 100, Per: time.Minute}, "5/h": {N: 5, Per: time.Hour},
		"100/10s": {N: 100, Per: 10 * time.Second}, " 3/1m30s ": {N: 3, Per: 90 * time.Second},
	} {
		if got, err := jobs.ParseRateLimit(in); err != nil || got != want {
			t.Errorf("ParseRateLimit(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "lots", "0/s", "-1/s", "10", "10/", "10/d", "10/-1s", "10/0s", "x/s"} {
		if _, err := jobs.ParseRateLimit(bad); err == nil {
			t.Errorf("ParseRateLimit(%q): no error", bad)
		}
	}
}
