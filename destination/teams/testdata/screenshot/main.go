// Command screenshot renders the card the teams kind posts for a sample
// lead with Microsoft's own Adaptive Cards renderer (npm package
// adaptivecards, Markdown by markdown-it as in Teams' web client) in
// headless Chromium, and saves it as docs/destinations/teams.png.
//
// From the repository's root:
//
//	mkdir -p /tmp/teams-render && npm install --prefix /tmp/teams-render adaptivecards@3.0.6 markdown-it@15.0.3
//	go run ./destination/teams/testdata/screenshot -modules /tmp/teams-render/node_modules
//
// It lives under testdata so that neither go build ./... nor make test
// runs it: it needs Chromium (/usr/bin/chromium) and the npm packages.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"html/template"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/leadintake/leadintake/destination"
	"github.com/leadintake/leadintake/destination/teams"
	"github.com/leadintake/leadintake/lead"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "screenshot:", err)
		os.Exit(1)
	}
}

func run() error {
	modules := flag.String("modules", "", "the node_modules folder holding adaptivecards and markdown-it")
	out := flag.String("out", "docs/destinations/teams.png", "where to write the PNG")
	chromium := flag.String("chromium", "/usr/bin/chromium", "the Chromium to drive")
	flag.Parse()
	if *modules == "" {
		return errors.New("-modules is required (see the command's doc)")
	}
	for _, f := range []string{"adaptivecards/dist/adaptivecards.min.js", "markdown-it/dist/browser/markdown-it.umd.min.js"} {
		if _, err := os.Stat(filepath.Join(*modules, f)); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
	}

	msg, err := json.Marshal(teams.MessageOf(sample()))
	if err != nil {
		return err
	}
	var page bytes.Buffer
	if err := pageTemplate.Execute(&page, struct{ Message template.JS }{template.JS(msg)}); err != nil {
		return err
	}

	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Write(page.Bytes())
	})
	mux.Handle("GET /modules/", http.StripPrefix("/modules/", http.FileServer(http.Dir(*modules))))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	dir, err := os.MkdirTemp("", "teams-screenshot")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(ctx,
		chromedp.ExecPath(*chromium), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck, chromedp.UserDataDir(dir),
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-dev-shm-usage", true), chromedp.WindowSize(900, 1000),
	)
	defer cancelAlloc()
	tab, cancelTab := chromedp.NewContext(allocCtx)
	defer cancelTab()

	if err := chromedp.Do(tab,
		chromedp.Navigate(srv.URL+"/"),
		chromedp.WaitVisible(chromedp.CSS("#post .ac-adaptiveCard")),
	); err != nil {
		return err
	}
	rendered, err := chromedp.Run(tab, chromedp.Evaluate[string](`document.getElementById("error").textContent`))
	if err != nil {
		return err
	}
	png, err := chromedp.Run(tab, chromedp.Screenshot(chromedp.CSS("#post")))
	if err != nil {
		return err
	}
	if rendered != "" {
		return fmt.Errorf("the renderer says: %s", rendered)
	}
	if err := os.WriteFile(*out, png, 0o644); err != nil {
		return err
	}
	fmt.Printf("%s: %d bytes\n", *out, len(png))
	return nil
}

// sample is a lead as a sales channel sees one, its message holding what a
// visitor might type that Markdown would otherwise format or link.
func sample() *destination.Record {
	return &destination.Record{
		LeadID:      "0190c6a2-7e1a-7b3c-9d4e-5f6a7b8c9d0e",
		ExternalRef: "li_3q9x7k2m5p8r",
		Lead: &lead.Lead{
			Email: "ada.lovelace@analytical-engines.example", Source: "pricing page", Name: "Ada Lovelace",
			Company: "Analytical Engines Ltd", Phone: "+44 20 7946 0000",
			Message: "We would like a demo for a team of *40*: our requirements are at https://analytical-engines.example/rfp.\n" +
				"Any day but Friday; [call me](tel:+442079460000) after 3pm.",
		},
		Score: 87, Tier: "hot",
		Owner: &destination.Owner{Name: "charles.babbage"},
	}
}

