package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/leadintake/leadintake/internal/system"
)

// The invariants, in the order they are reported.
const (
	invFinal        = "every accepted submission reached a final response"
	invLost         = "no accepted submission lost"
	invOneLead      = "one lead per key"
	invLeadID       = "a 202's lead_id is the one finally stored"
	invOneCRM       = "one CRM record per key"
	invOneNotify    = "at most one notification per key"
	invNo500        = "no 500s"
	invRetryAfter   = "503s and 429s carry Retry-After"
	invReplay       = "replays are byte-identical to the stored response"
	invChanged      = "changed payloads are refused"
	invNoHang       = "no request hangs"
	invAnswered     = "every submission got an answer"
	invWellFormed   = "answers are well formed"
	invProcesses    = "processes survive the chaos and stop cleanly"
	invAmendCRM     = "one CRM record per amendment chain"
	invCallbacks    = "every finish announced, by its webhook-id, to its client"
	invErased       = "an erased lead holds no personal data and reaches no downstream after its erasure"
	invWait         = "every wait answered with the key's true state"
	invProjected    = "publishable-key answers projected"
	invOutage       = "every lead accepted during an outage completes, in the CRM once and notified once"
	invProbes       = "calls during an outage bounded by the probes"
	invExactlyOnce  = "one message per lead on each exactly-once channel (the Slack bot; http by its key)"
	invEmail        = "e-mail at least once, one Message-ID per lead version, none of no lead"
	invGivenUp      = "a channel given up only after its failures, a refusal or the lead's last attempt"
	maxShownPerInv  = 10
	progressEvery   = 15 * time.Second
	drainPollPeriod = time.Second
)

var invariants = []string{
	invFinal, invLost, invOneLead, invLeadID, invOneCRM, invOneNotify, invNo500, invRetryAfter,
	invReplay, invChanged, invNoHang, invAnswered, invWellFormed, invProcesses,
	invAmendCRM, invCallbacks, invErased, invWait, invProjected, invOutage, invProbes,
}

// destinationsInvariants are the destinations phase's: the same, with the
// CRM ones checked against the vendors' stand-ins, no outage of the
// environment's downstreams (the vendors' revoked tokens take their
// place), and the channels'.
var destinationsInvariants = []string{
	invFinal, invLost, invOneLead, invLeadID, invOneCRM, invOneNotify, invNo500, invRetryAfter,
	invReplay, invChanged, invNoHang, invAnswered, invWellFormed, invProcesses,
	invAmendCRM, invCallbacks, invErased, invWait, invProjected,
	invExactlyOnce, invEmail, invGivenUp,
}

// The phases' tenants: the classic phases' two, and the destinations
// phase's three, one per CRM vendor.
var (
	classicTenants = []string{"soak-a", "soak-b"}
	vendorTenants  = []string{"soak-a", "soak-b", "soak-c"}
)

// destinationsPhase names the phase against the clients file's
// destinations.
const destinationsPhase = "destinations"

// aliases maps the short names load.go uses to the invariants.
var aliases = map[string]string{
	"answered":                     invAnswered,
	"no request hangs":             invNoHang,
	"changed payloads are refused": invChanged,
	"answers are well formed":      invWellFormed,
	"no accepted submission lost":  invLost,
	"no 500s":                      invNo500,
	"503s carry Retry-After":       invRetryAfter,
}

// phase is one soak run in one CRM mode, on a stack of its own.
type phase struct {
	name      string
	index     int
	crmMode   string
	duration  time.Duration
	rate      float64
	attempts  int
	drainFor  time.Duration
	seed      uint64
	bins      *system.Binaries
	serverURL string
	dir       string
	keep      bool
	out       *printer
	// tenants are the phase's clients; vendors: the destinations phase.
	tenants []string
	vendors bool

	load  loadStats
	stats chaosStats

	// chaosMu orders the downstream chaos and the outages; quiet is set
	// while an outage holds the CRM and the notification service.
	chaosMu sync.Mutex
	quiet   bool

	mu         sync.Mutex
	violations map[string][]string
}

// violate records a broken invariant.
func (p *phase) violate(inv, format string, args ...any) {
	if full, ok := aliases[inv]; ok {
		inv = full
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.violations == nil {
		p.violations = map[string][]string{}
	}
	p.violations[inv] = append(p.violations[inv], fmt.Sprintf(format, args...))
}

func (p *phase) run(ctx context.Context) (*report, error) {
	faults := newFaultLog()
	s, err := startStack(ctx, p, faults)
	if err != nil {
		return nil, err
	}
	defer s.stop(p.keep)
	if p.keep {
		p.out.f("  database %s (kept)", s.db.Name)
	}
	rng := rand.New(rand.NewPCG(p.seed, 1))
	l := newLoad(p, s)

	start := time.Now()
	loadCtx, stopLoad := context.WithTimeout(ctx, p.duration)
	defer stopLoad()
	var wg sync.WaitGroup
	chaosRNG := rand.New(rand.NewPCG(rng.Uint64(), 2))
	wg.Go(func() { p.chaos(loadCtx, s, chaosRNG) })
	eraseRNG := rand.New(rand.NewPCG(rng.Uint64(), 3))
	wg.Go(func() { l.erase(loadCtx, eraseRNG) })
	if p.vendors {
		vendorRNG := rand.New(rand.NewPCG(rng.Uint64(), 4))
		wg.Go(func() { p.breakVendors(loadCtx, s, vendorRNG) })
	} else {
		wg.Go(func() { p.outages(loadCtx, s, l) })
	}
	progressDone := make(chan struct{})
	wg.Go(func() { p.progress(progressDone, start) })
	l.run(loadCtx, rng)
	stopLoad()
	close(progressDone)
	wg.Wait()
	p.out.f("  load and chaos over after %s: %d submissions; draining", time.Since(start).Round(time.Second), p.load.submissions.Load())
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}

	c := &checker{p: p, s: s, l: l, faults: faults}
	c.drain(ctx, "after the chaos")
	c.check(ctx)
	for _, problem := range s.stopProcesses() {
		p.violate(invProcesses, "%s", problem)
	}
	c.scanLogs()
	return c.report(time.Since(start)), nil
}

func (p *phase) progress(done <-chan struct{}, start time.Time) {
	t := time.NewTicker(progressEvery)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
		}
		p.stats.mu.Lock()
		kills, cuts := p.stats.workerKills, p.stats.dbCuts+p.stats.dbBlackholes
		p.stats.mu.Unlock()
		p.out.f("  %s: %d submissions, %d requests, %d 503s, %d dropped; %d worker kills, %d database outages",
			time.Since(start).Round(time.Second), p.load.submissions.Load(), p.load.requests.Load(),
			p.load.unavailable.Load(), p.load.dropped.Load(), kills, cuts)
	}
}

// printer writes lines, safe for concurrent use.
type printer struct {
	mu sync.Mutex
	w  io.Writer
}

func (p *printer) f(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.w, format+"\n", args...)
}
