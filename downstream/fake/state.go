package fake

import (
	"encoding/json"
	"maps"
	"slices"
)

// State is a snapshot of what the fake received, for assertions. GET
// /_fake/state answers it as JSON, without the bodies (they hold personal
// data).
type State struct {
	// CRM holds what the CRM has for each external_ref.
	CRM map[string]CRMRef `json:"crm"`
	// Notifications holds each notification, by Idempotency-Key.
	Notifications map[string]Notification `json:"notifications"`
	// EnrichmentCalls counts the enrichment requests answered with data or
	// 404 (faulted, unauthorized or malformed ones excluded).
	EnrichmentCalls int `json:"enrichment_calls"`
	// Requests counts every request per target, faulted ones included.
	Requests map[Target]int `json:"requests"`
	// Totals sums it up.
	Totals Totals `json:"totals"`
}

// CRMRef is what the CRM holds for one external_ref.
type CRMRef struct {
	// IDs are the ids of its records, in the order they were created; more
	// than one is a duplicate (only POST /crm/leads makes those).
	IDs []string `json:"ids"`
	// Records is len(IDs).
	Records int `json:"records"`
	// Writes counts the writes applied: creates and updates.
	Writes int `json:"writes"`
	// LastBody is the body of the last write applied, as received.
	LastBody json.RawMessage `json:"-"`
	// IdempotencyKey is the Idempotency-Key header of the last write applied.
	IdempotencyKey string `json:"idempotency_key"`
}

// Notification is one notification, that is one Idempotency-Key.
type Notification struct {
	// Deliveries counts the requests that carried its key, the first
	// included.
	Deliveries int `json:"deliveries"`
	// FirstBody is the body of the first delivery, as received.
	FirstBody json.RawMessage `json:"-"`
}

// Totals sum up a State.
type Totals struct {
	// CRMRecords counts the records of every external_ref.
	CRMRecords int `json:"crm_records"`
	// CRMWrites counts the writes applied to them.
	CRMWrites int `json:"crm_writes"`
	// DuplicateRefs counts the external_refs with more than one record.
	DuplicateRefs int `json:"duplicate_refs"`
	// Notifications counts the distinct notifications (keys).
	Notifications int `json:"notifications"`
	// Deliveries counts the notification requests, repeats included.
	Deliveries int `json:"deliveries"`
}

// State returns a snapshot of what the fake received; it shares nothing with
// the Server.
func (s *Server) State() State {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := State{
		CRM:             make(map[string]CRMRef, len(s.crm)),
		Notifications:   make(map[string]Notification, len(s.notifications)),
		EnrichmentCalls: s.enrichCalls,
		Requests:        maps.Clone(s.requests),
	}
	for ref, e := range s.crm {
		r := e.snapshot()
		st.CRM[ref] = r
		st.Totals.CRMRecords += r.Records
		st.Totals.CRMWrites += r.Writes
		if r.Records > 1 {
			st.Totals.DuplicateRefs++
		}
	}
	for key, n := range s.notifications {
		st.Notifications[key] = n.snapshot()
		st.Totals.Notifications++
		st.Totals.Deliveries += n.deliveries
	}
	return st
}

// CRM returns what the CRM holds for ref, and whether it has any record.
func (s *Server) CRM(ref string) (CRMRef, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.crm[ref]
	if e == nil {
		return CRMRef{}, false
	}
	return e.snapshot(), true
}

// Notification returns the notification of key, and whether there is one.
func (s *Server) Notification(key string) (Notification, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.notifications[key]
	if n == nil {
		return Notification{}, false
	}
	return n.snapshot(), true
}

// Requests returns the number of requests target received, faulted ones
// included.
func (s *Server) Requests(target Target) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests[target]
}

// EnrichmentCalls returns the number of enrichment requests answered with
// data or 404.
func (s *Server) EnrichmentCalls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.enrichCalls
}

func (e *crmEntry) snapshot() CRMRef {
	return CRMRef{
		IDs:            slices.Clone(e.ids),
		Records:        len(e.ids),
		Writes:         e.writes,
		LastBody:       slices.Clone(e.lastBody),
		IdempotencyKey: e.key,
	}
}

func (n *notification) snapshot() Notification {
	return Notification{Deliveries: n.deliveries, FirstBody: slices.Clone(n.firstBody)}
}
