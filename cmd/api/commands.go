package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"golang.org/x/crypto/bcrypt"

	"github.com/leadintake/leadintake/callers"
	"github.com/leadintake/leadintake/internal/service"
	"github.com/leadintake/leadintake/jobs"
	"github.com/leadintake/leadintake/lead"
	"github.com/leadintake/leadintake/operator"
	"github.com/leadintake/leadintake/response"
	"github.com/leadintake/leadintake/store"
)

// commandConfig is the environment of the operator commands.
type commandConfig struct {
	DatabaseURL string `envconfig:"DATABASE_URL" required:"true" desc:"PostgreSQL URL"`
	APIClients  string `envconfig:"API_CLIENTS" desc:"as for api: the clients"`
	ClientsFile string `envconfig:"CLIENTS_FILE" desc:"as for api: the clients file (an erasure announces the finishes it makes to the client's callback)"`
	service.PersonalData
}

// operatorFor opens what the commands need: a pool, an insert-only River
// client, the store. close releases them.
func operatorFor(ctx context.Context) (op *operator.Operator, close func(), err error) {
	var cfg commandConfig
	if err := service.Config(&cfg); err != nil {
		return nil, nil, fmt.Errorf("config: %w", err)
	}
	hashKey, err := cfg.PersonalData.Validate()
	if err != nil {
		return nil, nil, fmt.Errorf("config: %w", err)
	}
	var holder *callers.Holder
	if cfg.APIClients != "" || cfg.ClientsFile != "" {
		set, err := callers.Source{APIClients: cfg.APIClients, Path: cfg.ClientsFile}.Load()
		if err != nil {
			return nil, nil, fmt.Errorf("config: %w", err)
		}
		holder = callers.NewHolder(set)
	}
	pool, err := service.OpenPool(ctx, cfg.DatabaseURL, service.PoolOpts{MaxConns: 4, ApplicationName: "leadintake-command"})
	if err != nil {
		return nil, nil, err
	}
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	if err != nil {
		pool.Close()
		return nil, nil, fmt.Errorf("river client: %w", err)
	}
	st := store.New(pool)
	st.UseJobs(jobs.NewQueue(client, holder))
	return &operator.Operator{
		Store: st, River: client, HashKey: hashKey, Callers: holder, KeyRetention: cfg.KeyRetention,
	}, pool.Close, nil
}

const migrateUsage = "api migrate"

// helped prints usage when args asks for it (api keys -h), and reports
// whether it did.
func helped(args []string, usage string, stdout io.Writer) bool {
	if len(args) == 0 || !service.IsHelp(args[0]) {
		return false
	}
	fmt.Fprintln(stdout, "usage: "+usage)
	return true
}

// errHelped ends a command that printed its usage on -h.
var errHelped = errors.New("usage printed")

// parseArgs parses args with fs, flags before or after the positional
// arguments, and returns the positional ones, which must be exactly want
// (any number when want is negative).
// A bad flag or a wrong number of arguments is a *service.UsageError with
// usage; -h prints usage on stdout and returns errHelped.
func parseArgs(fs *flag.FlagSet, args []string, want int, usage string, stdout io.Writer) ([]string, error) {
	fs.SetOutput(io.Discard)
	var positional []string
	for {
		if err := fs.Parse(args); errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(stdout, "usage: "+usage)
			return nil, errHelped
		} else if err != nil {
			return nil, &service.UsageError{Msg: err.Error(), Usage: usage}
		}
		args = fs.Args()
		if len(args) == 0 {
			break
		}
		positional = append(positional, args[0])
		args = args[1:]
	}
	switch {
	case want < 0:
	case len(positional) > want:
		return nil, &service.UsageError{Msg: fmt.Sprintf("unexpected argument %q", positional[want]), Usage: usage}
	case len(positional) < want:
		return nil, &service.UsageError{Msg: fs.Name() + " needs a KEY", Usage: usage}
	}
	return positional, nil
}

// printJSON writes v as one indented JSON document, with the characters
// printable escapes written as JSON escapes (see jsonPrintable).
func printJSON(w io.Writer, v any) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return err
	}
	_, err := io.WriteString(w, jsonPrintable(buf.String()))
	return err
}

