// Package downstream is the worker's view of the outside world: HTTP clients
// for the enrichment service, the CRM and the sales notification, each with
// its own connection pool and a timeout per call; the signed deliveries to
// clients' callbacks (Callbacks); and the rule that classifies every answer
// as success, transient (retry later) or permanent. A Simulator stands in
// for the three services when SIMULATE_DOWNSTREAM is set.
//
// The sub-package fake is a misbehaving stand-in server for tests and local
// runs.
package downstream
