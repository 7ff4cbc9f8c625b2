// Command soak runs leadintake under chaos for a bounded time and checks
// that it kept its promise: one enquiry, one CRM record and one
// notification per Idempotency-Key, and no accepted submission lost.
//
// It builds the binaries, creates a database of its own on the PostgreSQL
// server of TEST_DATABASE_URL (else DATABASE_URL, else the local default),
// migrates it with `api migrate`, serves the fake downstream in this process
// and starts one api and two workers, which read a clients file: two
// tenants with tokens and callbacks to the fake's receiver, one of them
// with a publishable key. Then, for -duration, it sends a steady stream of
// submissions with random retries, duplicate concurrent sends, dropped
// client connections, changed payloads and two tenants sharing keys; some
// from a web page (the publishable key and its Origin), some amended under
// a new key (Supersedes, now and then twice along a chain), some with
// Prefer: wait on the POST or on a poll of the operation; and every few
// seconds it erases the email of a lead still in flight (POST
// /admin/erasures or `api erase`). Meanwhile it
//
//   - kills a worker (SIGKILL) at random intervals and restarts it, one at
//     a time;
//   - cuts the api's database connection for a few seconds (the api's
//     DATABASE_URL points at a faultproxy), with Cut or Blackhole;
//   - makes every downstream target, the callback receiver included, fail
//     (with rotating statuses), hang and drop answers, before and after
//     applying them (fake.SetChaos);
//   - takes the CRM, then the notification service, down for a while
//     (every call fails), with PROBE_INTERVAL at 1 s: the outages.
//
// Then it stops the chaos, waits (bounded) for the system to drain, the
// reconciler and the callbacks included, and checks the invariants; it
// prints a summary and exits 1 if any failed. Besides the promise above
// they cover each feature of the mix: one CRM record per amendment chain;
// every finish announced to its client by its webhook-id; an erased lead
// holds no personal data and reaches no downstream after its erasure
// returned; every wait answered with its key's true state; a page sees
// final responses projected; every lead accepted during an outage
// completes, in the CRM once and notified once, and the downstream got no
// more calls than its probes and a small allowance. With -crm-mode=both
// (the default) there is an upsert phase and a create phase, each on a
// fresh database and fake downstream (a CRM_MODE switch on live keys is
// not what the service promises to survive).
//
// With -destinations (the default) a last phase runs the same load against
// the clients file's destinations instead: three tenants whose CRMs are
// the HubSpot, Salesforce and Pipedrive stand-ins, every lead announced on
// a Slack bot (its stand-in), by e-mail (a Mailpit with authentication,
// behind its lost-answer proxy; left out, saying so, where Mailpit is not
// installed) and over http (the fake downstream's notification service).
// Besides the worker kills, the database cuts and the fake's chaos, the
// vendors misbehave: lost answers, 5xx, hangs, bursts of 429 with each
// vendor's own headers, a token revoked for a few seconds then restored
// (each vendor in turn, the SMTP password too), Mailpit answering 451 for a
// while and losing the answer to a message's final dot. Its invariants
// add: one record per key (per amendment chain) in each vendor's stand-in,
// the one its crm_id names; one message per lead on the Slack bot and one
// key per lead at the http receiver (the exactly-once channels); e-mail at
// least once, one Message-ID per lead version; and a channel given up only
// after its failures or a refusal. The duration is split evenly between
// the phases.
//
//	go run ./cmd/soak                    # about 2 minutes of chaos
//	go run ./cmd/soak -duration=10m -crm-mode=create -destinations=false
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/leadintake/leadintake/internal/scratchdb"
	"github.com/leadintake/leadintake/internal/system"
)

func main() {
	if err := run(context.Background(), os.Args, os.Getenv, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(1)
	}
}

// errInvariants is returned when the soak ran and an invariant failed.
var errInvariants = errors.New("invariants failed")

// options are the soak's flags.
type options struct {
	duration    time.Duration
	crmModes    []string
	vendors     bool
	rate        float64
	attempts    int
	drain       time.Duration
	seed        uint64
	race        bool
	keep        bool
	databaseURL string
}

