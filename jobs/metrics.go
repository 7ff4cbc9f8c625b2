package jobs

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/rivertype"

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

// pendingCallbacks reports, on each scrape, the age of the oldest callback
// delivery still owed (read at most every 10 s).
type pendingCallbacks struct {
	store  *store.Store
	desc   *prometheus.Desc
	mu     sync.Mutex
	readAt time.Time
	age    float64
}

// NewPendingCallbacksCollector returns a collector of
// leadintake_callback_oldest_pending_age_seconds (database-wide: aggregate
// it with max across workers).
func NewPendingCallbacksCollector(st *store.Store) prometheus.Collector {
	return &pendingCallbacks{store: st, desc: prometheus.NewDesc("leadintake_callback_oldest_pending_age_seconds",
		"Age of the oldest callback delivery not yet delivered nor given up (database-wide); 0 when none is.", nil, nil)}
}

func (c *pendingCallbacks) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *pendingCallbacks) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if time.Since(c.readAt) > 10*time.Second {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		age, err := c.store.OldestPendingCallback(ctx)
		cancel()
		if err != nil {
			return
		}
		c.age, c.readAt = age.Seconds(), time.Now()
	}
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, c.age)
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

// queues reports, on each scrape, the backlog of River's queues (jobs
// available and running) and the age of the oldest job waiting in each,
// asked of River's driver (read at most every 10 s; database-wide:
// aggregate with max across workers).
type queues struct {
	client *river.Client[pgx.Tx]
	names  []string
	jobs   *prometheus.Desc
	oldest *prometheus.Desc

	mu      sync.Mutex
	readAt  time.Time
	counts  []*riverdriver.JobCountByQueueAndStateResult
	oldestS map[string]float64
}

// NewQueuesCollector returns a collector of leadintake_queue_jobs{queue,state}
// and leadintake_queue_oldest_available_seconds{queue} for the named queues.
func NewQueuesCollector(client *river.Client[pgx.Tx], names ...string) prometheus.Collector {
	return &queues{
		client: client, names: names,
		jobs: prometheus.NewDesc("leadintake_queue_jobs",
			"River jobs by queue and state: available (waiting for a worker) and running (database-wide).", []string{"queue", "state"}, nil),
		oldest: prometheus.NewDesc("leadintake_queue_oldest_available_seconds",
			"How long the oldest job available in the queue has waited for a worker (database-wide); 0 when none waits.", []string{"queue"}, nil),
	}
}

func (q *queues) Describe(ch chan<- *prometheus.Desc) {
	ch <- q.jobs
	ch <- q.oldest
}

func (q *queues) Collect(ch chan<- prometheus.Metric) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if time.Since(q.readAt) > 10*time.Second {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		counts, err := q.client.Driver().GetExecutor().JobCountByQueueAndState(ctx,
			&riverdriver.JobCountByQueueAndStateParams{QueueNames: q.names})
		if err != nil {
			return
		}
		oldest := map[string]float64{}
		for _, name := range q.names {
			res, err := q.client.JobList(ctx, river.NewJobListParams().Queues(name).
				States(rivertype.JobStateAvailable).OrderBy(river.JobListOrderByTime, river.SortOrderAsc).First(1))
			if err != nil {
				return
			}
			if len(res.Jobs) == 1 {
				oldest[name] = max(0, time.Since(res.Jobs[0].ScheduledAt).Seconds())
			}
		}
		q.counts, q.oldestS, q.readAt = counts, oldest, time.Now()
	}
	for _, c := range q.counts {
		ch <- prometheus.MustNewConstMetric(q.jobs, prometheus.GaugeValue, float64(c.CountAvailable), c.Queue, "available")
		ch <- prometheus.MustNewConstMetric(q.jobs, prometheus.GaugeValue, float64(c.CountRunning), c.Queue, "running")
	}
	for _, name := range q.names {
		ch <- prometheus.MustNewConstMetric(q.oldest, prometheus.GaugeValue, q.oldestS[name], name)
	}
}

// downstreams reports, on each scrape, what every worker of the database
// knows of each downstream (read at most every 5 s; database-wide:
// aggregate with max across workers): whether it is up, and the leads that
// wait for it.
type downstreams struct {
	store                *store.Store
	up, unauthorized, waiting, waitAge *prometheus.Desc

	mu     sync.Mutex
	readAt time.Time
	states []store.DownstreamState
}

// NewDownstreamsCollector returns a collector of
// leadintake_downstream_up{downstream}, leadintake_leads_waiting{downstream}
// and leadintake_leads_waiting_oldest_seconds{downstream}.
func NewDownstreamsCollector(st *store.Store) prometheus.Collector {
	return &downstreams{
		store: st,
		up: prometheus.NewDesc("leadintake_downstream_up",
			"1 while the downstream answers, 0 while it is down: its calls fail for every lead that tries it (database-wide).", []string{"downstream"}, nil),
		waiting: prometheus.NewDesc("leadintake_leads_waiting",
			"Leads waiting for the downstream, down, holding calls or out of rate limit, without spending attempts (database-wide).", []string{"downstream"}, nil),
		unauthorized: prometheus.NewDesc("leadintake_downstream_unauthorized",
			"1 while the destination refuses its credentials (a revoked token, a deleted webhook): its leads wait until a call is accepted again, after the clients file is corrected (database-wide).", []string{"downstream"}, nil),
		waitAge: prometheus.NewDesc("leadintake_leads_waiting_oldest_seconds",
			"How long the lead that has waited longest for the downstream has waited (database-wide); 0 when none waits.", []string{"downstream"}, nil),
	}
}

func (d *downstreams) Describe(ch chan<- *prometheus.Desc) {
	ch <- d.up
	ch <- d.unauthorized
	ch <- d.waiting
	ch <- d.waitAge
}

func (d *downstreams) Collect(ch chan<- prometheus.Metric) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if time.Since(d.readAt) > 5*time.Second {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		states, err := d.store.DownstreamStates(ctx)
		cancel()
		if err == nil {
			d.states, d.readAt = states, time.Now()
		}
	}
	for _, s := range d.states {
		up := 0.0
		if s.Up {
			up = 1
		}
		ch <- prometheus.MustNewConstMetric(d.up, prometheus.GaugeValue, up, s.Name)
		unauthorized := 0.0
		if s.Unauthorized {
			unauthorized = 1
		}
		ch <- prometheus.MustNewConstMetric(d.unauthorized, prometheus.GaugeValue, unauthorized, s.Name)
		ch <- prometheus.MustNewConstMetric(d.waiting, prometheus.GaugeValue, float64(s.Waiting), s.Name)
		ch <- prometheus.MustNewConstMetric(d.waitAge, prometheus.GaugeValue, s.OldestWaiting.Seconds(), s.Name)
	}
}
