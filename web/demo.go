package web

import (
	"bytes"
	"embed"
	"errors"
	"html/template"
	"net/http"
	"net/url"
	"strings"
	"time"
)

//go:embed demo
var demoFiles embed.FS

// DemoConfig configures the demo site.
type DemoConfig struct {
	// API is the api's base URL as the visitor's browser reaches it, such as
	// http://127.0.0.1:8080.
	API string
	// PublishableKey is the demo client's publishable key; the demo site's
	// origin must be listed for it in the clients file.
	PublishableKey string
	// Timeout and Wait are the snippet's options of the same names (how long
	// it keeps trying; how long each request asks the api to hold its
	// answer); zero keeps the snippet's defaults.
	Timeout, Wait time.Duration
}

// pageConfig is what the demo page's script reads: where the snippet is
// (the site's own copy), and the options it is given.
type pageConfig struct {
	Snippet string      `json:"snippet"`
	Options pageOptions `json:"options"`
}

type pageOptions struct {
	API            string `json:"api"`
	PublishableKey string `json:"publishableKey"`
	Timeout        int64  `json:"timeout,omitempty"` // ms
	Wait           int64  `json:"wait,omitempty"`    // s
}

// Demo returns the demo site: at / a lead form with two questions of its
// own (budget, team size) and a honeypot, that sends through the snippet,
// with its style sheet and script; the snippet itself at /leadintake.js,
// hosted beside the page as docs/forms.md recommends, so that the page loads
// and keeps an enquiry while the api is out of reach; and /not-sent, where
// the form's plain POST lands when the snippet did not run, telling the
// visitor plainly that nothing was sent (the api itself would answer a
// form-encoded POST 415 unsupported_media_type, a JSON error no visitor
// should see). The pages run the site's own scripts only and connect to
// the api's origin only (Content-Security-Policy).
func Demo(cfg DemoConfig) (http.Handler, error) {
	api, err := url.Parse(cfg.API)
	if err != nil || (api.Scheme != "http" && api.Scheme != "https") || api.Host == "" || api.RawQuery != "" || api.Fragment != "" {
		return nil, errors.New("the api URL must be an absolute http or https URL")
	}
	if !strings.HasPrefix(cfg.PublishableKey, "pk_") {
		return nil, errors.New("the publishable key must start with pk_")
	}
	base := strings.TrimRight(cfg.API, "/")
	page := pageConfig{
		Snippet: "/leadintake.js",
		Options: pageOptions{API: base, PublishableKey: cfg.PublishableKey, Timeout: cfg.Timeout.Milliseconds(), Wait: int64(cfg.Wait / time.Second)},
	}
	tmpl, err := template.ParseFS(demoFiles, "demo/index.html")
	if err != nil {
		return nil, err
	}
	var index bytes.Buffer
	if err := tmpl.Execute(&index, page); err != nil {
		return nil, err
	}
	read := func(name string) []byte {
		b, err := demoFiles.ReadFile("demo/" + name)
		if err != nil {
			panic(err) // embedded: present at build time
		}
		return b
	}
	apiOrigin := api.Scheme + "://" + api.Host
	csp := "default-src 'none'; script-src 'self'; connect-src " + apiOrigin +
		"; style-src 'self'; img-src 'self' data:; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"

	mux := http.NewServeMux()
	serve := func(pattern, contentType string, status int, body []byte) {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			h := w.Header()
			h.Set("Content-Type", contentType)
			h.Set("Cache-Control", "no-cache")
			h.Set("Content-Security-Policy", csp)
			h.Set("X-Content-Type-Options", "nosniff")
			h.Set("Referrer-Policy", "same-origin")
			w.WriteHeader(status)
			if r.Method != http.MethodHead {
				_, _ = w.Write(body)
			}
		})
	}
	const html = "text/html; charset=utf-8"
	serve("GET /{$}", html, http.StatusOK, index.Bytes())
	serve("GET /demo.css", "text/css; charset=utf-8", http.StatusOK, read("demo.css"))
	serve("GET /demo.js", "text/javascript; charset=utf-8", http.StatusOK, read("demo.js"))
	serve("GET /leadintake.js", "text/javascript; charset=utf-8", http.StatusOK, SnippetSource())
	notSent := read("not-sent.html")
	serve("GET /not-sent", html, http.StatusOK, notSent)
	// The form's plain POST: nothing is read, stored or logged; the visitor
	// is told that nothing was sent. 415, as the api would answer a form
	// body.
	serve("POST /not-sent", html, http.StatusUnsupportedMediaType, notSent)
	return mux, nil
}
