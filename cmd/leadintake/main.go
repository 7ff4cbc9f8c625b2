// Command leadintake submits leads to a leadintake service and waits for
// their final answers, keeping the retry contract for its caller (through
// package client): one key per enquiry, every retry with the same key and
// body, a final answer told apart from an unknown outcome by the exit
// status. With --journal it keeps the key with the enquiry on disk before
// the first send, so that running it again after a crash or a kill resumes
// the same enquiry instead of starting a second one.
//
// `leadintake -h` prints the usage.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/leadintake/leadintake/client"
)

// Exit statuses.
const (
	exitOK      = 0
	exitFailed  = 1 // a final refusal or failure, or any other error
	exitUsage   = 2
	exitUnknown = 3 // gave up: the outcome is unknown
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args, os.LookupEnv, os.Stdin, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, errorLine(err))
	}
	os.Exit(exitCode(err))
}

// errorLine is how run's error is told on stderr.
func errorLine(err error) string {
	return "leadintake: " + strings.TrimPrefix(err.Error(), "leadintake: ")
}

// exitCode is the exit status for run's error.
func exitCode(err error) int {
	var (
		usage   *usageError
		unknown *client.OutcomeUnknownError
	)
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &usage):
		return exitUsage
	case errors.As(err, &unknown):
		return exitUnknown
	}
	return exitFailed
}

// usageError is a command line, an environment or an input that cannot be
// run: exit status 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

const usage = `Usage:
  leadintake submit [--key K] [--supersedes K] [--journal FILE] [--timeout D] < lead.json
  leadintake status KEY [--timeout D]
  leadintake wait KEY [--timeout D]

submit sends the lead (one JSON object) read from standard input under a new
idempotency key (or --key K), retrying with the same key and body until the
service gives its final answer, and prints that answer's body on standard
output. Progress goes to standard error.

  --key K          the enquiry's key: to resume an enquiry whose outcome is unknown
  --supersedes K   this enquiry amends the earlier one of key K (it gets a new key)
  --journal FILE   keep the key with the body in FILE before the first send; run
                   again with the same body, the same key is used (and a final
                   answer already recorded is printed again); another body with
                   the same FILE is refused. FILE holds the lead: keep it private.
  --timeout D      give up after D (default 60s): exit 3, outcome unknown

status prints what the service reports about KEY (exit 1 when it knows no such key).
wait waits for KEY's final answer and exits like submit.

Flags may come before or after KEY.

Exit status: 0 completed; 1 refused or failed for good (or any other error);
2 bad usage; 3 outcome unknown (standard error holds a line "key: K": resume
with submit --key K, or wait K).

Environment:
  LEADINTAKE_URL     the service's base URL, such as https://leads.example.com (required)
  LEADINTAKE_TOKEN   the API token, sent as Authorization: Bearer (required)
`

// defaultTimeout bounds a whole command unless --timeout says otherwise.
const defaultTimeout = 60 * time.Second

// maxInput bounds the lead read from standard input; the service's own
// limit is far lower and answers for itself.
const maxInput = 16 << 20

// run is the whole program: its arguments (the program's name first), its
// environment, and where it reads and writes.
func run(ctx context.Context, args []string, lookupEnv func(string) (string, bool), stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) < 2 {
		return usagef("no command (try -h)")
	}
	cmd, rest := args[1], args[2:]
	switch cmd {
	case "-h", "-help", "--help", "help":
		_, err := io.WriteString(stdout, usage)
		return err
	case "submit", "status", "wait":
	default:
		return usagef("unknown command %q (try -h)", cmd)
	}

	fs := flag.NewFlagSet("leadintake "+cmd, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	timeout := fs.Duration("timeout", defaultTimeout, "")
	var key, supersedes, journal *string
	if cmd == "submit" {
		key = fs.String("key", "", "")
		supersedes = fs.String("supersedes", "", "")
		journal = fs.String("journal", "", "")
	}
	pos, err := parseInterleaved(fs, rest)
	if errors.Is(err, flag.ErrHelp) {
		_, err := io.WriteString(stdout, usage)
		return err
	}
	if err != nil {
		return usagef("%s: %v (try -h)", cmd, err)
	}
	if *timeout <= 0 {
		return usagef("%s: --timeout must be positive", cmd)
	}

	baseURL, _ := lookupEnv("LEADINTAKE_URL")
	token, _ := lookupEnv("LEADINTAKE_TOKEN")
	if baseURL == "" || token == "" {
		return usagef("set LEADINTAKE_URL and LEADINTAKE_TOKEN")
	}
	c, err := client.New(baseURL, token, &client.Options{Events: progress(stderr)})
	if err != nil {
		return &usageError{msg: err.Error()}
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()

	switch cmd {
	case "submit":
		if len(pos) != 0 {
			return usagef("submit takes no argument; the lead is read from standard input")
		}
		return submit(ctx, c, stdin, stdout, stderr, *key, *supersedes, *journal)
	case "status":
		if len(pos) != 1 {
			return usagef("status takes one KEY")
		}
		op, err := c.Status(ctx, pos[0])
		if err != nil {
			return err
		}
		return writeBody(stdout, op.Raw)
	default: // wait
		if len(pos) != 1 {
			return usagef("wait takes one KEY")
		}
		res, err := c.Wait(ctx, pos[0])
		return answer(stdout, stderr, res, err, nil)
	}
}

// parseInterleaved parses args with fs, flags before or after the
// positional arguments, and returns the positional ones. Everything after
// "--" is positional.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if i := indexOf(args, "--"); i >= 0 {
			if err := fs.Parse(args[:i]); err != nil {
				return nil, err
			}
			pos = append(pos, fs.Args()...)
			return append(pos, args[i+1:]...), nil
		}
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos, args = append(pos, args[0]), args[1:]
	}
}