// jsonPrintable returns doc, a JSON document, with every character that
// printable would escape written as a JSON escape (\u202e): the same
// document to a program, harmless on a terminal. Such characters can only
// be within strings (outside them JSON has white space and ASCII
// punctuation), where an escape stands for the character itself;
// encoding/json leaves C1 and bidirectional controls as they are.
func jsonPrintable(doc string) string {
	var b strings.Builder
	for _, r := range doc {
		if r == '\n' || graphic(r) {
			b.WriteRune(r)
			continue
		}
		for _, u := range utf16.Encode([]rune{r}) {
			fmt.Fprintf(&b, `\u%04x`, u)
		}
	}
	return b.String()
}

// printList prints items as one JSON array (empty, not null, for none), or
// as a table: header, then row of each item, tab-separated.
func printList[T any](w io.Writer, asJSON bool, items []T, header string, row func(T) string) error {
	if asJSON {
		if items == nil {
			items = []T{}
		}
		return printJSON(w, items)
	}
	tw := tabwriter.NewWriter(w, 2, 0, 2, ' ', 0)
	fmt.Fprintln(tw, header)
	for _, it := range items {
		fmt.Fprintln(tw, row(it))
	}
	return tw.Flush()
}

const eraseUsage = "api erase --client ID --email ADDRESS [--json]"

// runErase is `api erase`: it erases the personal data of every lead of the
// client with the address, at once, prints `erased N` (or {"erased": N}) and
// exits 0, also when N is 0.
func runErase(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("erase", flag.ContinueOnError)
	clientID := fs.String("client", "", "the client whose leads to erase")
	email := fs.String("email", "", "the email address, compared lower-cased whole")
	asJSON := fs.Bool("json", false, "print {\"erased\": N}")
	_, err := parseArgs(fs, args, 0, eraseUsage, stdout)
	switch {
	case errors.Is(err, errHelped):
		return nil
	case err != nil:
		return err
	case *clientID == "" || *email == "":
		return &service.UsageError{Msg: "erase needs --client and --email", Usage: eraseUsage}
	}
	op, closeOp, err := operatorFor(ctx)
	if err != nil {
		return err
	}
	defer closeOp()
	n, err := op.Erase(ctx, operator.CLI, *clientID, *email)
	if errors.Is(err, operator.ErrBadEmail) {
		return &service.UsageError{Msg: "--email: " + err.Error(), Usage: eraseUsage}
	}
	if errors.Is(err, operator.ErrUnknownClient) {
		// The id is not repeated: the operator has it in front of them.
		return errors.New("--client: no such client in API_CLIENTS or CLIENTS_FILE; nothing was erased")
	}
	if err != nil {
		return err
	}
	if *asJSON {
		_, err = fmt.Fprintf(stdout, "{\"erased\": %d}\n", n)
		return err
	}
	_, err = fmt.Fprintf(stdout, "erased %d\n", n)
	return err
}

const keysUsage = `api keys list [--client ID] [--state STATE] [--older-than DURATION] [--limit N] [--json]
       api keys show --client ID KEY [--json]
       api keys settle --client ID KEY (--crm-id CRMID | --not-found) [--json]`

