// Command failover is a database failover drill: it fails leadintake's
// PostgreSQL over, under load, and checks what the service promises of a
// failover.
//
// Each run creates a primary and a streaming standby of its own (initdb,
// pg_basebackup and pg_ctl of Debian's PostgreSQL packages, as the postgres
// user when run as root, on -ports, in a temporary directory removed at the
// end), replicating synchronously (synchronous_standby_names names the
// standby) or asynchronously. The api and the worker (the real binaries,
// with the fake downstream in this process) get a DATABASE_URL naming both
// hosts with target_session_attrs=read-write. Under a load of new leads
// (some with Prefer: wait), polls and retries, the drill promotes the
// standby and, after -gap, stops the old primary (-stop=immediate: as a
// crash); -order=stop-first stops it first. With -fence it first makes the
// primary read-only and waits for the standby to catch up, as a planned
// switchover does.
//
// Then it checks, and prints:
//
//   - the api answers 503 store_unavailable for a moment, then serves again
//     (any other 5xx is a failure), and how long that took;
//
//   - the worker resumes;
//
//   - every key answered 202 or final exists afterwards with the lead and
//     the final answer it was answered with, and a retry replays it (a key
//     that does not is lost: a failure with synchronous replication, the
//     measured loss with asynchronous);
//
//   - every lead completed once: one CRM record, one notification.
//
//     go run ./cmd/failover                         # both modes, 3 runs each
//     go run ./cmd/failover -modes=async -runs=5 -gap=2s
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/leadintake/leadintake/internal/pgserver"
	"github.com/leadintake/leadintake/internal/system"
)

func main() {
	if err := run(context.Background(), os.Args, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "failover:", err)
		os.Exit(1)
	}
}

// errBroken is returned when a run broke a promise.
var errBroken = errors.New("a promise was broken")

// options are the drill's flags.
type options struct {
	modes    []bool // synchronous replication or not, in order
	runs     int
	rate     float64
	clients  int
	before   time.Duration
	after    time.Duration
	gap      time.Duration
	stopMode string
	order    string
	fence    bool
	drain    time.Duration
	crmMode  string
	ports    [2]int
	pgBin    string
	race     bool
	seed     uint64
}

func parseOptions(args []string, stderr io.Writer) (*options, error) {
	fs := flag.NewFlagSet("failover", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := &options{}
	modes := fs.String("modes", "sync,async", "replication modes to drill, in order: sync, async")
	fs.IntVar(&o.runs, "runs", 3, "runs of each mode")
	fs.Float64Var(&o.rate, "rate", 20, "new leads per second")
	fs.IntVar(&o.clients, "clients", 32, "concurrent callers")
	fs.DurationVar(&o.before, "before", 8*time.Second, "load before the failover")
	fs.DurationVar(&o.after, "after", 12*time.Second, "load after the old primary stopped")
	fs.DurationVar(&o.gap, "gap", 0, "time between the two steps of the failover, the promotion and the stop of the old primary")
	fs.StringVar(&o.stopMode, "stop", "immediate", "how the old primary stops: immediate (a crash) or fast (a clean shutdown)")
	fs.StringVar(&o.order, "order", "promote-first", "promote-first (the old primary takes connections until it stops) or stop-first (the standby is promoted after the primary died)")
	fs.BoolVar(&o.fence, "fence", false, "a planned switchover: make the primary read-only and let the standby catch up before promoting it")
	fs.DurationVar(&o.drain, "drain", 3*time.Minute, "bound on the wait for every key to finish after the load")
	fs.StringVar(&o.crmMode, "crm-mode", "upsert", "the worker's CRM_MODE: upsert or create")
	ports := fs.String("ports", "5433,5434", "ports of the primary and the standby")
	fs.StringVar(&o.pgBin, "pg-bin", "", "PostgreSQL's bin directory (default: the newest /usr/lib/postgresql/*/bin)")
	fs.BoolVar(&o.race, "race", false, "build the binaries with the race detector")
	fs.Uint64Var(&o.seed, "seed", 0, "seed of the load's choices (0: from the clock)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "Usage: failover [flags]\n\nA database failover drill of leadintake (see `go doc ./cmd/failover`).\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args[1:]); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q (try -h)", fs.Arg(0))
	}
	for m := range strings.SplitSeq(*modes, ",") {
		switch strings.TrimSpace(m) {
		case "sync":
			o.modes = append(o.modes, true)
		case "async":
			o.modes = append(o.modes, false)
		default:
			return nil, fmt.Errorf("-modes: %q is not sync or async", m)
		}
	}
	p := strings.Split(*ports, ",")
	if len(p) != 2 {
		return nil, errors.New("-ports: two ports, the primary's and the standby's")
	}
	for i := range p {
		n, err := strconv.Atoi(strings.TrimSpace(p[i]))
		if err != nil || n <= 0 || n > 65535 {
			return nil, fmt.Errorf("-ports: %q is not a port", p[i])
		}
		o.ports[i] = n
	}
	switch {
	case o.stopMode != "immediate" && o.stopMode != "fast":
		return nil, errors.New("-stop: immediate or fast")
	case o.order != "promote-first" && o.order != "stop-first":
		return nil, errors.New("-order: promote-first or stop-first")
	case o.crmMode != "upsert" && o.crmMode != "create":
		return nil, errors.New("-crm-mode: upsert or create")
	case o.runs < 1 || o.rate <= 0 || o.clients < 1 || o.before <= 0 || o.after <= 0 || o.gap < 0 || o.drain <= 0:
		return nil, errors.New("-runs, -rate, -clients, -before, -after and -drain must be positive, -gap not negative")
	}
	if o.pgBin == "" {
		bin, err := pgserver.FindBin()
		if err != nil {
			return nil, err
		}
		o.pgBin = bin
	}
	if o.seed == 0 {
		o.seed = uint64(time.Now().UnixNano())
	}
	return o, nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	o, err := parseOptions(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	out := &printer{w: stdout}
	out.f("failover: %d run(s) of each mode, %.0f new leads/s from %d callers, %s before and %s after the failover; %s, gap %s, stop %s, fence %v; PostgreSQL of %s",
		o.runs, o.rate, o.clients, o.before, o.after, o.order, o.gap, o.stopMode, o.fence, o.pgBin)

	dir, err := os.MkdirTemp("", "leadintake-failover-bin-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	out.f("building the binaries")
	bctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	bins, err := system.Build(bctx, dir, &system.BuildOpts{Race: o.race})
	cancel()
	if err != nil {
		return err
	}

	var results []*result
	broken := 0
	for _, sync := range o.modes {
		for i := range o.runs {
			d := &drill{o: o, index: len(results) + 1, sync: sync, bins: bins, out: out}
			out.f("")
			out.f("== run %d: %s replication, %d/%d", d.index, d.mode(), i+1, o.runs)
			r, err := d.run(ctx)
			if err != nil {
				return fmt.Errorf("run %d: %w", d.index, err)
			}
			results = append(results, r)
			broken += r.failed
		}
	}
	printTable(out, results)
	if broken > 0 {
		out.f("failover: %d promise(s) broken", broken)
		return errBroken
	}
	out.f("failover: every promise held")
	return nil
}