func parseOptions(args []string, getenv func(string) string, stderr io.Writer) (*options, error) {
	fs := flag.NewFlagSet("soak", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := &options{}
	fs.DurationVar(&o.duration, "duration", 2*time.Minute, "how long the chaos lasts, in all (split between the phases)")
	crmMode := fs.String("crm-mode", "both", "upsert, create, both (one phase each), or none (with -destinations, its phase alone)")
	fs.BoolVar(&o.vendors, "destinations", true, "a last phase against the vendors' stand-ins (HubSpot, Salesforce, Pipedrive), a Slack bot, e-mail and http at once")
	fs.Float64Var(&o.rate, "rate", 8, "new submissions per second")
	fs.IntVar(&o.attempts, "attempts", 20, "JOB_MAX_ATTEMPTS: with few, more leads fail for want of the downstream (and are re-opened by a retry) or await reconciliation")
	fs.DurationVar(&o.drain, "drain", 4*time.Minute, "bound on the wait for the system to drain after the chaos, per phase")
	fs.Uint64Var(&o.seed, "seed", 0, "seed of the random choices (0: from the clock); printed, for a similar run")
	fs.BoolVar(&o.race, "race", false, "build the binaries with the race detector")
	fs.BoolVar(&o.keep, "keep", false, "keep each phase's database afterwards")
	fs.StringVar(&o.databaseURL, "database-url", scratchdb.ServerURL(getenv), "PostgreSQL server; a database of the soak's own is created on it")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "Usage: soak [flags]\n\nA bounded chaos soak of leadintake (see `go doc ./cmd/soak`).\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args[1:]); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q (try -h)", fs.Arg(0))
	}
	switch *crmMode {
	case "both":
		o.crmModes = []string{"upsert", "create"}
	case "upsert", "create":
		o.crmModes = []string{*crmMode}
	case "none":
		if !o.vendors {
			return nil, errors.New("-crm-mode=none leaves no phase without -destinations")
		}
	default:
		return nil, fmt.Errorf("-crm-mode: %q is not one of upsert, create, both, none", *crmMode)
	}
	if o.duration <= 0 || o.rate <= 0 || o.drain <= 0 || o.attempts < 1 {
		return nil, errors.New("-duration, -rate, -attempts and -drain must be positive")
	}
	if o.seed == 0 {
		o.seed = uint64(time.Now().UnixNano())
	}
	return o, nil
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()

	o, err := parseOptions(args, getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	out := &printer{w: stdout}
	phases := o.crmModes
	if o.vendors {
		phases = append(phases[:len(phases):len(phases)], destinationsPhase)
	}
	perPhase := o.duration / time.Duration(len(phases))
	out.f("soak: seed %d; phases %v, %s of chaos each; %.1f submissions/s", o.seed, phases, perPhase, o.rate)

	dir, err := os.MkdirTemp("", "leadintake-soak-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	out.f("building the binaries%s", map[bool]string{true: " (race detector)", false: ""}[o.race])
	bctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	bins, err := system.Build(bctx, dir, &system.BuildOpts{Race: o.race})
	cancel()
	if err != nil {
		return err
	}

	rng := rand.New(rand.NewPCG(o.seed, 0x50a4))
	var reports []*report
	for i, name := range phases {
		out.f("")
		mode, tenants := name, classicTenants
		if name == destinationsPhase {
			// The environment's CRM serves no tenant of this phase.
			mode, tenants = "upsert", vendorTenants
			out.f("== phase %d/%d: destinations (the vendors' stand-ins, a Slack bot, e-mail and http)", i+1, len(phases))
		} else {
			out.f("== phase %d/%d: CRM_MODE=%s", i+1, len(phases), mode)
		}
		phaseDir := filepath.Join(dir, name)
		if err := os.Mkdir(phaseDir, 0o700); err != nil {
			return err
		}
		p := &phase{
			name: name, index: i + 1, crmMode: mode, duration: perPhase, rate: o.rate, attempts: o.attempts, drainFor: o.drain,
			seed: rng.Uint64(), bins: bins, serverURL: o.databaseURL, dir: phaseDir, keep: o.keep, out: out,
			tenants: tenants, vendors: name == destinationsPhase,
		}
		rep, err := p.run(ctx)
		if err != nil {
			return fmt.Errorf("phase %s: %w", name, err)
		}
		reports = append(reports, rep)
		rep.print(out)
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}

	out.f("")
	failed := 0
	for _, r := range reports {
		failed += r.failures()
	}
	if failed > 0 {
		out.f("soak: %d invariant(s) FAILED (seed %d)", failed, o.seed)
		return errInvariants
	}
	out.f("soak: every invariant held in every phase (seed %d)", o.seed)
	return nil
}
