// Package jobs holds leadintake's River workers: ProcessLead, a thin loop
// that runs the actions of a lead's life (package lead) against the
// downstream services and saves each result through the store; the
// reconciler, which settles keys whose CRM outcome is uncertain; the orphan
// finisher, which ends keys whose job ended without a final response; and
// the periodic clean-up of expired keys.
//
// It owns no table: every read and write goes through package store, and
// every question about a job goes to River's API.
package jobs
