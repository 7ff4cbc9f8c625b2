package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// loadGen sends POST /v1/leads to the api with keep-alive connections.
type loadGen struct {
	url    string
	token  string
	body   []byte
	client *http.Client
}

func newLoadGen(apiURL, token string, body []byte, clients int) *loadGen {
	tr := &http.Transport{
		MaxIdleConns:        clients * 2,
		MaxIdleConnsPerHost: clients * 2,
		IdleConnTimeout:     time.Minute,
		DisableCompression:  true,
	}
	return &loadGen{
		url: apiURL + "/v1/leads", token: token, body: body,
		client: &http.Client{Transport: tr, Timeout: 30 * time.Second},
	}
}

// answer is what one POST got.
type answer struct {
	key      string
	status   int
	replayed string
	leadID   string
	body     []byte
	latency  time.Duration
	// applied is the Preference-Applied header.
	applied string
}

// What post reads of the answer besides its status and headers.
const (
	readNothing = iota
	readLeadID  // the lead id of a 202
	readBody    // the whole body
)

// post submits the bench body under key.
func (g *loadGen) post(ctx context.Context, key string, read int) (answer, error) {
	return g.postPrefer(ctx, key, read, "")
}

// postPrefer submits the bench body under key with a Prefer header (none
// when prefer is empty), such as "wait=5".
func (g *loadGen) postPrefer(ctx context.Context, key string, read int, prefer string) (answer, error) {
	var h http.Header
	if prefer != "" {
		h = http.Header{"Prefer": {prefer}}
	}
	return g.postAs(ctx, key, read, g.token, h)
}

// postAs submits the bench body under key with the bearer token (or
// publishable key) token and the headers h besides (nil for none).
func (g *loadGen) postAs(ctx context.Context, key string, read int, token string, h http.Header) (answer, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, g.url, bytes.NewReader(g.body))
	if err != nil {
		return answer{}, err
	}
	for name, v := range h {
		req.Header[name] = v
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := g.client.Do(req)
	if err != nil {
		return answer{}, err
	}
	a := answer{key: key}
	switch {
	case read == readLeadID && resp.StatusCode == http.StatusAccepted:
		var b struct {
			LeadID string `json:"lead_id"`
		}
		err = json.NewDecoder(resp.Body).Decode(&b)
		a.leadID = b.LeadID
	case read == readBody:
		a.body, err = io.ReadAll(resp.Body)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	a.latency = time.Since(start)
	a.status, a.replayed = resp.StatusCode, resp.Header.Get("Idempotent-Replayed")
	a.applied = resp.Header.Get("Preference-Applied")
	return a, err
}

// loadResult is one closed-loop phase.
type loadResult struct {
	Clients  int            `json:"clients"`
	Seconds  float64        `json:"seconds"`
	Requests int            `json:"requests"`
	Errors   int            `json:"errors"`
	Statuses map[string]int `json:"statuses"`
	PerS     float64        `json:"per_s"`
	P50Ms    float64        `json:"latency_p50_ms"`
	P99Ms    float64        `json:"latency_p99_ms"`
	MaxMs    float64        `json:"latency_max_ms"`
	CPU      cpuUse         `json:"cpu_cores"`
	// FirstError is the first unexpected answer, for the report.
	FirstError string `json:"first_error,omitempty"`
}

// windowHooks are called at the edges of a closed loop's measured window:
// Start just before the first counted request may be sent, End just after
// the last one was, while the clients still run. Either may be nil.
type windowHooks struct {
	Start, End func()
}

// closedLoop runs clients goroutines, each sending one request after the
// other: first for warmup (not counted), then for d. do(w, i) sends the i-th
// request of goroutine w and says whether its answer was the expected one.
// hooks may be nil.
func closedLoop(ctx context.Context, clients int, warmup, d time.Duration, do func(ctx context.Context, w, i int) (answer, error), ok func(answer) bool, hooks *windowHooks) *loadResult {
	var (
		measuring atomic.Bool
		stop      atomic.Bool
		mu        sync.Mutex
		lat       []time.Duration
		res       = &loadResult{Clients: clients, Statuses: map[string]int{}}
		wg        sync.WaitGroup
	)
	for w := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []time.Duration
			statuses := map[string]int{}
			errs := 0
			firstErr := ""
			for i := 0; !stop.Load() && ctx.Err() == nil; i++ {
				counted := measuring.Load()
				a, err := do(ctx, w, i)
				if !counted || !measuring.Load() {
					continue
				}
				switch {
				case err != nil:
					errs++
					statuses["error"]++
					if firstErr == "" {
						firstErr = err.Error()
					}
				case !ok(a):
					errs++
					statuses[fmt.Sprint(a.status)]++
					if firstErr == "" {
						firstErr = fmt.Sprintf("status %d, Idempotent-Replayed %q, body %.200q", a.status, a.replayed, a.body)
					}
				default:
					statuses[fmt.Sprint(a.status)]++
					mine = append(mine, a.latency)
				}
			}
			mu.Lock()
			lat = append(lat, mine...)
			for k, v := range statuses {
				res.Statuses[k] += v
			}
			res.Errors += errs
			if res.FirstError == "" {
				res.FirstError = firstErr
			}
			mu.Unlock()
		}()
	}
	sleepCtx(ctx, warmup)
	if hooks == nil {
		hooks = &windowHooks{}
	}
	if hooks.Start != nil {
		hooks.Start()
	}
	before := takeCPU(benchPIDs()...)
	start := time.Now()
	measuring.Store(true)
	sleepCtx(ctx, d)
	measuring.Store(false)
	elapsed := time.Since(start)
	after := takeCPU(benchPIDs()...)
	if hooks.End != nil {
		hooks.End()
	}
	stop.Store(true)
	wg.Wait()

	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	res.Seconds = elapsed.Seconds()
	res.Requests = len(lat)
	res.PerS = float64(len(lat)) / elapsed.Seconds()
	res.P50Ms, res.P99Ms = percentileMs(lat, 0.50), percentileMs(lat, 0.99)
	if len(lat) > 0 {
		res.MaxMs = ms(lat[len(lat)-1])
	}
	res.CPU = cpuBetween(before, after, apiPID, workerPID)
	return res
}

// percentileMs returns the p-quantile (nearest rank) of sorted durations, in
// milliseconds.
func percentileMs(sorted []time.Duration, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted))*p+0.999999) - 1
	i = min(max(i, 0), len(sorted)-1)
	return ms(sorted[i])
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// openLoop calls send(i) in a goroutine of its own every 1/rate from now,
// whatever the answers to the earlier calls (an open loop), until d has
// passed or until is closed (a nil until never is), and waits for every
// call to return. It returns the number of calls and how long sending took.
func openLoop(ctx context.Context, rate float64, d time.Duration, until <-chan struct{}, send func(ctx context.Context, i int)) (int, time.Duration) {
	interval := time.Duration(float64(time.Second) / rate)
	var wg sync.WaitGroup
	start := time.Now()
	n := 0
	for ; ; n++ {
		at := start.Add(time.Duration(n) * interval)
		if at.Sub(start) >= d {
			break
		}
		select {
		case <-ctx.Done():
		case <-until:
		case <-time.After(time.Until(at)):
		}
		if ctx.Err() != nil || closed(until) {
			break
		}
		i := n
		wg.Add(1)
		go func() {
			defer wg.Done()
			send(ctx, i)
		}()
	}
	elapsed := time.Since(start)
	wg.Wait()
	return n, elapsed
}

func closed(c <-chan struct{}) bool {
	if c == nil {
		return false
	}
	select {
	case <-c:
		return true
	default:
		return false
	}
}
