package downstream

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics count calls to the downstreams (the enrichment service, each
// destination, the callbacks) by downstream, target and result (success,
// not_found, transient, permanent, unauthorized), and time them. A nil
// *Metrics records nothing.
type Metrics struct {
	calls    *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

// NewMetrics registers the downstream collectors on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leadintake_downstream_calls_total",
			Help: "Downstream calls by downstream (enrichment, a destination's name, callbacks), target (enrichment, crm_upsert, crm_create, crm_lookup, crm_update, crm_prepare, notify, notify_find, callback) and result (success, not_found, transient, permanent, unauthorized).",
		}, []string{"downstream", "target", "result"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "leadintake_downstream_call_duration_seconds",
			Help:    "Time a downstream call took, by downstream and target.",
			Buckets: []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"downstream", "target"}),
	}
	reg.MustRegister(m.calls, m.duration)
	return m
}

// Observe counts one call to downstream of target that ended in result,
// and its duration.
func (m *Metrics) Observe(downstream, target, result string, d time.Duration) {
	if m == nil {
		return
	}
	m.calls.WithLabelValues(downstream, target, result).Inc()
	m.duration.WithLabelValues(downstream, target).Observe(d.Seconds())
}

func (m *Metrics) observe(target, result string, d time.Duration) {
	m.Observe("callbacks", target, result, d)
}
