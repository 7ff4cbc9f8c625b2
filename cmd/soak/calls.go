package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/leadintake/leadintake/downstream/fake"
)

// call is one request that reached the fake downstream, noted on its way
// in: when it arrived, which target, and whose it was (the external
// reference in its path, query or body; the lead id in its body).
type call struct {
	at     time.Time
	target fake.Target
	ref    string
	leadID string
}

// callLog notes every request to the fake downstream with its time of
// arrival, before the fake decides on any fault: the record the outage
// and erasure checks read. It is safe for concurrent use.
type callLog struct {
	mu    sync.Mutex
	calls []call
}

// wrap notes each request, then hands it to next with its body intact.
func (l *callLog) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/_fake/") || strings.HasPrefix(r.URL.Path, "/callbacks/") {
			next.ServeHTTP(w, r)
			return
		}
		c := call{at: time.Now(), target: fake.Target(targetOf(r.Method, routeOf(r)))}
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err == nil {
			r.Body = io.NopCloser(bytes.NewReader(body))
		}
		var v struct {
			ExternalRef string `json:"external_ref"`
			LeadID      string `json:"lead_id"`
		}
		_ = json.Unmarshal(body, &v)
		c.ref, c.leadID = v.ExternalRef, v.LeadID
		if ref, ok := strings.CutPrefix(r.URL.Path, "/crm/leads/"); ok {
			c.ref = ref
		}
		if ref := r.URL.Query().Get("external_ref"); ref != "" {
			c.ref = ref
		}
		l.mu.Lock()
		l.calls = append(l.calls, c)
		l.mu.Unlock()
		next.ServeHTTP(w, r)
	})
}

// routeOf is the request's path as the fake's routes name it, for
// targetOf.
func routeOf(r *http.Request) string {
	if strings.HasPrefix(r.URL.Path, "/crm/") {
		return "/crm"
	}
	return r.URL.Path
}

// between returns the calls to any of targets that arrived in [from, to).
func (l *callLog) between(from, to time.Time, targets ...fake.Target) []call {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []call
	for _, c := range l.calls {
		if c.at.Before(from) || !c.at.Before(to) {
			continue
		}
		for _, t := range targets {
			if c.target == t {
				out = append(out, c)
				break
			}
		}
	}
	return out
}

// of returns the calls of a lead (by its id or its external reference)
// that arrived after t.
func (l *callLog) of(leadID, ref string, after time.Time) []call {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []call
	for _, c := range l.calls {
		if c.at.After(after) && ((leadID != "" && c.leadID == leadID) || (ref != "" && c.ref == ref)) {
			out = append(out, c)
		}
	}
	return out
}