// runKeys is `api keys list|show|settle`.
func runKeys(ctx context.Context, args []string, stdout io.Writer) error {
	if helped(args, keysUsage, stdout) {
		return nil
	}
	if len(args) == 0 {
		return &service.UsageError{Msg: "keys needs list, show or settle", Usage: keysUsage}
	}
	fs := flag.NewFlagSet("keys "+args[0], flag.ContinueOnError)
	clientID := fs.String("client", "", "the client")
	asJSON := fs.Bool("json", false, "print one JSON document")
	switch args[0] {
	case "list":
		state := fs.String("state", "", "processing, needs_reconciliation, completed or failed")
		olderThan := fs.Duration("older-than", 0, "keys created longer ago than this")
		limit := fs.Int("limit", 100, "at most this many keys")
		_, err := parseArgs(fs, args[1:], 0, keysUsage, stdout)
		switch {
		case errors.Is(err, errHelped):
			return nil
		case err != nil:
			return err
		case *state != "" && !validState(*state):
			return &service.UsageError{Msg: fmt.Sprintf("--state %q is not a key state (%s)", *state, stateNames()), Usage: keysUsage}
		case *limit < 1:
			return &service.UsageError{Msg: "--limit must be at least 1", Usage: keysUsage}
		}
		op, closeOp, err := operatorFor(ctx)
		if err != nil {
			return err
		}
		defer closeOp()
		keys, err := op.Keys(ctx, store.KeyFilter{
			ClientID: *clientID, State: lead.KeyState(*state), OlderThan: *olderThan, Limit: *limit,
		})
		if err != nil {
			return err
		}
		return printList(stdout, *asJSON, keys, "CLIENT\tKEY\tSTATE\tLEAD\tCREATED\tAGE", func(k store.KeySummary) string {
			return fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s", printable(k.ClientID), printable(k.Key), k.State, k.LeadID,
				k.CreatedAt.UTC().Format(time.RFC3339), time.Since(k.CreatedAt).Round(time.Second))
		})

	case "show", "settle":
		crmID := fs.String("crm-id", "", "settle: the CRM record the operator found")
		notFound := fs.Bool("not-found", false, "settle: the operator confirmed there is no record")
		rest, err := parseArgs(fs, args[1:], 1, keysUsage, stdout)
		switch {
		case errors.Is(err, errHelped):
			return nil
		case err != nil:
			return err
		case *clientID == "":
			return &service.UsageError{Msg: args[0] + " needs --client", Usage: keysUsage}
		case args[0] == "settle" && (*crmID == "") == !*notFound:
			return &service.UsageError{Msg: "settle needs --crm-id CRMID or --not-found, one of the two", Usage: keysUsage}
		case args[0] == "show" && (*crmID != "" || *notFound):
			return &service.UsageError{Msg: "--crm-id and --not-found are for settle", Usage: keysUsage}
		}
		key := rest[0]
		op, closeOp, err := operatorFor(ctx)
		if err != nil {
			return err
		}
		defer closeOp()
		if args[0] == "settle" {
			if err := op.Settle(ctx, operator.CLI, *clientID, key, !*notFound, *crmID); err != nil {
				return notFoundAsError(err)
			}
		}
		report, err := op.Show(ctx, *clientID, key)
		if err != nil {
			return notFoundAsError(err)
		}
		if *asJSON {
			return printJSON(stdout, report)
		}
		return printReport(stdout, report)
	}
	return &service.UsageError{Msg: fmt.Sprintf("unknown keys command %q", args[0]), Usage: keysUsage}
}

func notFoundAsError(err error) error {
	if errors.Is(err, store.ErrNotFound) {
		return errors.New("no such key for that client (or it expired)")
	}
	return err
}

func stateNames() string {
	names := make([]string, len(lead.KeyStates))
	for i, st := range lead.KeyStates {
		names[i] = string(st)
	}
	return strings.Join(names, ", ")
}

func validState(s string) bool {
	for _, st := range lead.KeyStates {
		if string(st) == s {
			return true
		}
	}
	return false
}

