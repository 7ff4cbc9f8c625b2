package client

import (
	"fmt"
	"strings"
	"time"
)

// EventKind names a step of a submission or a wait.
type EventKind int

// The steps reported to Options.Events.
const (
	// EventSend: a request is about to be sent (Method, Attempt).
	EventSend EventKind = iota + 1
	// EventRetry: an attempt got no usable answer (Err, StatusCode when
	// there was an answer); the next one follows after Delay.
	EventRetry
	// EventAccepted: the service acknowledged the key (a 202) and names
	// its lead (LeadID, State).
	EventAccepted
	// EventWaiting: the key is unfinished; State is its state, reported
	// when it changes.
	EventWaiting
	// EventFinal: a final answer arrived (StatusCode): a final response,
	// or a refusal.
	EventFinal
)

func (k EventKind) String() string {
	switch k {
	case EventSend:
		return "send"
	case EventRetry:
		return "retry"
	case EventAccepted:
		return "accepted"
	case EventWaiting:
		return "waiting"
	case EventFinal:
		return "final"
	}
	return fmt.Sprintf("EventKind(%d)", int(k))
}

// Event is one step of a submission or a wait, for Options.Events.
type Event struct {
	Kind EventKind
	// Key is the idempotency key the step is about.
	Key string
	// Attempt counts the requests sent for the key so far, this one
	// included for EventSend.
	Attempt int
	// Method is the request's method (EventSend).
	Method string
	// StatusCode is the HTTP status of the answer, 0 for none; for
	// EventFinal after a poll, the status of the final response.
	StatusCode int
	LeadID     string
	State      string
	// Delay is the wait before the next attempt (EventRetry).
	Delay time.Duration
	// Err is why the attempt failed (EventRetry).
	Err error
}

// String describes the event in one line, for people.
func (e Event) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "key %s: ", e.Key)
	switch e.Kind {
	case EventSend:
		what := "submitting"
		if e.Method != "POST" {
			what = "asking for the outcome"
		}
		fmt.Fprintf(&b, "%s (request %d)", what, e.Attempt)
	case EventRetry:
		fmt.Fprintf(&b, "no answer yet (%v); trying again in %s", e.Err, e.Delay.Round(time.Millisecond))
	case EventAccepted:
		fmt.Fprintf(&b, "accepted as lead %s, %s", e.LeadID, e.State)
	case EventWaiting:
		fmt.Fprintf(&b, "lead %s is %s; waiting", e.LeadID, strings.ReplaceAll(e.State, "_", " "))
	case EventFinal:
		fmt.Fprintf(&b, "final answer %d", e.StatusCode)
	default:
		b.WriteString(e.Kind.String())
	}
	return b.String()
}
