// Command fakedownstream serves the fake enrichment service, CRM,
// notification service and callback receiver of package downstream/fake,
// for the local demo and the chaos soak. Point the worker at it with
//
//	ENRICHMENT_URL=http://ADDR/enrichment CRM_URL=http://ADDR/crm NOTIFY_URL=http://ADDR/notify
//
// and a client's callback.url at http://ADDR/callbacks/{client}; with
// FAKE_CALLBACK_SECRET set to that client's callback secret, the receiver
// checks the signatures. Drive its faults and read what it received under
// /_fake/ (script, chaos, reset, state).
//
// It also serves the vendors' stand-ins (package internal/vendors), each
// under a prefix of its own, for the clients file's destinations:
//
//	/hubspot     HubSpot's contacts API      base_url: http://ADDR/hubspot, token: hubspot-fake-token
//	/salesforce  a Salesforce org            base_url: http://ADDR/salesforce, client_id: 3MVG9standin.client.id,
//	                                         client_secret: standin-client-secret (instance_url: any https origin)
//	/pipedrive   Pipedrive's API             base_url: http://ADDR/pipedrive,
//	                                         api_token: 0123456789abcdef0123456789abcdef01234567,
//	                                         ref_field: 5e1fa2c0d6b84e33a1d3f6b0c9e27a4b8d1c0f92
//	/slack       Slack's Web API             base_url: http://ADDR/slack, channel: C0LEADS0001,
//	                                         token: xoxb-1111111111-2222222222222-FakeFakeFakeFakeFakeFake;
//	             and an incoming webhook     webhook_url: http://ADDR/slack/services/T0FAKE0001/B0FAKE0001/FakeWebhookSecret000000
//	/teams       a Teams workflow's trigger  base_url: http://ADDR/teams, webhook_url: https://any.host/workflows/
//	                                         5f3a9c2e8b7d4e61a0c4d2b9e8f7a6c1/triggers/manual/paths/invoke?api-version=2016-06-01
//	                                         &sp=%2Ftriggers%2Fmanual%2Frun&sv=1.0&sig=teams-fake-signature-0123456789abcdef
//
// These are the stand-ins' defaults: they guard nothing. Each stand-in's
// control API is under its prefix (/hubspot/_standin/state, .../script,
// .../chaos, .../credentials, ...). -standins (FAKE_STANDINS) chooses which
// are served: all (the default), none, or a comma-separated list such as
// hubspot,slack.
//
// On start it logs one JSON line, "fake downstream listening", whose addr
// attribute is the real host:port (useful with port 0) and whose standins
// attribute names the stand-ins served. It stops gracefully on SIGTERM or
// SIGINT.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/leadintake/leadintake/downstream/fake"
	"github.com/leadintake/leadintake/internal/service"
	"github.com/leadintake/leadintake/internal/vendors"
	"github.com/leadintake/leadintake/webhook"
)

func main() {
	service.Main("fakedownstream", func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
		return run(ctx, args, os.LookupEnv, stdout, stderr)
	})
}

// lookupEnv is how run reads the environment: os.LookupEnv, or a map in
// tests. The fake reads no configuration struct: each variable is only the
// default of a flag.
type lookupEnv func(key string) (string, bool)

// shutdownTimeout bounds the graceful stop; hung requests end at once.
const shutdownTimeout = 5 * time.Second