// printReport prints a key for people, one field a line.
func printReport(w io.Writer, r *operator.KeyReport) error {
	tw := tabwriter.NewWriter(w, 2, 0, 2, ' ', 0)
	line := func(name, value string) { fmt.Fprintf(tw, "%s\t%s\n", name, printable(value)) }
	opt := func(p *string) string {
		if p == nil {
			return "-"
		}
		return *p
	}
	when := func(t *time.Time) string {
		if t == nil {
			return "-"
		}
		return t.UTC().Format(time.RFC3339)
	}
	line("client", r.ClientID)
	line("key", r.Key)
	line("state", string(r.State))
	line("lead", r.LeadID.String())
	line("external ref", r.ExternalRef)
	line("created", r.CreatedAt.UTC().Format(time.RFC3339))
	line("updated", r.UpdatedAt.UTC().Format(time.RFC3339))
	line("finished", when(r.FinishedAt))
	line("expires", when(r.ExpiresAt))
	if r.ResponseStatus != nil {
		line("response", fmt.Sprintf("%d %s", *r.ResponseStatus, opt(r.FailureCode)))
	}
	line("enrichment", cmp.Or(string(r.Enrichment), "pending"))
	line("crm", strings.TrimSpace(string(r.CRM)+" "+r.CRMID))
	line("crm destination", printable(cmp.Or(r.CRMDestination, "-")))
	line("owner", printable(opt(r.Owner)))
	line("notification", cmp.Or(string(r.Notification), "pending"))
	for _, c := range r.Channels {
		line("  "+printable(c.Name), cmp.Or(string(c.State), "pending"))
	}
	line("supersedes", opt(r.Supersedes))
	line("superseded by", opt(r.SupersededBy))
	line("erased", when(r.ErasedAt))
	if r.JobID != nil {
		line("job", fmt.Sprintf("%d %s, %d attempts", *r.JobID, r.JobState, r.Attempts))
	}
	if r.LastError != "" {
		line("last error", r.LastError)
	}
	line("waiting for", opt(r.WaitingFor))
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(r.Calls) == 0 {
		return nil
	}
	fmt.Fprintln(w, "\ncalls")
	tw = tabwriter.NewWriter(w, 2, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "STEP\tDESTINATION\tKIND\tATTEMPT\tSTARTED\tDURATION\tOUTCOME")
	for _, c := range r.Calls {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%dms\t%s\n", printable(c.Step), printable(c.Destination), printable(c.Kind), c.Attempt, c.StartedAt.Format(time.RFC3339Nano), c.DurationMS, printable(c.Outcome))
	}
	return tw.Flush()
}

const leadsUsage = `api leads redrive --client ID KEY... [--json]
       api leads redrive --outcome downstream_unavailable [--client ID] [--since DURATION] [--dry-run] [--json]`

// runLeads is `api leads redrive`: it re-opens failed keys as a retry of
// each would, prints `redriven N` (or {"redriven": N, "keys": [...]}), and
// names on stderr each named key that did not qualify (exit 1 then).
func runLeads(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if helped(args, leadsUsage, stdout) {
		return nil
	}
	if len(args) == 0 || args[0] != "redrive" {
		return &service.UsageError{Msg: "leads needs redrive", Usage: leadsUsage}
	}
	fs := flag.NewFlagSet("leads redrive", flag.ContinueOnError)
	clientID := fs.String("client", "", "the client of the keys (or the only client whose keys --outcome selects)")
	outcome := fs.String("outcome", "", "redrive every key that failed with this outcome: downstream_unavailable")
	since := fs.Duration("since", 0, "with --outcome: keys finished within this long")
	dryRun := fs.Bool("dry-run", false, "print what would be redriven; change and record nothing")
	asJSON := fs.Bool("json", false, "print one JSON document")
	keys, err := parseArgs(fs, args[1:], -1, leadsUsage, stdout)
	switch {
	case errors.Is(err, errHelped):
		return nil
	case err != nil:
		return err
	case len(keys) > 0 && *outcome != "", len(keys) == 0 && *outcome == "":
		return &service.UsageError{Msg: "redrive needs either keys or --outcome, not both", Usage: leadsUsage}
	case len(keys) > 0 && *clientID == "":
		return &service.UsageError{Msg: "redrive of keys needs --client", Usage: leadsUsage}
	case *outcome != "" && *outcome != string(response.CodeDownstreamUnavailable):
		return &service.UsageError{Msg: fmt.Sprintf("--outcome %q: only downstream_unavailable is ever re-opened", *outcome), Usage: leadsUsage}
	case *since < 0:
		return &service.UsageError{Msg: "--since must not be negative", Usage: leadsUsage}
	case *since != 0 && *outcome == "":
		return &service.UsageError{Msg: "--since is for --outcome", Usage: leadsUsage}
	}
	op, closeOp, err := operatorFor(ctx)
	if err != nil {
		return err
	}
	defer closeOp()
	done, err := op.Redrive(ctx, operator.CLI, &store.RedriveParams{
		ClientID: *clientID, Keys: keys, Outcome: response.Code(*outcome), Since: *since, DryRun: *dryRun,
	})
	var tooMany *operator.TooManyKeysError
	if errors.Is(err, operator.ErrBadRedrive) || errors.As(err, &tooMany) {
		return &service.UsageError{Msg: err.Error(), Usage: leadsUsage}
	}
	if err != nil {
		return err
	}
	return printReopened(stdout, stderr, *asJSON, "redriven", done,
		func(sk store.Skipped) string { return fmt.Sprintf("is %s", sk.State) }, "did not qualify")
}

