package intake

import (
	"context"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/leadintake/leadintake/callers"
	"github.com/leadintake/leadintake/internal/metrics"
	"github.com/leadintake/leadintake/lead"
	"github.com/leadintake/leadintake/spam"
	"github.com/leadintake/leadintake/store"
)

// Metrics are the API's Prometheus collectors. A nil *Metrics records
// nothing.
type Metrics struct {
	submissions *prometheus.CounterVec
	requests    *prometheus.HistogramVec
	spam        *prometheus.CounterVec
}

// NewMetrics registers the API's collectors on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		submissions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leadintake_submissions_total",
			Help: "Submissions (POST /v1/leads) by outcome: claimed, reopened, replayed, in_progress, mismatch, supersedes_unknown, already_superseded, quarantined, spam_refused, refused, unavailable, rate_limited.",
		}, []string{"outcome"}),
		requests: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "leadintake_http_request_duration_seconds",
			Help:    "Time to answer a request of the public API, by route, method and status.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"route", "method", "status"}),
	}
	m.spam = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "leadintake_spam_total",
		Help: "Web pages' submissions judged spam, by reason (no_signals, honeypot, too_fast, captcha_failed; one verdict may count several) and action (quarantine, refuse).",
	}, []string{"reason", "action"})
	reg.MustRegister(m.submissions, m.requests, m.spam)
	for _, r := range spam.Reasons {
		for _, a := range []string{callers.SpamQuarantine, callers.SpamRefuse} {
			m.spam.WithLabelValues(r, a)
		}
	}
	for _, o := range []string{"claimed", "reopened", "replayed", "in_progress", "mismatch", "supersedes_unknown",
		"already_superseded", "quarantined", "spam_refused", outcomeRefused, outcomeUnavailable, outcomeRateLimited} {
		m.submissions.WithLabelValues(o)
	}
	return m
}

// spamVerdict counts a verdict of spam: once for each of its reasons.
func (m *Metrics) spamVerdict(reasons []string, action string) {
	if m == nil {
		return
	}
	for _, r := range reasons {
		m.spam.WithLabelValues(r, action).Inc()
	}
}

func (m *Metrics) observeRequest(method, route string, status int, outcome string, elapsed time.Duration) {
	if m == nil {
		return
	}
	m.requests.WithLabelValues(route, method, strconv.Itoa(status)).Observe(elapsed.Seconds())
	if route == routeLeads && method == http.MethodPost && outcome != "" {
		m.submissions.WithLabelValues(outcome).Inc()
	}
}

// keyStateCacheFor is how long the key states read stand for scrapes.
const keyStateCacheFor = 10 * time.Second

// keyCounts are the keys by state, and the age of the oldest processing
// key.
type keyCounts struct {
	byState map[lead.KeyState]float64
	oldest  float64
}

// NewKeyStateCollector returns a collector of leadintake_keys{state} and
// leadintake_oldest_processing_key_age_seconds, and of leadintake_ready
// (each read at most every keyStateCacheFor). Every process that registers
// it reports the same database-wide key figures: aggregate them with max,
// not sum.
func NewKeyStateCollector(st *store.Store, logger *slog.Logger) prometheus.Collector {
	keys := prometheus.NewDesc("leadintake_keys",
		"Idempotency keys by state (database-wide; needs_reconciliation needs an operator's eye).", []string{"state"}, nil)
	oldest := prometheus.NewDesc("leadintake_oldest_processing_key_age_seconds",
		"Age of the oldest key still processing (database-wide); 0 when there is none.", nil, nil)
	ready := prometheus.NewDesc("leadintake_ready",
		"1 when this api process is ready (the database answers and holds the migrations it needs, as /readyz says), else 0.", nil, nil)
	return metrics.Collectors{
		&metrics.Cached[float64]{
			Descs: []*prometheus.Desc{ready}, Every: keyStateCacheFor,
			Read: func(ctx context.Context) (float64, error) {
				if st.Ready(ctx) != nil {
					return 0, nil
				}
				return 1, nil
			},
			Report: func(isReady float64, gauge metrics.Gauge) { gauge(ready, isReady) },
		},
		&metrics.Cached[keyCounts]{
			Descs: []*prometheus.Desc{keys, oldest}, Every: keyStateCacheFor,
			Read: func(ctx context.Context) (keyCounts, error) {
				byState, age, err := st.KeyCounts(ctx)
				if err != nil {
					logger.Warn("read key states for metrics", slog.String("error", err.Error()))
				}
				return keyCounts{byState, age}, err
			},
			Report: func(c keyCounts, gauge metrics.Gauge) {
				for _, state := range lead.KeyStates {
					gauge(keys, c.byState[state], string(state))
				}
				gauge(oldest, c.oldest)
			},
		},
	}
}
