package pipedrivefake

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/leadintake/leadintake/internal/standin"
)

// The control API, under /_standin: the Kit's POST script, chaos and reset
// (standin.Kit.Routes; a script may also name TargetAny, and chaos "all"
// is every target of Targets), and
//
//	POST /_standin/credentials          {"refuse": bool}
//	POST /_standin/lag                  {"searches": n, "for": "2s"}
//	POST /_standin/leads/{id}/archive   archive a lead (404: no such lead)
//	POST /_standin/leads/{id}/convert   convert a lead to a deal
//	GET  /_standin/state                counts, no personal data
//
// Bodies are decoded strictly: an unknown member is a 400.

// State is what GET /_standin/state shows: counts only.
type State struct {
	Leads         int            `json:"leads"`
	ArchivedLeads int            `json:"archived_leads"`
	Persons       int            `json:"persons"`
	Requests      map[string]int `json:"requests"`
	Refusing      bool           `json:"refusing_credentials"`
}

// State returns the stand-in's counts.
func (s *Server) State() State {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := State{Persons: len(s.persons), Requests: make(map[string]int, len(s.requests)), Refusing: s.refusing}
	for _, l := range s.leads {
		if l.archived {
			st.ArchivedLeads++
		} else {
			st.Leads++
		}
	}
	for t, n := range s.requests {
		st.Requests[t] = n
	}
	return st
}

func (s *Server) controlRoutes() {
	// The Kit's routes, but a script for TargetAny, which the Kit does
	// not know, is the stand-in's.
	kit := http.NewServeMux()
	s.kit.Routes(kit, "/_standin", s.reset)
	s.mux.Handle("POST /_standin/chaos", kit)
	s.mux.Handle("POST /_standin/reset", kit)
	s.mux.HandleFunc("POST /_standin/script", func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil {
			standin.ControlError(w, err)
			return
		}
		var peek struct {
			Target string `json:"target"`
		}
		if json.Unmarshal(body, &peek) != nil || peek.Target != TargetAny {
			r.Body = io.NopCloser(bytes.NewReader(body))
			kit.ServeHTTP(w, r)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		var req standin.ScriptRequest
		if err := standin.DecodeStrict(r, &req); err != nil {
			standin.ControlError(w, err)
			return
		}
		faults := make([]standin.Fault, 0, len(req.Faults))
		for i, fj := range req.Faults {
			f, err := fj.Fault()
			if err != nil {
				standin.ControlError(w, fmt.Errorf("faults[%d]: %w", i, err))
				return
			}
			faults = append(faults, f)
		}
		s.Script(TargetAny, faults...)
		w.WriteHeader(http.StatusNoContent)
	})
	s.mux.HandleFunc("POST /_standin/credentials", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Refuse *bool `json:"refuse"`
		}
		if err := standin.DecodeStrict(r, &req); err != nil {
			standin.ControlError(w, err)
			return
		}
		if req.Refuse == nil {
			standin.ControlError(w, fmt.Errorf("refuse is required"))
			return
		}
		s.SetRefuseCredentials(*req.Refuse)
		w.WriteHeader(http.StatusNoContent)
	})
	s.mux.HandleFunc("POST /_standin/lag", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Searches int    `json:"searches"`
			For      string `json:"for"`
		}
		if err := standin.DecodeStrict(r, &req); err != nil {
			standin.ControlError(w, err)
			return
		}
		var l Lag
		if req.Searches < 0 {
			standin.ControlError(w, fmt.Errorf("searches must not be negative"))
			return
		}
		l.Searches = req.Searches
		if req.For != "" {
			d, err := time.ParseDuration(req.For)
			if err != nil || d < 0 {
				standin.ControlError(w, fmt.Errorf("for %q is not a duration", req.For))
				return
			}
			l.For = d
		}
		s.SetLag(l)
		w.WriteHeader(http.StatusNoContent)
	})
	s.mux.HandleFunc("POST /_standin/leads/{id}/archive", func(w http.ResponseWriter, r *http.Request) {
		if !s.Archive(r.PathValue("id")) {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	s.mux.HandleFunc("POST /_standin/leads/{id}/convert", func(w http.ResponseWriter, r *http.Request) {
		if !s.Convert(r.PathValue("id")) {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	s.mux.HandleFunc("GET /_standin/state", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(s.State())
	})
}
