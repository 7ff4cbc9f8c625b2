package main

import (
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
)

// newJobEventCollector counts River's job events by kind and outcome
// (completed, failed, cancelled, snoozed) as leadintake_jobs_total.
func newJobEventCollector(client *river.Client[pgx.Tx]) prometheus.Collector {
	counter := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "leadintake_jobs_total",
		Help: "Job attempts worked by this worker, by kind and outcome (completed, failed, cancelled, snoozed).",
	}, []string{"kind", "outcome"})
	events, cancel := client.Subscribe(river.EventKindJobCompleted, river.EventKindJobFailed,
		river.EventKindJobCancelled, river.EventKindJobSnoozed)
	go func() {
		defer cancel()
		for ev := range events {
			if ev.Job == nil {
				continue
			}
			counter.WithLabelValues(ev.Job.Kind, strings.TrimPrefix(string(ev.Kind), "job_")).Inc()
		}
	}()
	return counter
}
