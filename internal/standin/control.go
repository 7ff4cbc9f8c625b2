package standin

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"
)

// The control API scripts a stand-in's faults over HTTP, for whoever runs
// it as a process (make run, the soak). Its bodies are decoded strictly:
// an unknown member is a 400, so that a typo does not silently script
// nothing. Durations are Go duration strings ("250ms").

// FaultJSON is a Fault in the control API.
type FaultJSON struct {
	Status          int               `json:"status"`
	Body            string            `json:"body"`
	RetryAfter      string            `json:"retry_after"`
	Header          map[string]string `json:"header"`
	Delay           string            `json:"delay"`
	Hang            bool              `json:"hang"`
	HangAfterApply  bool              `json:"hang_after_apply"`
	DropBeforeApply bool              `json:"drop_before_apply"`
	DropAfterApply  bool              `json:"drop_after_apply"`
}

// Fault returns fj as a Fault, or an error for a bad status or delay.
func (fj FaultJSON) Fault() (Fault, error) {
	f := Fault{
		Status: fj.Status, Body: fj.Body, RetryAfter: fj.RetryAfter, Header: fj.Header,
		Hang: fj.Hang, HangAfterApply: fj.HangAfterApply, DropBeforeApply: fj.DropBeforeApply, DropAfterApply: fj.DropAfterApply,
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

// ScriptRequest is the body of POST .../script.
type ScriptRequest struct {
	Target string      `json:"target"`
	Faults []FaultJSON `json:"faults"`
}

// ChaosRequest is the body of POST .../chaos; target "all" sets every
// target's mix.
type ChaosRequest struct {
	Target     string  `json:"target"`
	FailRate   float64 `json:"fail_rate"`
	FailStatus int     `json:"fail_status"`
	RetryAfter string  `json:"retry_after"`
	HangRate   float64 `json:"hang_rate"`
	DropRate   float64 `json:"drop_rate"`
	DelayMax   string  `json:"delay_max"`
	Seed       uint64  `json:"seed"`
}

// Chaos returns cr as a Chaos, or an error.
func (cr ChaosRequest) Chaos() (Chaos, error) {
	c := Chaos{FailRate: cr.FailRate, FailStatus: cr.FailStatus, RetryAfter: cr.RetryAfter, HangRate: cr.HangRate, DropRate: cr.DropRate, Seed: cr.Seed}
	if cr.DelayMax != "" {
		d, err := time.ParseDuration(cr.DelayMax)
		if err != nil {
			return Chaos{}, fmt.Errorf("delay_max %q is not a duration", cr.DelayMax)
		}
		c.DelayMax = d
	}
	return c, c.Validate()
}

// Routes adds the control API under prefix (such as "/_standin") to mux:
// POST prefix/script, POST prefix/chaos, and POST prefix/reset, which
// calls reset (the stand-in's own state) after forgetting the faults.
func (k *Kit) Routes(mux *http.ServeMux, prefix string, reset func()) {
	mux.HandleFunc("POST "+prefix+"/script", func(w http.ResponseWriter, r *http.Request) {
		var req ScriptRequest
		if err := DecodeStrict(r, &req); err != nil {
			ControlError(w, err)
			return
		}
		if !k.Known(req.Target) {
			ControlError(w, fmt.Errorf("unknown target %q (want one of %v)", req.Target, k.targets))
			return
		}
		faults := make([]Fault, 0, len(req.Faults))
		for i, fj := range req.Faults {
			f, err := fj.Fault()
			if err != nil {
				ControlError(w, fmt.Errorf("faults[%d]: %w", i, err))
				return
			}
			faults = append(faults, f)
		}
		k.Script(req.Target, faults...)
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("POST "+prefix+"/chaos", func(w http.ResponseWriter, r *http.Request) {
		var req ChaosRequest
		if err := DecodeStrict(r, &req); err != nil {
			ControlError(w, err)
			return
		}
		targets := k.targets
		if req.Target != "all" {
			if !k.Known(req.Target) {
				ControlError(w, fmt.Errorf("unknown target %q (want one of %v, or all)", req.Target, k.targets))
				return
			}
			targets = []string{req.Target}
		}
		c, err := req.Chaos()
		if err != nil {
			ControlError(w, err)
			return
		}
		for _, t := range targets {
			_ = k.SetChaos(t, c) // validated above
		}
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("POST "+prefix+"/reset", func(w http.ResponseWriter, _ *http.Request) {
		k.Reset()
		if reset != nil {
			reset()
		}
		w.WriteHeader(http.StatusNoContent)
	})
}

// ControlError answers a control request with 400 and err's message.
func ControlError(w http.ResponseWriter, err error) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusBadRequest)
	json.NewEncoder(w).Encode(map[string]string{"error": err.Error()})
}

// DecodeStrict decodes the request's body, one JSON object without unknown
// members, into v.
func DecodeStrict(r *http.Request, v any) error {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("bad body: %w", err)
	}
	if dec.More() {
		return errors.New("bad body: more than one JSON value")
	}
	return nil
}
