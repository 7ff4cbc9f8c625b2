// Command demosite serves the demo lead form of package web: a page of its
// own origin that hosts its own copy of the snippet and sends enquiries
// through it to the api with a publishable key, and the page its plain form
// POST lands on without JavaScript. The demo site's origin (http://DEMO_ADDR) must be
// listed for the key in the api's clients file; `make run` does all of it.
//
// Configuration comes from the environment; `demosite -h` lists it. On start
// it logs one JSON line, "demo site listening", whose addr attribute is the
// real host:port (useful with port 0). It stops gracefully on SIGTERM or
// SIGINT.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"time"

	"github.com/leadintake/leadintake/internal/service"
	"github.com/leadintake/leadintake/web"
)

func main() { service.Main("demosite", run) }

// config is the demo site's environment.
type config struct {
	Addr           string        `envconfig:"DEMO_ADDR" default:"127.0.0.1:8090" desc:"listen address of the demo site; its origin must be listed for the publishable key"`
	APIURL         string        `envconfig:"DEMO_API_URL" default:"http://127.0.0.1:8080" desc:"the api's base URL, as visitors' browsers reach it"`
	PublishableKey string        `envconfig:"DEMO_PUBLISHABLE_KEY" required:"true" desc:"the demo client's publishable key (pk_...)"`
	Timeout        time.Duration `envconfig:"DEMO_TIMEOUT" default:"60s" desc:"how long the page keeps trying before it reports the outcome unknown"`
	LogFormat      string        `envconfig:"LOG_FORMAT" default:"json" desc:"json or text"`
	LogLevel       string        `envconfig:"LOG_LEVEL" default:"info" desc:"debug, info, warn or error"`
}

const usageHeader = `Usage: demosite

  serve the demo lead form on DEMO_ADDR; it sends enquiries to the api at
  DEMO_API_URL with DEMO_PUBLISHABLE_KEY

Environment:
`

// shutdownTimeout bounds the graceful stop: the pages are static.
const shutdownTimeout = 5 * time.Second

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 1 {
		if service.IsHelp(args[1]) {
			return service.Usage(stdout, usageHeader, &config{})
		}
		return fmt.Errorf("unknown argument %q (try -h)", args[1])
	}
	var cfg config
	if err := service.Config(&cfg); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	if cfg.Timeout <= 0 {
		return errors.New("config: DEMO_TIMEOUT must be positive")
	}
	logger, err := service.NewLogger(stdout, cfg.LogFormat, cfg.LogLevel)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	site, err := web.Demo(web.DemoConfig{API: cfg.APIURL, PublishableKey: cfg.PublishableKey, Timeout: cfg.Timeout})
	if err != nil {
		// Neither value is a secret: the key is public by design.
		return fmt.Errorf("config: DEMO_API_URL or DEMO_PUBLISHABLE_KEY: %w", err)
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return fmt.Errorf("DEMO_ADDR: %w", err)
	}
	logger.Info("demo site listening", slog.String("addr", ln.Addr().String()), slog.String("api", cfg.APIURL))
	err = service.Serve(ctx, service.NewServer(site, service.ServerOpts{Logger: logger}), ln, shutdownTimeout)
	logger.Info("demo site stopped")
	return err
}