// printReopened prints what a redrive or a release re-opened: "<verb> N",
// or {"<verb>": N, "keys": [...]} with --json, and a line on stderr for
// each key named that it left as it is (why tells why); such keys make it
// fail, saying they were left (left).
func printReopened(stdout, stderr io.Writer, asJSON bool, verb string, done *store.Redriven, why func(store.Skipped) string, left string) error {
	for _, sk := range done.Skipped {
		fmt.Fprintf(stderr, "key %s of client %s %s: left as it is\n", printable(sk.Key), printable(sk.ClientID), printable(why(sk)))
	}
	var err error
	if asJSON {
		names := done.Keys
		if names == nil {
			names = []store.KeyName{}
		}
		err = printJSON(stdout, map[string]any{verb: len(done.Keys), "keys": names})
	} else {
		_, err = fmt.Fprintf(stdout, "%s %d\n", verb, len(done.Keys))
	}
	if err == nil && len(done.Skipped) > 0 {
		err = fmt.Errorf("%d of the keys named %s", len(done.Skipped), left)
	}
	return err
}

const spamUsage = `api spam list [--client ID] [--since DURATION] [--limit N] [--json]
       api spam show --client ID KEY [--json]
       api spam release --client ID KEY... [--json]`

// runSpam is `api spam list|show|release`: the quarantined enquiries of web
// pages, for an operator to look at and release.
func runSpam(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if helped(args, spamUsage, stdout) {
		return nil
	}
	if len(args) == 0 {
		return &service.UsageError{Msg: "spam needs list, show or release", Usage: spamUsage}
	}
	fs := flag.NewFlagSet("spam "+args[0], flag.ContinueOnError)
	clientID := fs.String("client", "", "the client")
	asJSON := fs.Bool("json", false, "print one JSON document")
	switch args[0] {
	case "list":
		since := fs.Duration("since", 0, "keys quarantined within this long")
		limit := fs.Int("limit", 100, "at most this many keys")
		_, err := parseArgs(fs, args[1:], 0, spamUsage, stdout)
		switch {
		case errors.Is(err, errHelped):
			return nil
		case err != nil:
			return err
		case *since < 0:
			return &service.UsageError{Msg: "--since must not be negative", Usage: spamUsage}
		case *limit < 1:
			return &service.UsageError{Msg: "--limit must be at least 1", Usage: spamUsage}
		}
		op, closeOp, err := operatorFor(ctx)
		if err != nil {
			return err
		}
		defer closeOp()
		keys, err := op.Quarantined(ctx, store.QuarantineFilter{ClientID: *clientID, Since: *since, Limit: *limit})
		if err != nil {
			return err
		}
		return printList(stdout, *asJSON, keys, "CLIENT\tKEY\tLEAD\tQUARANTINED\tREASONS", func(k store.QuarantinedKey) string {
			return fmt.Sprintf("%s\t%s\t%s\t%s\t%s", printable(k.ClientID), printable(k.Key), k.LeadID, k.CreatedAt.UTC().Format(time.RFC3339), printable(strings.Join(k.Reasons, ",")))
		})

	case "show":
		rest, err := parseArgs(fs, args[1:], 1, spamUsage, stdout)
		switch {
		case errors.Is(err, errHelped):
			return nil
		case err != nil:
			return err
		case *clientID == "":
			return &service.UsageError{Msg: "show needs --client", Usage: spamUsage}
		}
		op, closeOp, err := operatorFor(ctx)
		if err != nil {
			return err
		}
		defer closeOp()
		q, err := op.QuarantinedEnquiry(ctx, operator.CLI, *clientID, rest[0])
		if errors.Is(err, store.ErrNotFound) {
			return errors.New("no quarantined key of that client with that key (or it expired)")
		}
		if err != nil {
			return err
		}
		if *asJSON {
			return printJSON(stdout, map[string]any{
				"client_id": q.ClientID, "key": q.Key, "lead_id": q.LeadID, "created_at": q.CreatedAt.UTC(),
				"reasons": q.Reasons, "enquiry": json.RawMessage(cmp.Or(string(q.Submission), "null")),
			})
		}
		return printQuarantined(stdout, q)

	case "release":
		keys, err := parseArgs(fs, args[1:], -1, spamUsage, stdout)
		switch {
		case errors.Is(err, errHelped):
			return nil
		case err != nil:
			return err
		case *clientID == "":
			return &service.UsageError{Msg: "release needs --client", Usage: spamUsage}
		case len(keys) == 0:
			return &service.UsageError{Msg: "release needs a KEY", Usage: spamUsage}
		}
		op, closeOp, err := operatorFor(ctx)
		if err != nil {
			return err
		}
		defer closeOp()
		done, err := op.Release(ctx, operator.CLI, *clientID, keys)
		var tooMany *operator.TooManyKeysError
		if errors.As(err, &tooMany) {
			return &service.UsageError{Msg: err.Error(), Usage: spamUsage}
		}
		if err != nil {
			return err
		}
		return printReopened(stdout, stderr, *asJSON, "released", done,
			func(sk store.Skipped) string { return fmt.Sprintf("was not released (it is %s)", sk.State) }, "were not released")
	}
	return &service.UsageError{Msg: fmt.Sprintf("unknown spam command %q", args[0]), Usage: spamUsage}
}