func indexOf(args []string, s string) int {
	for i, a := range args {
		if a == s {
			return i
		}
	}
	return -1
}

// progress prints the steps of a submission or a wait on w, for people.
// Polls are not printed: a slow lead would fill the screen.
func progress(w io.Writer) func(client.Event) {
	return func(e client.Event) {
		if e.Kind == client.EventSend && e.Method != "POST" {
			return
		}
		fmt.Fprintln(w, "leadintake: "+e.String())
	}
}

// submit runs `leadintake submit`.
func submit(ctx context.Context, c *client.Client, stdin io.Reader, stdout, stderr io.Writer, key, supersedes, journalPath string) error {
	body, err := io.ReadAll(io.LimitReader(stdin, maxInput+1))
	if err != nil {
		return fmt.Errorf("reading the lead: %w", err)
	}
	switch {
	case len(body) > maxInput:
		return usagef("the lead on standard input is larger than %d bytes", maxInput)
	case len(bytes.TrimSpace(body)) == 0:
		return usagef("no lead on standard input (one JSON object)")
	case !json.Valid(body) || bytes.TrimLeft(body, " \t\r\n")[0] != '{':
		return usagef("the lead on standard input is not one JSON object")
	}

	var j *journal
	if journalPath != "" {
		j, err = openJournal(journalPath, body, key, supersedes)
		if err != nil {
			return err
		}
		key = j.rec.Key
		if j.rec.Final != nil {
			fmt.Fprintf(stderr, "leadintake: key %s: final answer %d, recorded in %s\n", key, j.rec.Final.Status, journalPath)
			return replay(stdout, key, j.rec.Final)
		}
	}
	if key == "" {
		key = client.NewKey()
	}
	res, err := c.Submit(ctx, json.RawMessage(body), &client.SubmitOptions{Key: key, Supersedes: supersedes})
	return answer(stdout, stderr, res, err, j)
}

// answer prints the outcome of a submission or a wait: a final response's
// body on stdout (recorded in the journal, when there is one), a refusal's
// body on stdout, or, for an unknown outcome, the key on stderr. It returns
// run's error.
func answer(stdout, stderr io.Writer, res *client.Result, err error, j *journal) error {
	var (
		failed  *client.Failed
		refused *client.APIError
		unknown *client.OutcomeUnknownError
	)
	switch {
	case err == nil:
		if jerr := j.finish(res.StatusCode, res.Body); jerr != nil {
			return errors.Join(writeBody(stdout, res.Body), jerr)
		}
		return writeBody(stdout, res.Body)
	case errors.As(err, &failed):
		jerr := j.finish(failed.StatusCode, failed.Body)
		return errors.Join(writeBody(stdout, failed.Body), err, jerr)
	case errors.As(err, &refused):
		// Nothing was stored: the journal keeps the key, without an answer.
		if json.Valid(refused.Body) && len(refused.Body) > 0 {
			return errors.Join(writeBody(stdout, refused.Body), err)
		}
		return err
	case errors.As(err, &unknown):
		fmt.Fprintf(stderr, "key: %s\n", unknown.Key)
		return err
	}
	return err
}

func writeBody(w io.Writer, body []byte) error {
	_, err := w.Write(append(bytes.Clone(body), '\n'))
	return err
}

// replay prints a final response recorded in the journal and returns the
// error it stands for.
func replay(stdout io.Writer, key string, f *recordedFinal) error {
	if err := writeBody(stdout, f.Body); err != nil {
		return err
	}
	if f.Status < 400 {
		return nil
	}
	var b struct {
		LeadID string `json:"lead_id"`
		Error  struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	_ = json.Unmarshal(f.Body, &b)
	return &client.Failed{Key: key, StatusCode: f.Status, LeadID: b.LeadID, Code: b.Error.Code, Message: b.Error.Message, Body: f.Body}
}
