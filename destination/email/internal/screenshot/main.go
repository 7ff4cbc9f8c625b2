// Command screenshot redraws docs/destinations/email.png: it starts
// Mailpit (scripts/mailpit.sh installs it), sends one lead's message
// through the email kind, reads it back as Mailpit received and parsed it,
// and photographs it laid out as a mail client shows a plain-text message,
// with headless Chromium. Run it from the repository's root:
//
//	go run ./destination/email/internal/screenshot
package main

import (
	"context"
	"fmt"
	"html/template"
	"os"
	"path/filepath"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/leadintake/leadintake/destination"
	"github.com/leadintake/leadintake/destination/email"
	"github.com/leadintake/leadintake/internal/browsertest"
	"github.com/leadintake/leadintake/internal/mailpittest"
	"github.com/leadintake/leadintake/lead"
)

func main() {
	if err := run("docs/destinations/email.png"); err != nil {
		fmt.Fprintln(os.Stderr, "screenshot:", err)
		os.Exit(1)
	}
}

func run(out string) error {
	bin, err := mailpittest.Binary()
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "email-screenshot-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	s, err := mailpittest.Launch(bin, mailpittest.Options{}, dir)
	if err != nil {
		return err
	}
	defer s.Close()

	ch, err := email.New(&destination.Config{Name: "sales-mail", Kind: email.Kind, Values: map[string]string{
		"host": s.Host, "port": fmt.Sprint(s.Port), "tls": email.TLSNone, "from": "Leadintake <leads@acme.example>",
	}, Lists: map[string][]string{"to": {"Sales <sales@acme.example>"}}})
	if err != nil {
		return err
	}
	r := &destination.Record{
		LeadID: "0190c6a2-7e1a-7b3c-9d4e-5f6a7b8c9d0e", ExternalRef: "li_q3v8Zk2mXoR1bT0yWnE4uA",
		Lead: &lead.Lead{Email: "ada@analytical.example", Name: "Ada Lovelace", Company: "Analytical Engines",
			Phone: "+44 20 7946 0000", Source: "referral"},
		Score: 85, Tier: "hot",
		Owner: &destination.Owner{Name: "alice", Email: "alice@acme.example"},
	}
	if _, err := ch.Send(context.Background(), r, ""); err != nil {
		return err
	}
	ms, err := s.Messages()
	if err != nil || len(ms) != 1 {
		return fmt.Errorf("%d messages in Mailpit (%v)", len(ms), err)
	}

	// Mailpit's web UI is not in its Go module (its assets are built apart):
	// the message as Mailpit received and parsed it is laid out by a page
	// of our own, as a mail client shows a plain-text message.
	m, err := s.Message(ms[0].ID)
	if err != nil {
		return err
	}
	h, err := s.Headers(ms[0].ID)
	if err != nil {
		return err
	}
	page := filepath.Join(dir, "message.html")
	f, err := os.Create(page)
	if err != nil {
		return err
	}
	err = pageTmpl.Execute(f, map[string]any{"M": m, "Date": first(h["Date"]), "MessageID": first(h["Message-Id"])})
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	alloc, cancelAlloc := chromedp.NewExecAllocator(ctx,
		chromedp.ExecPath(browsertest.Path), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck, chromedp.UserDataDir(filepath.Join(dir, "chromium")),
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-dev-shm-usage", true), chromedp.WindowSize(900, 560))
	defer cancelAlloc()
	tab, cancelTab := chromedp.NewContext(alloc)
	defer cancelTab()
	if err := chromedp.Do(tab, chromedp.Navigate("file://"+page)); err != nil {
		return err
	}
	png, err := chromedp.Run(tab, chromedp.Screenshot(chromedp.CSS("main")))
	if err != nil {
		return err
	}
	return os.WriteFile(out, png, 0o644)
}

func first(vs []string) string {
	if len(vs) == 0 {
		return ""
	}
	return vs[0]
}

func addresses(as []mailpittest.Address) string {
	out := ""
	for i, a := range as {
		if i > 0 {
			out += ", "
		}
		if a.Name != "" {
			out += a.Name + " "
		}
		out += "<" + a.Address + ">"
	}
	return out
}

var pageTmpl = template.Must(template.New("message").Funcs(template.FuncMap{
	"addresses": addresses,
	"one":       func(a mailpittest.Address) string { return addresses([]mailpittest.Address{a}) },
}).Parse(`<!doctype html>
<html><head><meta charset="utf-8"><title>{{.M.Subject}}</title>
<style>
body { margin: 0; background: #eef0f3; font: 14px/1.45 "DejaVu Sans", "Liberation Sans", Arial, sans-serif; color: #1d2125; }
main { width: 860px; margin: 20px; background: #fff; border: 1px solid #d5d9de; border-radius: 6px; overflow: hidden; }
h1 { font-size: 19px; font-weight: 600; margin: 0; padding: 16px 20px 10px; }
table { border-collapse: collapse; margin: 0 20px 14px; }
th { text-align: right; font-weight: normal; color: #68717a; padding: 1px 10px 1px 0; vertical-align: top; }
td { padding: 1px 0; }
pre { margin: 0; padding: 16px 20px 20px; border-top: 1px solid #e3e6ea; font: 13.5px/1.5 "DejaVu Sans Mono", "Liberation Mono", monospace; white-space: pre-wrap; }
.id { color: #68717a; font-size: 12px; }
</style></head>
<body><main>
<h1>{{.M.Subject}}</h1>
<table>
<tr><th>From</th><td>{{one .M.From}}</td></tr>
<tr><th>To</th><td>{{addresses .M.To}}</td></tr>
<tr><th>Reply-To</th><td>{{addresses .M.ReplyTo}}</td></tr>
<tr><th>Date</th><td>{{.Date}}</td></tr>
<tr><th>Message-ID</th><td class="id">{{.MessageID}}</td></tr>
</table>
<pre>{{.M.Text}}</pre>
</main></body></html>
`))
