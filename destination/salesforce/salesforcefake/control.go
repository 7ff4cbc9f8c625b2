package salesforcefake

import (
	"encoding/json"
	"errors"
	"net/http"

	"github.com/leadintake/leadintake/internal/standin"
)

// The control API drives the stand-in as a process (make run, the soak):
// standin's script, chaos and reset, and
//
//	POST /_standin/credentials     {"refuse": bool}           SetRefuseCredentials
//	POST /_standin/tokens/expire   {"after": n}               ExpireTokensAfter (0: now)
//	POST /_standin/duplicate-rule  {"mode": "off|alert|block"} SetDuplicateRule
//	POST /_standin/limits          {"used": n, "allocation": m} SetAPIUsage
//	GET  /_standin/state                                       State
//
// Bodies are decoded strictly (an unknown member is a 400).
func (s *Server) controlRoutes() {
	s.kit.Routes(s.mux, "/_standin", func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.reset()
	})
	s.mux.HandleFunc("POST /_standin/credentials", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Refuse *bool `json:"refuse"`
		}
		if err := standin.DecodeStrict(r, &req); err != nil || req.Refuse == nil {
			standin.ControlError(w, orMissing(err, "refuse"))
			return
		}
		s.SetRefuseCredentials(*req.Refuse)
		w.WriteHeader(http.StatusNoContent)
	})
	s.mux.HandleFunc("POST /_standin/tokens/expire", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			After int `json:"after"`
		}
		if err := standin.DecodeStrict(r, &req); err != nil || req.After < 0 {
			standin.ControlError(w, orMissing(err, "after (at least 0)"))
			return
		}
		s.ExpireTokensAfter(req.After)
		w.WriteHeader(http.StatusNoContent)
	})
	s.mux.HandleFunc("POST /_standin/duplicate-rule", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Mode string `json:"mode"`
		}
		if err := standin.DecodeStrict(r, &req); err != nil {
			standin.ControlError(w, err)
			return
		}
		rule, err := ParseDuplicateRule(req.Mode)
		if err != nil {
			standin.ControlError(w, err)
			return
		}
		s.SetDuplicateRule(rule)
		w.WriteHeader(http.StatusNoContent)
	})
	s.mux.HandleFunc("POST /_standin/limits", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Used       int `json:"used"`
			Allocation int `json:"allocation"`
		}
		if err := standin.DecodeStrict(r, &req); err != nil || req.Used < 0 || req.Allocation < 0 {
			standin.ControlError(w, orMissing(err, "used and allocation (at least 0)"))
			return
		}
		s.SetAPIUsage(req.Used, req.Allocation)
		w.WriteHeader(http.StatusNoContent)
	})
	s.mux.HandleFunc("GET /_standin/state", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(s.State())
	})
}

func orMissing(err error, member string) error {
	if err != nil {
		return err
	}
	return errors.New("bad body: want " + member)
}
