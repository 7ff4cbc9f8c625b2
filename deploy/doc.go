// Package deploy owns the files that run leadintake under observation: the
// Prometheus alerting rules and their unit tests (prometheus/alerts.yml,
// prometheus/alerts_test.yml), the scrape configuration of the compose
// file's observability profile (prometheus/prometheus.yml), and the Grafana
// dashboard with its provisioning (grafana/).
//
// The package embeds the rules and the dashboard and reads the PromQL
// expressions they hold (Queries, MetricNames), so that tests can hold them
// to the metrics the api and the worker really export. Its own tests check
// the rules with promtool (check rules, test rules) and the dashboard's
// structure.
package deploy
