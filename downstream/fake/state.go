package fake

import (
	"cmp"
	"encoding/json"
	"maps"
	"slices"
	"time"
)

// State is a snapshot of what the fake received, for assertions. GET
// /_fake/state answers it as JSON, without the bodies (they hold personal
// data).
type State struct {
	// CRM holds what the CRM has for each external_ref.
	CRM map[string]CRMRef `json:"crm"`
	// Notifications holds each notification, by Idempotency-Key.
	Notifications map[string]Notification `json:"notifications"`
	// Callbacks holds each callback, by webhook-id.
	Callbacks map[string]CallbackMessage `json:"callbacks"`
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
	// Bodies are the bodies of every write applied, as received, oldest
	// first: what the lead was, and what each amendment made of it.
	Bodies []json.RawMessage `json:"-"`
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

// CallbackMessage is one callback message, that is one webhook-id (the same
// on every delivery attempt of one finish), as the receiver got it.
type CallbackMessage struct {
	// ID is its webhook-id.
	ID string `json:"id"`
	// Client is the {client} of its first attempt's path.
	Client string `json:"client"`
	// Type is the "type" member of its first body: lead.completed or
	// lead.failed.
	Type string `json:"type"`
	// Deliveries counts the attempts that carried its id, the first
	// included, whether they verified or not.
	Deliveries int `json:"deliveries"`
	// Verified reports whether every attempt's signature verified with the
	// callback secret; never without one.
	Verified bool `json:"verified"`
	// Attempts are its attempts, in the order they arrived.
	Attempts []CallbackAttempt `json:"attempts"`
	// FirstBody is the body of the first attempt, as received.
	FirstBody json.RawMessage `json:"-"`
}

// CallbackAttempt is one delivery attempt of a callback.
type CallbackAttempt struct {
	// Timestamp is its webhook-timestamp, as sent (each attempt has a fresh
	// one); zero when missing or not a number.
	Timestamp time.Time `json:"timestamp"`
	// ReceivedAt is when the fake received it.
	ReceivedAt time.Time `json:"received_at"`
	// Verified reports whether its signature and timestamp verified with
	// the callback secret.
	Verified bool `json:"verified"`
	// Problem says why it did not verify; "" when it did.
	Problem string `json:"problem,omitempty"`
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
	// Callbacks counts the distinct callbacks (webhook-ids).
	Callbacks int `json:"callbacks"`
	// CallbackDeliveries counts the callback attempts, repeats included.
	CallbackDeliveries int `json:"callback_deliveries"`
	// UnverifiedCallbacks counts the callbacks with an attempt that did not
	// verify (every callback, without a callback secret).
	UnverifiedCallbacks int `json:"unverified_callbacks"`
}

// State returns a snapshot of what the fake received; it shares nothing with
// the Server.
func (s *Server) State() State {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := State{
		CRM:             make(map[string]CRMRef, len(s.crm)),
		Notifications:   make(map[string]Notification, len(s.notifications)),
		Callbacks:       make(map[string]CallbackMessage, len(s.callbacks)),
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
	for id, c := range s.callbacks {
		cb := c.snapshot(id)
		st.Callbacks[id] = cb
		st.Totals.Callbacks++
		st.Totals.CallbackDeliveries += cb.Deliveries
		if !cb.Verified {
			st.Totals.UnverifiedCallbacks++
		}
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

// Callbacks returns every callback, in the order of their first attempts.
func (s *Server) Callbacks() []CallbackMessage {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := slices.SortedFunc(maps.Keys(s.callbacks), func(a, b string) int {
		return cmp.Compare(s.callbacks[a].seq, s.callbacks[b].seq)
	})
	cbs := make([]CallbackMessage, 0, len(ids))
	for _, id := range ids {
		cbs = append(cbs, s.callbacks[id].snapshot(id))
	}
	return cbs
}

// Callback returns the callback of webhook-id id, and whether there is one.
func (s *Server) Callback(id string) (CallbackMessage, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.callbacks[id]
	if c == nil {
		return CallbackMessage{}, false
	}
	return c.snapshot(id), true
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
	r := CRMRef{
		IDs:            slices.Clone(e.ids),
		Records:        len(e.ids),
		Writes:         e.writes,
		IdempotencyKey: e.key,
	}
	for _, b := range e.bodies {
		r.Bodies = append(r.Bodies, slices.Clone(b))
	}
	if len(r.Bodies) > 0 {
		r.LastBody = r.Bodies[len(r.Bodies)-1]
	}
	return r
}

func (n *notification) snapshot() Notification {
	return Notification{Deliveries: n.deliveries, FirstBody: slices.Clone(n.firstBody)}
}

func (c *callback) snapshot(id string) CallbackMessage {
	verified := true
	for _, a := range c.attempts {
		verified = verified && a.Verified
	}
	return CallbackMessage{
		ID:         id,
		Client:     c.client,
		Type:       c.typ,
		Deliveries: len(c.attempts),
		Verified:   verified,
		Attempts:   slices.Clone(c.attempts),
		FirstBody:  slices.Clone(c.firstBody),
	}
}
