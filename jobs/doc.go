// Package jobs holds leadintake's River jobs: ProcessLead, which takes a
// claimed lead through enrichment, scoring, the CRM and the notification and
// records its final response; the periodic clean-up of expired keys; and the
// reconciler, which settles what a crash or an uncertain CRM answer left open.
package jobs
