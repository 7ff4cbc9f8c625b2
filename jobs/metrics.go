package jobs

import (
	"context"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/rivertype"

	"github.com/leadintake/leadintake/internal/metrics"
	"github.com/leadintake/leadintake/lead"
	"github.com/leadintake/leadintake/store"
)

// Metrics are the worker's collectors. A nil *Metrics records nothing.
type Metrics struct {
	leads     *prometheus.CounterVec
	jobs      *prometheus.CounterVec
	reconcile *prometheus.CounterVec
	deleted   prometheus.Counter
	callbacks *prometheus.CounterVec
	delivered prometheus.Histogram
	erased    *prometheus.CounterVec
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
		callbacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leadintake_callback_deliveries_total",
			Help: "Callback delivery attempts by outcome: delivered, retried (a failure to try again), given_up.",
		}, []string{"outcome"}),
		delivered: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "leadintake_callback_delivery_seconds",
			Help:    "Time from a key's finish to the delivery of its callback.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, 21600, 86400},
		}),
	}
	m.erased = NewErasedCounter(reg)
	reg.MustRegister(m.leads, m.jobs, m.reconcile, m.deleted, m.callbacks, m.delivered)
	for _, o := range []string{"delivered", "retried", "given_up"} {
		m.callbacks.WithLabelValues(o)
	}
	for _, o := range []string{string(lead.OutcomeCompleted), string(lead.OutcomeCRMRejected),
		string(lead.OutcomeDownstreamUnavailable), string(lead.KeyNeedsReconciliation)} {
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

func (m *Metrics) callbackDelivery(outcome string, age time.Duration) {
	if m == nil {
		return
	}
	m.callbacks.WithLabelValues(outcome).Inc()
	if outcome == "delivered" {
		m.delivered.Observe(age.Seconds())
	}
}

// NewPendingCallbacksCollector returns a collector of
// leadintake_callback_oldest_pending_age_seconds (read at most every 10 s;
// database-wide: aggregate it with max across workers).
func NewPendingCallbacksCollector(st *store.Store) prometheus.Collector {
	age := prometheus.NewDesc("leadintake_callback_oldest_pending_age_seconds",
		"Age of the oldest callback delivery not yet delivered nor given up (database-wide); 0 when none is.", nil, nil)
	return &metrics.Cached[time.Duration]{
		Descs: []*prometheus.Desc{age}, Every: 10 * time.Second,
		Read: st.OldestPendingCallback,
		Report: func(oldest time.Duration, gauge metrics.Gauge) {
			gauge(age, oldest.Seconds())
		},
	}
}

// NewErasedCounter registers leadintake_leads_erased_total{reason} on reg:
// the worker counts the erasures of retention, the api those on request.
func NewErasedCounter(reg prometheus.Registerer) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "leadintake_leads_erased_total",
		Help: "Leads whose personal data was erased, by reason: retention (LEAD_RETENTION passed) or request.",
	}, []string{"reason"})
	reg.MustRegister(c)
	c.WithLabelValues("retention")
	c.WithLabelValues("request")
	return c
}

func (m *Metrics) leadsErased(reason string, n int64) {
	if m != nil {
		m.erased.WithLabelValues(reason).Add(float64(n))
	}
}

func (m *Metrics) keysDeleted(n int64) {
	if m != nil {
		m.deleted.Add(float64(n))
	}
}

// queueFigures are the backlog of River's queues, and the age of the
// oldest job waiting in each, by queue name.
type queueFigures struct {
	counts []*riverdriver.JobCountByQueueAndStateResult
	oldest map[string]float64
}