// pageTemplate shows the card as a post in a Teams channel (light theme),
// with a host configuration close to Teams'.
var pageTemplate = template.Must(template.New("page").Parse(`<!doctype html>
<html><head><meta charset="utf-8"><title>teams card</title>
<style>
  body { margin: 0; padding: 24px; background: #f5f5f5; font-family: "Segoe UI", "DejaVu Sans", sans-serif; }
  #post { width: 640px; padding: 16px 20px 20px; background: #fff; border-radius: 6px;
          box-shadow: 0 1px 2px rgba(0,0,0,.14); display: flex; gap: 12px; }
  .avatar { flex: none; width: 32px; height: 32px; border-radius: 50%; background: #5b5fc7; color: #fff;
            font: 600 13px/32px "DejaVu Sans", sans-serif; text-align: center; }
  .head { font-size: 13px; color: #616161; margin-bottom: 8px; }
  .head b { color: #242424; font-weight: 600; margin-right: 8px; }
  .main { flex: 1; min-width: 0; }
  #card { border: 1px solid #e0e0e0; border-radius: 4px; overflow: hidden; }
  .ac-textBlock p { margin: 0; }
  .ac-textBlock p + p { margin-top: 6px; }
</style>
<script src="/modules/markdown-it/dist/browser/markdown-it.umd.min.js"></script>
<script src="/modules/adaptivecards/dist/adaptivecards.min.js"></script>
</head><body>
<div id="post"><div class="avatar">W</div><div class="main">
  <div class="head"><b>Workflows</b>10:42</div>
  <div id="card"></div></div></div>
<pre id="error"></pre>
<script>
const message = {{.Message}};
const md = window.markdownit();
AdaptiveCards.AdaptiveCard.onProcessMarkdown = (text, result) => {
  result.outputHtml = md.render(text);
  result.didProcess = true;
};
const card = new AdaptiveCards.AdaptiveCard();
card.hostConfig = new AdaptiveCards.HostConfig({
  fontFamily: '"Segoe UI", "DejaVu Sans", sans-serif',
  supportsInteractivity: false,
  spacing: { small: 4, default: 8, medium: 16, large: 20, extraLarge: 24, padding: 16 },
  separator: { lineThickness: 1, lineColor: "#E0E0E0" },
  fontSizes: { small: 12, default: 14, medium: 16, large: 18, extraLarge: 24 },
  fontWeights: { lighter: 300, default: 400, bolder: 600 },
  containerStyles: { default: { backgroundColor: "#FFFFFF", foregroundColors: {
    default: { default: "#242424", subtle: "#616161" },
    accent: { default: "#5B5FC7", subtle: "#5B5FC7" },
    attention: { default: "#C4314B", subtle: "#C4314B" },
    warning: { default: "#835C00", subtle: "#835C00" },
    good: { default: "#237B4B", subtle: "#237B4B" },
    dark: { default: "#242424", subtle: "#616161" },
    light: { default: "#FFFFFF", subtle: "#F5F5F5" } } } },
  factSet: { title: { color: "Default", weight: "Bolder", wrap: true, maxWidth: 170 },
             value: { color: "Default", wrap: true }, spacing: 12 },
});
try {
  // The card must parse and validate without a complaint: a card the
  // renderer doubts is one Teams may refuse.
  const ctx = new AdaptiveCards.SerializationContext();
  card.parse(message.attachments[0].content, ctx);
  const complaints = [];
  for (let i = 0; i < ctx.eventCount; i++) complaints.push(ctx.getEventAt(i).message);
  for (const e of card.validateProperties().validationEvents) complaints.push(e.message);
  const el = card.render();
  if (!el) throw new Error("nothing rendered");
  document.getElementById("card").appendChild(el);
  if (complaints.length) document.getElementById("error").textContent = complaints.join("; ");
} catch (e) {
  document.getElementById("error").textContent = String(e);
}
</script></body></html>
`))
