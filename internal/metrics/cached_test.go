package metrics_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/leadintake/leadintake/internal/metrics"
)

// scrape returns the values c reports.
func scrape(t *testing.T, c prometheus.Collector) []float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var values []float64
	for _, f := range families {
		for _, m := range f.GetMetric() {
			values = append(values, m.GetGauge().GetValue())
		}
	}
	return values
}

// A Cached collector reads at most once an interval; a failed read is
// tried again at the next scrape, and reports nothing meanwhile, or the
// last figures when Stale.
func TestCached(t *testing.T) {
	t.Parallel()
	for _, stale := range []bool{false, true} {
		desc := prometheus.NewDesc("figure", "A figure.", nil, nil)
		var (
			reads int
			fail  bool
		)
		c := &metrics.Cached[float64]{
			Descs: []*prometheus.Desc{desc}, Every: time.Hour, Stale: stale,
			Read: func(context.Context) (float64, error) {
				reads++
				if fail {
					return 0, errors.New("down")
				}
				return float64(reads), nil
			},
			Report: func(v float64, gauge metrics.Gauge) { gauge(desc, v) },
		}
		if got := scrape(t, c); !slices.Equal(got, []float64{1}) || reads != 1 {
			t.Fatalf("first scrape: %v after %d reads, want [1] after 1", got, reads)
		}
		if got := scrape(t, c); !slices.Equal(got, []float64{1}) || reads != 1 {
			t.Fatalf("second scrape within the interval: %v after %d reads, want the cached [1] after 1", got, reads)
		}

		c.Every = 0
		fail = true
		got := scrape(t, c)
		switch {
		case stale && !slices.Equal(got, []float64{1}):
			t.Errorf("stale: a failed read reports %v, want the last figure [1]", got)
		case !stale && len(got) != 0:
			t.Errorf("a failed read reports %v, want nothing", got)
		}
		fail = false
		before := reads
		if got := scrape(t, c); reads != before+1 || !slices.Equal(got, []float64{float64(reads)}) {
			t.Errorf("stale %v: the scrape after a failed read: %v after %d more reads, want a new read", stale, got, reads-before)
		}
	}
}
