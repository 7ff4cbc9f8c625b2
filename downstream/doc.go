// Package downstream is the worker's view of the outside world: HTTP clients
// for the enrichment service, the CRM and the sales notification, each with
// its own timeout and connection pool, and the rule that classifies every
// answer as success, transient (retry later) or permanent. A Simulator
// stands in for all three when SIMULATE_DOWNSTREAM is set.
//
// The sub-package fake is a misbehaving stand-in server for tests and local
// runs.
package downstream
