package jobs

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the worker's own collectors. A nil *Metrics records nothing.
type Metrics struct {
	leads     *prometheus.CounterVec
	attempts  *prometheus.CounterVec
	reconcile *prometheus.CounterVec
	deleted   prometheus.Counter
}

// NewMetrics registers the worker's collectors on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		leads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leadintake_leads_finished_total",
			Help: "Leads finished, by outcome: completed, crm_rejected, downstream_unavailable, needs_reconciliation.",
		}, []string{"outcome"}),
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leadintake_lead_attempts_total",
			Help: "Attempts of ProcessLead jobs by result: finished, retry, nothing_to_do.",
		}, []string{"result"}),
		reconcile: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leadintake_reconcile_actions_total",
			Help: "What the reconciler did: found (CRM record found, lead resumed), reposted (definite 404, posted again), unresolved (look-up failed, left for the next round), orphan_finished (a key whose job ended without a final response).",
		}, []string{"action"}),
		deleted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "leadintake_keys_deleted_total",
			Help: "Expired keys deleted by the clean-up.",
		}),
	}
	reg.MustRegister(m.leads, m.attempts, m.reconcile, m.deleted)
	for _, o := range []string{outcomeCompleted, outcomeCRMRejected, outcomeDownstreamUnavail, outcomeNeedsReconciliation} {
		m.leads.WithLabelValues(o)
	}
	for _, a := range []string{"found", "reposted", "unresolved", "orphan_finished"} {
		m.reconcile.WithLabelValues(a)
	}
	return m
}

func (m *Metrics) leadFinished(outcome string) {
	if m != nil {
		m.leads.WithLabelValues(outcome).Inc()
	}
}

func (m *Metrics) attempt(result string) {
	if m != nil {
		m.attempts.WithLabelValues(result).Inc()
	}
}

func (m *Metrics) reconciled(action string) {
	if m != nil {
		m.reconcile.WithLabelValues(action).Inc()
	}
}

func (m *Metrics) keysDeleted(n int64) {
	if m != nil {
		m.deleted.Add(float64(n))
	}
}
