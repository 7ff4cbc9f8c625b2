package jobs

import (
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"

	"github.com/leadintake/leadintake/lead"
	"github.com/leadintake/leadintake/store"
)

// Metrics are the worker's collectors. A nil *Metrics records nothing.
type Metrics struct {
	leads     *prometheus.CounterVec
	jobs      *prometheus.CounterVec
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
		jobs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leadintake_jobs_total",
			Help: "Job attempts worked by this worker, by kind and outcome (completed, failed, cancelled, snoozed).",
		}, []string{"kind", "outcome"}),
		reconcile: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leadintake_reconcile_actions_total",
			Help: "What the reconciler did: found (CRM record found, lead resumed), reposted (definite 404, posted again), unresolved (look-up failed, left for the next round), orphan_finished (a key whose job ended without a final response).",
		}, []string{"action"}),
		deleted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "leadintake_keys_deleted_total",
			Help: "Expired keys deleted by the clean-up.",
		}),
	}
	reg.MustRegister(m.leads, m.jobs, m.reconcile, m.deleted)
	for _, o := range []string{string(lead.OutcomeCompleted), string(lead.OutcomeCRMRejected),
		string(lead.OutcomeDownstreamUnavailable), string(store.KeyNeedsReconciliation)} {
		m.leads.WithLabelValues(o)
	}
	for _, a := range []string{"found", "reposted", "unresolved", "orphan_finished"} {
		m.reconcile.WithLabelValues(a)
	}
	return m
}

// CountJobEvents counts the job events of client (completed, failed,
// cancelled, snoozed) by kind, until the client stops.
func (m *Metrics) CountJobEvents(client *river.Client[pgx.Tx]) {
	if m == nil {
		return
	}
	events, cancel := client.Subscribe(river.EventKindJobCompleted, river.EventKindJobFailed,
		river.EventKindJobCancelled, river.EventKindJobSnoozed)
	go func() {
		defer cancel()
		for ev := range events {
			if ev.Job != nil {
				m.jobs.WithLabelValues(ev.Job.Kind, strings.TrimPrefix(string(ev.Kind), "job_")).Inc()
			}
		}
	}()
}

func (m *Metrics) leadFinished(outcome string) {
	if m != nil {
		m.leads.WithLabelValues(outcome).Inc()
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
