// Package metrics holds what the api's and the worker's Prometheus
// collectors share: Cached, a collector of figures that cost a read of the
// database.
package metrics

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// readTimeout bounds one read of a Cached collector: a scrape must not wait
// for a database that hangs.
const readTimeout = 3 * time.Second

// Gauge reports one gauge of desc with value and labels.
type Gauge func(desc *prometheus.Desc, value float64, labels ...string)

// Cached is a collector of figures read from the database: it reads them
// at most once every Every, however often it is scraped (by every process
// that reports the same database-wide figures), and reports the last ones
// read. A read that fails is tried again at the next scrape; meanwhile
// nothing is reported, or, when Stale, the figures of the last read that
// succeeded.
type Cached[T any] struct {
	// Descs are the descriptions of everything Report reports.
	Descs []*prometheus.Desc
	Every time.Duration
	// Read reads the figures.
	Read func(ctx context.Context) (T, error)
	// Report reports figures as gauges.
	Report func(figures T, gauge Gauge)
	Stale  bool

	mu     sync.Mutex
	readAt time.Time
	last   T
}

// Describe sends Descs.
func (c *Cached[T]) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.Descs {
		ch <- d
	}
}

// Collect reports the figures, read again when the last read is older than
// Every.
func (c *Cached[T]) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if time.Since(c.readAt) > c.Every {
		ctx, cancel := context.WithTimeout(context.Background(), readTimeout)
		figures, err := c.Read(ctx)
		cancel()
		if err != nil && !c.Stale {
			return
		}
		if err == nil {
			c.last, c.readAt = figures, time.Now()
		}
	}
	c.Report(c.last, func(desc *prometheus.Desc, value float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, value, labels...)
	})
}

// Collectors is several collectors as one.
type Collectors []prometheus.Collector

// Describe describes every collector.
func (cs Collectors) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range cs {
		c.Describe(ch)
	}
}

// Collect collects every collector.
func (cs Collectors) Collect(ch chan<- prometheus.Metric) {
	for _, c := range cs {
		c.Collect(ch)
	}
}