// printQuarantined prints a quarantined enquiry for people: its key, one
// field a line, then the enquiry as stored. The enquiry is what a visitor
// sent: it is printed through printable, as every text the commands show.
func printQuarantined(w io.Writer, q *store.QuarantinedEnquiry) error {
	tw := tabwriter.NewWriter(w, 2, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "client\t%s\nkey\t%s\nlead\t%s\nquarantined\t%s\nreasons\t%s\n",
		printable(q.ClientID), printable(q.Key), q.LeadID, q.CreatedAt.UTC().Format(time.RFC3339), printable(strings.Join(q.Reasons, ",")))
	if err := tw.Flush(); err != nil {
		return err
	}
	enquiry := "(erased)"
	if q.Submission != nil {
		enquiry = printable(string(q.Submission))
	}
	_, err := fmt.Fprintf(w, "\nenquiry\n%s\n", enquiry)
	return err
}

// printable returns s as a terminal can show it harmlessly: every
// character that is not a graphic one (C0 and C1 controls and DEL, the
// bidirectional controls U+202A-U+202E, U+2066-U+2069, U+200E, U+200F and
// U+061C, other format characters, line and paragraph separators, spaces
// other than the ASCII one) is written as an escape (\x1b, \u202e), and so
// is every byte that is not UTF-8. Text a visitor sent can then neither
// drive the terminal (an escape sequence) nor make a line show in another
// order than its characters (a bidirectional override), nor start a line
// of its own in a table.
func printable(s string) string {
	if utf8.ValidString(s) && !strings.ContainsFunc(s, func(r rune) bool { return !graphic(r) }) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case graphic(r):
			b.WriteString(s[i : i+size])
		case r < utf8.RuneSelf:
			fmt.Fprintf(&b, `\x%02x`, r)
		case r <= 0xffff:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			fmt.Fprintf(&b, `\U%08x`, r)
		}
		i += size
	}
	return b.String()
}

// graphic reports whether a terminal shows r as itself: a letter, mark,
// number, punctuation or symbol (unicode.IsPrint), or the ASCII space.
func graphic(r rune) bool { return r == ' ' || unicode.IsPrint(r) }

const auditUsage = "api audit list [--since DURATION] [--limit N] [--json]"

