package e2e

// Helpers of the destinations' tests: the vendors' stand-ins served in the
// test process, clients files with destinations, and what the processes
// show of a destination's state.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/leadintake/leadintake/internal/system"
	"github.com/leadintake/leadintake/internal/testkit"
	"github.com/leadintake/leadintake/internal/vendors"
)

// standins are the vendors' stand-ins, served in the test process under
// their prefixes (package vendors) on one listener.
type standins struct {
	*vendors.Set
	url string
	// sfTokens are the access tokens the Salesforce stand-in issued: secrets
	// the tests look for in everything the processes show.
	mu       sync.Mutex
	sfTokens []string
}

// startStandins serves the stand-ins named (all when none is) with o.
func startStandins(t *testing.T, o *vendors.Options, names ...string) *standins {
	t.Helper()
	if len(names) == 0 {
		names = vendors.Names
	}
	set, err := vendors.New(names, o)
	if err != nil {
		t.Fatal(err)
	}
	s := &standins{Set: set}
	h := set.Handler()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/salesforce/services/oauth2/token" {
			rec := &tokenRecorder{ResponseWriter: w}
			h.ServeHTTP(rec, r)
			var body struct {
				AccessToken string `json:"access_token"`
			}
			if json.Unmarshal(rec.body.Bytes(), &body) == nil && body.AccessToken != "" {
				s.mu.Lock()
				s.sfTokens = append(s.sfTokens, body.AccessToken)
				s.mu.Unlock()
			}
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(set.Close) // runs before srv.Close: hung requests end first
	t.Cleanup(srv.Close)
	s.url = srv.URL
	return s
}

// base is the base_url of the stand-in name.
func (s *standins) base(name string) string { return vendors.Base(s.url, name) }

// salesforceTokens are the access tokens the Salesforce stand-in issued.
func (s *standins) salesforceTokens() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.sfTokens)
}

// tokenRecorder keeps a copy of what a handler writes; it lets the handler
// take the connection over (a stand-in's dropped answer).
type tokenRecorder struct {
	http.ResponseWriter
	body bytes.Buffer
}

func (r *tokenRecorder) Write(b []byte) (int, error) {
	r.body.Write(b)
	return r.ResponseWriter.Write(b)
}

func (r *tokenRecorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return http.NewResponseController(r.ResponseWriter).Hijack()
}

// dest is one destination of a clients file.
type dest struct {
	name, kind string
	members    map[string]string
	lists      map[string][]string
	// raw is added to the entry as it is (a map, say).
	raw string
}

// fileClient is one client of a clients file, with a token of its own.
type fileClient struct {
	id, token string
	// crm is the client's crm ("" for the environment's); notify its
	// channels (nil for the environment's, empty for none).
	crm    string
	notify []string
}

// yamlString is s as a YAML scalar: JSON's double-quoted form, which YAML
// reads the same.
func yamlString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// clientsYAML is a clients file of the destinations and clients given.
func clientsYAML(ds []dest, cs []fileClient) string {
	var b strings.Builder
	if len(ds) > 0 {
		b.WriteString("destinations:\n")
	}
	for _, d := range ds {
		fmt.Fprintf(&b, "  - name: %s\n    kind: %s\n", d.name, d.kind)
		keys := make([]string, 0, len(d.members))
		for k := range d.members {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(&b, "    %s: %s\n", k, yamlString(d.members[k]))
		}
		for k, list := range d.lists {
			quoted := make([]string, len(list))
			for i, v := range list {
				quoted[i] = yamlString(v)
			}
			fmt.Fprintf(&b, "    %s: [%s]\n", k, strings.Join(quoted, ", "))
		}
		b.WriteString(d.raw)
	}
	b.WriteString("clients:\n")
	for _, c := range cs {
		fmt.Fprintf(&b, "  - id: %s\n    tokens_sha256: [%s]\n", c.id, sha256Hex(c.token))
		if c.crm != "" {
			fmt.Fprintf(&b, "    crm: %s\n", c.crm)
		}
		if c.notify != nil {
			fmt.Fprintf(&b, "    notify: [%s]\n", strings.Join(c.notify, ", "))
		}
	}
	return b.String()
}

// writeClients writes the clients file path (atomically) and returns path.
func writeClients(t *testing.T, path string, ds []dest, cs []fileClient) string {
	t.Helper()
	writeClientsFile(t, path, clientsYAML(ds, cs))
	return path
}

// clientsPath is a new clients file's path in a directory of t's own.
func clientsPath(t *testing.T) string { return filepath.Join(t.TempDir(), "clients.yaml") }

// hangup sends SIGHUP to p and waits until it logged one more line
// containing what than before.
func hangup(t *testing.T, p *system.Process, what string) string {
	t.Helper()
	count := func() (int, string) {
		n, last := 0, ""
		for _, l := range p.Lines() {
			if strings.Contains(l, what) {
				n, last = n+1, l
			}
		}
		return n, last
	}
	before, _ := count()
	if err := syscall.Kill(p.Pid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	var line string
	testkit.EventuallyWithin(t, 20*time.Second, "a line "+what+" after SIGHUP", func() bool {
		n, l := count()
		line = l
		return n > before
	})
	return line
}

// gauge reads a series of the worker's /metrics (-1 when it has none).
func gauge(t *testing.T, worker *system.Process, name, downstream string) float64 {
	t.Helper()
	v, ok := scrape(t, adminURL(t, worker)+"/metrics", basicAuth{}).value(name, map[string]string{"downstream": downstream})
	if !ok {
		return -1
	}
	return v
}

// leadJobs is what River holds of the lead jobs: the highest attempt of
// any, and how many carry an error.
func (s *stack) leadJobs() (maxAttempt, withErrors int) {
	s.t.Helper()
	maxAttempt = s.count(`SELECT coalesce(max(attempt), 0) FROM river_job WHERE kind = 'process_lead'`)
	withErrors = s.count(`SELECT count(*) FROM river_job WHERE kind = 'process_lead' AND coalesce(array_length(errors, 1), 0) > 0`)
	return maxAttempt, withErrors
}

// submitAll submits n leads as token under keys prefix-0000.., bodies
// leadBody(first+i), eight at a time, and returns the keys.
func (s *stack) submitAll(token, prefix string, first, n int) []string {
	s.t.Helper()
	keys := make([]string, n)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s-%04d", prefix, i)
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			submitRetrying(s.t, s, token, keys[i], leadBody(first+i))
		})
	}
	wg.Wait()
	if s.t.Failed() {
		s.t.FailNow()
	}
	return keys
}

// completedBody is the part of a completed response the tests read.
type completedBody struct {
	LeadID   string   `json:"lead_id"`
	CRMID    string   `json:"crm_id"`
	Notified bool     `json:"notified"`
	Warnings []string `json:"warnings"`
}

// completed waits for key (of the client with token) to complete and
// returns its body.
func (s *stack) completed(token, key string, timeout time.Duration) completedBody {
	s.t.Helper()
	st := s.waitStateAs(token, key, timeout, "completed", "failed", "needs_reconciliation")
	if st.State != "completed" {
		var body []byte
		if st.Response != nil {
			body = st.Response.Body
		}
		s.t.Fatalf("key %s: %s %s, want completed", key, st.State, body)
	}
	var b completedBody
	if err := json.Unmarshal(st.Response.Body, &b); err != nil {
		s.t.Fatal(err)
	}
	return b
}
