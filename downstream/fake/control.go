package fake

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"
)

// The control API, under /_fake/, offers Script, SetChaos, Reset and State
// over HTTP to whoever runs the fakedownstream binary. Its bodies are
// decoded strictly: an unknown member is a 400, so that a typo does not
// silently script nothing. Durations are Go duration strings ("250ms").

// faultJSON is a Fault in the control API.
type faultJSON struct {
	Status          int    `json:"status"`
	Body            string `json:"body"`
	RetryAfter      string `json:"retry_after"`
	Delay           string `json:"delay"`
	Hang            bool   `json:"hang"`
	HangAfterApply  bool   `json:"hang_after_apply"`
	DropBeforeApply bool   `json:"drop_before_apply"`
	DropAfterApply  bool   `json:"drop_after_apply"`
}

// scriptRequest is the body of POST /_fake/script.
type scriptRequest struct {
	Target string      `json:"target"`
	Faults []faultJSON `json:"faults"`
}

// chaosRequest is the body of POST /_fake/chaos; target "all" sets every
// target's mix.
type chaosRequest struct {
	Target     string  `json:"target"`
	FailRate   float64 `json:"fail_rate"`
	FailStatus int     `json:"fail_status"`
	RetryAfter string  `json:"retry_after"`
	HangRate   float64 `json:"hang_rate"`
	DropRate   float64 `json:"drop_rate"`
	DelayMax   string  `json:"delay_max"`
	Seed       uint64  `json:"seed"`
}

func (s *Server) handleScript(w http.ResponseWriter, r *http.Request) {
	var req scriptRequest
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
		f, err := fj.fault()
		if err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": fmt.Sprintf("faults[%d]: %v", i, err)})
			return
		}
		faults = append(faults, f)
	}
	s.Script(target, faults...)
	w.WriteHeader(http.StatusNoContent)
}

func (fj faultJSON) fault() (Fault, error) {
	f := Fault{
		Status:          fj.Status,
		Body:            fj.Body,
		RetryAfter:      fj.RetryAfter,
		Hang:            fj.Hang,
		HangAfterApply:  fj.HangAfterApply,
		DropBeforeApply: fj.DropBeforeApply,
		DropAfterApply:  fj.DropAfterApply,
	}
	if f.Status != 0 && (f.Status < 100 || f.Status > 599) {
		return Fault{}, fmt.Errorf("status %d is not an HTTP status", f.Status)
	}
	if fj.Delay != "" {
		d, err := time.ParseDuration(fj.Delay)
		if err != nil || d < 0 {
			return Fault{}, fmt.Errorf("delay %q is not a duration", fj.Delay)
		}
		f.Delay = d
	}
	return f, nil
}

func (s *Server) handleChaos(w http.ResponseWriter, r *http.Request) {
	var req chaosRequest
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
	c := Chaos{
		FailRate:   req.FailRate,
		FailStatus: req.FailStatus,
		RetryAfter: req.RetryAfter,
		HangRate:   req.HangRate,
		DropRate:   req.DropRate,
		Seed:       req.Seed,
	}
	if req.DelayMax != "" {
		d, err := time.ParseDuration(req.DelayMax)
		if err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": fmt.Sprintf("delay_max %q is not a duration", req.DelayMax)})
			return
		}
		c.DelayMax = d
	}
	if err := c.validate(); err != nil {
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
func decodeStrict(r *http.Request, v any) error {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody))
	if err != nil {
		return fmt.Errorf("read body: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("invalid JSON: %w", err)
	}
	if dec.More() {
		return errors.New("invalid JSON: more than one value")
	}
	return nil
}
