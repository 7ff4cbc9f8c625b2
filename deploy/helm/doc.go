// Package helm holds the tests of leadintake's Helm chart (leadintake/, with
// values-production.yaml beside it), in a module of its own so that Helm and
// the Kubernetes API types stay out of the service's module.
//
// The tests run Helm's own command (`go tool helm`, pinned in go.mod): `helm
// lint`, and `helm template` with the default and the production-like values.
// Every rendered object is decoded strictly into its Kubernetes API type
// (k8s.io/api, and prometheus-operator's for the ServiceMonitor and the
// PrometheusRule): an unknown or misplaced field fails. Then they check what
// docs/deployment.md's "Kubernetes" says the chart does (the secrets to
// create, the probes, the grace periods, the migration hook), that the
// objects refer to one another rightly (selectors, ports, volumes, the
// autoscalers' targets), that the PrometheusRule is deploy/prometheus/alerts.yml,
// that the admin ports are closed by NetworkPolicies to all but the
// monitoring namespaces and the release's pods, that the ServiceMonitor
// scrapes with the scrape credential (never the admin one), that a change
// to the clients file rolls the pods (no container shares a process's
// namespace), and that the production values trust no whole private range
// as proxies.
package helm
