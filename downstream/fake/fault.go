package fake

import (
	"fmt"
	"strings"

	"github.com/leadintake/leadintake/internal/standin"
)

// Target names one kind of request the fake serves; faults are scripted and
// requests counted per target. Its value is the name used by the control API.
type Target string

// The targets.
const (
	Enrichment Target = "enrichment" // POST /enrichment
	CRMUpsert  Target = "crm_upsert" // PUT /crm/leads/{external_ref}
	CRMCreate  Target = "crm_create" // POST /crm/leads
	CRMLookup  Target = "crm_lookup" // GET /crm/leads?external_ref=
	Notify     Target = "notify"     // POST /notify
	Callback   Target = "callback"   // POST /callbacks/{client}
)

// Targets returns every target, in a fixed order.
func Targets() []Target {
	return []Target{Enrichment, CRMUpsert, CRMCreate, CRMLookup, Notify, Callback}
}

// ParseTarget returns the target named s, or an error.
func ParseTarget(s string) (Target, error) {
	names := make([]string, 0, len(Targets()))
	for _, t := range Targets() {
		if string(t) == s {
			return t, nil
		}
		names = append(names, string(t))
	}
	return "", fmt.Errorf("unknown target %q (want one of %s)", s, strings.Join(names, ", "))
}

// Fault is how the fake misbehaves on one request (see standin.Fault): an
// error status, a delay, a hang, or a connection dropped before or after
// the request is applied.
type Fault = standin.Fault

// Chaos is a persistent random mix of faults for one target (see
// standin.Chaos).
type Chaos = standin.Chaos

// ParseChaos parses the FAKE_CHAOS form of a Chaos (see standin.ParseChaos).
func ParseChaos(s string) (Chaos, error) { return standin.ParseChaos(s) }