// runAudit is `api audit list`: what operators did (releases, redrives,
// settles, erasures, looks at enquiries), by whom and when, oldest first,
// within --since; a table for people, --json for scripts.
func runAudit(ctx context.Context, args []string, stdout io.Writer) error {
	if len(args) == 0 || args[0] != "list" {
		return &service.UsageError{Msg: "audit needs list", Usage: auditUsage}
	}
	fs := flag.NewFlagSet("audit list", flag.ContinueOnError)
	since := fs.Duration("since", 0, "actions recorded within this long (default: all)")
	limit := fs.Int("limit", 1000, "at most this many, the newest")
	asJSON := fs.Bool("json", false, "print one JSON document")
	_, err := parseArgs(fs, args[1:], 0, auditUsage, stdout)
	switch {
	case errors.Is(err, errHelped):
		return nil
	case err != nil:
		return err
	case *since < 0:
		return &service.UsageError{Msg: "--since must not be negative", Usage: auditUsage}
	case *limit < 1:
		return &service.UsageError{Msg: "--limit must be at least 1", Usage: auditUsage}
	}
	op, closeOp, err := operatorFor(ctx)
	if err != nil {
		return err
	}
	defer closeOp()
	entries, err := op.Audit(ctx, store.AuditFilter{Since: *since, Limit: *limit})
	if err != nil {
		return err
	}
	slices.Reverse(entries)
	if *asJSON {
		if entries == nil {
			entries = []store.AuditEntry{}
		}
		return printJSON(stdout, entries)
	}
	tw := tabwriter.NewWriter(stdout, 2, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "AT\tWHO\tVIA\tACTION\tCLIENT\tCOUNT\tKEYS")
	for _, e := range entries {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\n", e.At.UTC().Format(time.RFC3339), printable(e.Actor), e.Via, e.Action,
			printable(cmp.Or(e.ClientID, "-")), e.Count, printable(keyList(e.Keys, 5)))
	}
	return tw.Flush()
}

// keyList names up to n keys, "-" for none, and how many more there are.
func keyList(keys []store.KeyName, n int) string {
	if len(keys) == 0 {
		return "-"
	}
	names := make([]string, 0, n)
	for i, k := range keys {
		if i == n {
			break
		}
		names = append(names, k.ClientID+"/"+k.Key)
	}
	out := strings.Join(names, ",")
	if len(keys) > n {
		out += fmt.Sprintf(" (+%d)", len(keys)-n)
	}
	return out
}

const hashPasswordUsage = "api hash-password [--cost N] < PASSWORD"

// runHashPassword is `api hash-password`: it reads a password, the first
// line of stdin, and prints its bcrypt hash, for an operator's
// password_bcrypt in the clients file. The password is read from stdin so
// that it stays out of the process list and the shell's history.
func runHashPassword(args []string, stdin io.Reader, stdout io.Writer) error {
	fs := flag.NewFlagSet("hash-password", flag.ContinueOnError)
	cost := fs.Int("cost", 12, fmt.Sprintf("bcrypt's cost, %d to %d", callers.MinBcryptCost, bcrypt.MaxCost))
	_, err := parseArgs(fs, args, 0, hashPasswordUsage, stdout)
	switch {
	case errors.Is(err, errHelped):
		return nil
	case err != nil:
		return err
	case *cost < callers.MinBcryptCost || *cost > bcrypt.MaxCost:
		return &service.UsageError{Msg: fmt.Sprintf("--cost must be %d to %d", callers.MinBcryptCost, bcrypt.MaxCost), Usage: hashPasswordUsage}
	}
	line, err := bufio.NewReader(io.LimitReader(stdin, 1024)).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("read the password: %w", err)
	}
	password := strings.TrimRight(line, "\r\n")
	switch {
	case password == "":
		return &service.UsageError{Msg: "no password on stdin", Usage: hashPasswordUsage}
	case len(password) > 72:
		// bcrypt reads 72 bytes at most.
		return &service.UsageError{Msg: "the password is longer than bcrypt's 72 bytes", Usage: hashPasswordUsage}
	}
	hash, err := bcrypt.GenerateFromPassword([]byte(password), *cost)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(stdout, string(hash))
	return err
}
