package downstream

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics count downstream calls by target and result (success, not_found,
// transient, permanent) and time them. A nil *Metrics records nothing.
type Metrics struct {
	calls    *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

// NewMetrics registers the downstream collectors on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leadintake_downstream_calls_total",
			Help: "Downstream calls by target (enrichment, crm_upsert, crm_create, crm_lookup, notify) and result (success, not_found, transient, permanent).",
		}, []string{"target", "result"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "leadintake_downstream_call_duration_seconds",
			Help:    "Time a downstream call took, by target.",
			Buckets: []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"target"}),
	}
	reg.MustRegister(m.calls, m.duration)
	return m
}

func (m *Metrics) observe(target, result string, d time.Duration) {
	if m == nil {
		return
	}
	m.calls.WithLabelValues(target, result).Inc()
	m.duration.WithLabelValues(target).Observe(d.Seconds())
}