func run(ctx context.Context, args []string, lookup lookupEnv, stdout, stderr io.Writer) error {
	getenv := func(name string) string { v, _ := lookup(name); return v }
	envOr := func(name, def string) string {
		if v := getenv(name); v != "" {
			return v
		}
		return def
	}
	fs := flag.NewFlagSet("fakedownstream", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "Usage: fakedownstream [flags]\n\nEach flag defaults to the environment variable named in its description.\n\n")
		fs.PrintDefaults()
	}
	addr := fs.String("addr", envOr("FAKE_ADDR", "127.0.0.1:9090"), "listen address (FAKE_ADDR)")
	chaosSpec := fs.String("chaos", getenv("FAKE_CHAOS"), `random faults for every target, e.g. "fail=0.1,hang=0.01,drop=0.05,delay=200ms,seed=1" (FAKE_CHAOS)`)
	conflictDefault, err := envBool("FAKE_CREATE_CONFLICT", getenv("FAKE_CREATE_CONFLICT"))
	if err != nil {
		return err
	}
	createConflict := fs.Bool("create-conflict", conflictDefault, "POST /crm/leads answers 409 for an external_ref that has a record (FAKE_CREATE_CONFLICT)")
	enrichmentToken := fs.String("enrichment-token", getenv("ENRICHMENT_TOKEN"), "bearer token required by the enrichment service (ENRICHMENT_TOKEN)")
	crmToken := fs.String("crm-token", getenv("CRM_TOKEN"), "bearer token required by the CRM (CRM_TOKEN)")
	notifyToken := fs.String("notify-token", getenv("NOTIFY_TOKEN"), "bearer token required by the notification service (NOTIFY_TOKEN)")
	// Its default is read after parsing rather than given here, so that -h
	// does not print the secret.
	callbackSecretText := fs.String("callback-secret", "", "whsec_... secret that callbacks' Standard Webhooks signatures are checked with; unchecked when empty (FAKE_CALLBACK_SECRET)")
	standins := fs.String("standins", envOr("FAKE_STANDINS", "all"), "the vendors' stand-ins served, each under /NAME: all, none, or a comma-separated list of "+strings.Join(vendors.Names, ", ")+" (FAKE_STANDINS)")
	logLevel := fs.String("log-level", envOr("LOG_LEVEL", "info"), "debug, info, warn or error (LOG_LEVEL)")
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q (try -h)", fs.Arg(0))
	}

	standinNames, err := vendors.ParseNames(*standins)
	if err != nil {
		return fmt.Errorf("FAKE_STANDINS: %w", err)
	}
	chaos, err := fake.ParseChaos(*chaosSpec)
	if err != nil {
		return fmt.Errorf("FAKE_CHAOS: %w", err)
	}
	var callbackSecret webhook.Secret
	if *callbackSecretText == "" {
		*callbackSecretText = getenv("FAKE_CALLBACK_SECRET")
	}
	if *callbackSecretText != "" {
		// ParseSecret's errors never quote the secret.
		if callbackSecret, err = webhook.ParseSecret(*callbackSecretText); err != nil {
			return fmt.Errorf("FAKE_CALLBACK_SECRET: %w", err)
		}
	}
	logger, err := service.NewLogger(stdout, "json", *logLevel)
	if err != nil {
		return err
	}

	s := fake.New(&fake.Options{
		EnrichmentToken: *enrichmentToken,
		CRMToken:        *crmToken,
		NotifyToken:     *notifyToken,
		CreateConflict:  *createConflict,
		CallbackSecret:  callbackSecret,
		Logger:          logger,
	})
	for _, t := range fake.Targets() {
		if err := s.SetChaos(t, chaos); err != nil {
			return fmt.Errorf("FAKE_CHAOS: %w", err)
		}
	}

	set, err := vendors.New(standinNames, &vendors.Options{Logger: logger})
	if err != nil {
		return fmt.Errorf("FAKE_STANDINS: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/", s)
	set.Mount(mux)

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("FAKE_ADDR: %w", err)
	}
	logger.Info("fake downstream listening", slog.String("addr", ln.Addr().String()), slog.String("chaos", *chaosSpec),
		slog.Bool("callback_signatures_checked", !callbackSecret.IsZero()), slog.Any("standins", set.Names()))

	srv := service.NewServer(mux, service.ServerOpts{Logger: logger})
	// Shutdown waits for requests in flight; hung ones would hold it.
	srv.RegisterOnShutdown(s.Close)
	srv.RegisterOnShutdown(set.Close)
	err = service.Serve(ctx, srv, ln, shutdownTimeout)
	logger.Info("fake downstream stopped")
	return err
}

// envBool reads the boolean variable name of value v; empty is false.
func envBool(name, v string) (bool, error) {
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("%s: %q is not a boolean", name, v)
	}
	return b, nil
}