// NewQueuesCollector returns a collector of leadintake_queue_jobs{queue,state}
// (jobs available and running) and
// leadintake_queue_oldest_available_seconds{queue} for the named queues,
// asked of River's driver (read at most every 10 s; database-wide:
// aggregate with max across workers).
func NewQueuesCollector(client *river.Client[pgx.Tx], names ...string) prometheus.Collector {
	jobs := prometheus.NewDesc("leadintake_queue_jobs",
		"River jobs by queue and state: available (waiting for a worker) and running (database-wide).", []string{"queue", "state"}, nil)
	oldest := prometheus.NewDesc("leadintake_queue_oldest_available_seconds",
		"How long the oldest job available in the queue has waited for a worker (database-wide); 0 when none waits.", []string{"queue"}, nil)
	return &metrics.Cached[queueFigures]{
		Descs: []*prometheus.Desc{jobs, oldest}, Every: 10 * time.Second,
		Read: func(ctx context.Context) (queueFigures, error) {
			counts, err := client.Driver().GetExecutor().JobCountByQueueAndState(ctx,
				&riverdriver.JobCountByQueueAndStateParams{QueueNames: names})
			if err != nil {
				return queueFigures{}, err
			}
			f := queueFigures{counts: counts, oldest: map[string]float64{}}
			for _, name := range names {
				res, err := client.JobList(ctx, river.NewJobListParams().Queues(name).
					States(rivertype.JobStateAvailable).OrderBy(river.JobListOrderByTime, river.SortOrderAsc).First(1))
				if err != nil {
					return queueFigures{}, err
				}
				if len(res.Jobs) == 1 {
					f.oldest[name] = max(0, time.Since(res.Jobs[0].ScheduledAt).Seconds())
				}
			}
			return f, nil
		},
		Report: func(f queueFigures, gauge metrics.Gauge) {
			for _, c := range f.counts {
				gauge(jobs, float64(c.CountAvailable), c.Queue, "available")
				gauge(jobs, float64(c.CountRunning), c.Queue, "running")
			}
			for _, name := range names {
				gauge(oldest, f.oldest[name], name)
			}
		},
	}
}

// NewDownstreamsCollector returns a collector of what every worker of the
// database knows of each downstream: leadintake_downstream_up{downstream},
// leadintake_downstream_unauthorized{downstream},
// leadintake_leads_waiting{downstream} and
// leadintake_leads_waiting_oldest_seconds{downstream} (read at most every
// 5 s; database-wide: aggregate with max across workers). While a read
// fails, the last figures stay: an outage's alert holds through a blip of
// the database.
func NewDownstreamsCollector(st *store.Store) prometheus.Collector {
	up := prometheus.NewDesc("leadintake_downstream_up",
		"1 while the downstream answers, 0 while it is down: its calls fail for every lead that tries it (database-wide).", []string{"downstream"}, nil)
	unauthorized := prometheus.NewDesc("leadintake_downstream_unauthorized",
		"1 while the destination refuses its credentials (a revoked token, a deleted webhook): its leads wait until a call is accepted again, after the clients file is corrected (database-wide).", []string{"downstream"}, nil)
	waiting := prometheus.NewDesc("leadintake_leads_waiting",
		"Leads waiting for the downstream, down, holding calls or out of rate limit, without spending attempts (database-wide).", []string{"downstream"}, nil)
	waitAge := prometheus.NewDesc("leadintake_leads_waiting_oldest_seconds",
		"How long the lead that has waited longest for the downstream has waited (database-wide); 0 when none waits.", []string{"downstream"}, nil)
	return &metrics.Cached[[]store.DownstreamState]{
		Descs: []*prometheus.Desc{up, unauthorized, waiting, waitAge}, Every: 5 * time.Second, Stale: true,
		Read: st.DownstreamStates,
		Report: func(states []store.DownstreamState, gauge metrics.Gauge) {
			for _, s := range states {
				isUp := 0.0
				if s.Up {
					isUp = 1
				}
				gauge(up, isUp, s.Name)
				refused := 0.0
				if s.Unauthorized {
					refused = 1
				}
				gauge(unauthorized, refused, s.Name)
				gauge(waiting, float64(s.Waiting), s.Name)
				gauge(waitAge, s.OldestWaiting.Seconds(), s.Name)
			}
		},
	}
}
