package fake

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/leadintake/leadintake/internal/standin"
)

// The control API, under /_fake/, offers Script, SetChaos, Reset and State
// over HTTP to whoever runs the fakedownstream binary. Its bodies are
// decoded strictly: an unknown member is a 400, so that a typo does not
// silently script nothing. Durations are Go duration strings ("250ms").

// The control API's bodies are standin's: standin.ScriptRequest and
// standin.ChaosRequest.

func (s *Server) handleScript(w http.ResponseWriter, r *http.Request) {
	var req standin.ScriptRequest
	if err := decodeStrict(r, &req); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	target, err := ParseTarget(req.Target)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	faults := make([]Fault, 0, len(req.Faults))
	for i, fj := range req.Faults {
		f, err := fj.Fault()
		if err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": fmt.Sprintf("faults[%d]: %v", i, err)})
			return
		}
		faults = append(faults, f)
	}
	s.Script(target, faults...)
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) handleChaos(w http.ResponseWriter, r *http.Request) {
	var req standin.ChaosRequest
	if err := decodeStrict(r, &req); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	targets := Targets()
	if req.Target != "all" {
		t, err := ParseTarget(req.Target)
		if err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error() + ` or "all"`})
			return
		}
		targets = []Target{t}
	}
	c, err := req.Chaos()
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	for _, t := range targets {
		_ = s.SetChaos(t, c) // validated above
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) handleReset(w http.ResponseWriter, _ *http.Request) {
	s.Reset()
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) handleState(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, s.State())
}

// crmRecord is one external_ref's record in GET /_fake/crm.
type crmRecord struct {
	IDs            []string          `json:"ids"`
	Writes         int               `json:"writes"`
	IdempotencyKey string            `json:"idempotency_key"`
	Bodies         []json.RawMessage `json:"bodies"`
}

// handleCRMRecords answers what the CRM holds, by external_ref, with the
// body of every write: the lead as it arrived (its fields included), as a
// CRM shows its records. Unlike /_fake/state it holds personal data: it is
// for the person trying the demo, and the fake never logs it.
func (s *Server) handleCRMRecords(w http.ResponseWriter, _ *http.Request) {
	st := s.State()
	records := make(map[string]crmRecord, len(st.CRM))
	for ref, r := range st.CRM {
		records[ref] = crmRecord{IDs: r.IDs, Writes: r.Writes, IdempotencyKey: r.IdempotencyKey, Bodies: r.Bodies}
	}
	writeJSON(w, http.StatusOK, map[string]any{"records": records})
}

// decodeStrict decodes the request's body, one JSON object without unknown
// members, into v.
func decodeStrict(r *http.Request, v any) error { return standin.DecodeStrict(r, v) }
