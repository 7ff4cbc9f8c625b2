package web_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/leadintake/leadintake/web"
)

func TestDemo(t *testing.T) {
	t.Parallel()
	h, err := web.Demo(web.DemoConfig{
		API: "http://127.0.0.1:8080/", PublishableKey: "pk_demo_0123456789abcdef",
		Timeout: 90 * time.Second, Wait: 5 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}

	t.Run("TheForm", func(t *testing.T) {
		t.Parallel()
		res := get(t, h, http.MethodGet, "/")
		if res.Code != http.StatusOK || res.Header().Get("Content-Type") != "text/html; charset=utf-8" {
			t.Fatalf("GET /: %d %q", res.Code, res.Header().Get("Content-Type"))
		}
		page := res.Body.String()
		// The configuration is written into the page as JSON, for demo.js.
		m := regexp.MustCompile(`(?s)<script type="application/json" id="leadintake-config">(.*?)</script>`).FindStringSubmatch(page)
		if m == nil {
			t.Fatalf("no configuration in the page:\n%s", page)
		}
		var cfg struct {
			Snippet string `json:"snippet"`
			Options struct {
				API            string `json:"api"`
				PublishableKey string `json:"publishableKey"`
				Timeout        int    `json:"timeout"`
				Wait           int    `json:"wait"`
			} `json:"options"`
		}
		if err := json.Unmarshal([]byte(m[1]), &cfg); err != nil {
			t.Fatalf("configuration %s: %v", m[1], err)
		}
		if cfg.Snippet != "/leadintake.js" || cfg.Options.API != "http://127.0.0.1:8080" ||
			cfg.Options.PublishableKey != "pk_demo_0123456789abcdef" || cfg.Options.Timeout != 90000 || cfg.Options.Wait != 5 {
			t.Errorf("configuration %+v", cfg)
		}
		// Usable, and honest, without the snippet: a plain POST to a page
		// that says nothing was sent.
		for _, want := range []string{`action="/not-sent" method="post"`, "<noscript>", `aria-live="polite"`, `<label for="email">`,
			`name="budget"`, `name="team_size"`, `data-leadintake-honeypot aria-hidden="true"`} {
			if !strings.Contains(page, want) {
				t.Errorf("the page lacks %s", want)
			}
		}
		csp := res.Header().Get("Content-Security-Policy")
		if !strings.Contains(csp, "script-src 'self';") || !strings.Contains(csp, "connect-src http://127.0.0.1:8080;") {
			t.Errorf("Content-Security-Policy %q: want the site's own scripts, and connections to the api", csp)
		}
	})

	t.Run("Assets", func(t *testing.T) {
		t.Parallel()
		// The site hosts its own copy of the snippet, byte for byte the api's.
		if res := get(t, h, http.MethodGet, "/leadintake.js"); res.Code != http.StatusOK || !bytes.Equal(res.Body.Bytes(), web.SnippetSource()) {
			t.Errorf("GET /leadintake.js: %d, %d bytes", res.Code, res.Body.Len())
		}
		for path, ct := range map[string]string{"/demo.js": "text/javascript; charset=utf-8", "/demo.css": "text/css; charset=utf-8", "/leadintake.js": "text/javascript; charset=utf-8"} {
			if res := get(t, h, http.MethodGet, path); res.Code != http.StatusOK || res.Header().Get("Content-Type") != ct || res.Body.Len() == 0 {
				t.Errorf("GET %s: %d %q", path, res.Code, res.Header().Get("Content-Type"))
			}
		}
		if res := get(t, h, http.MethodGet, "/nothing-here"); res.Code != http.StatusNotFound {
			t.Errorf("GET /nothing-here: %d, want 404", res.Code)
		}
	})

	t.Run("PlainPost", func(t *testing.T) {
		t.Parallel()
		res := get(t, h, http.MethodPost, "/not-sent", "Content-Type", "application/x-www-form-urlencoded")
		if res.Code != http.StatusUnsupportedMediaType || !strings.HasPrefix(res.Header().Get("Content-Type"), "text/html") ||
			!strings.Contains(res.Body.String(), "nothing was sent") {
			t.Errorf("POST /not-sent: %d %q\n%s", res.Code, res.Header().Get("Content-Type"), res.Body)
		}
		if res := get(t, h, http.MethodGet, "/not-sent"); res.Code != http.StatusOK {
			t.Errorf("GET /not-sent: %d", res.Code)
		}
	})

	t.Run("BadConfig", func(t *testing.T) {
		t.Parallel()
		for _, cfg := range []web.DemoConfig{
			{API: "127.0.0.1:8080", PublishableKey: "pk_demo_0123456789abcdef"},
			{API: "ftp://api.example", PublishableKey: "pk_demo_0123456789abcdef"},
			{API: "http://api.example", PublishableKey: "demo-token"},
		} {
			if _, err := web.Demo(cfg); err == nil {
				t.Errorf("web.Demo(%+v): no error", cfg)
			}
		}
	})
}
