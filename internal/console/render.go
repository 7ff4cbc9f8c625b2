package console

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/leadintake/leadintake/lead"
	"github.com/leadintake/leadintake/operator"
)

// page is one page's template: the layout with the page's content.
type page struct{ t *template.Template }

// parsePages parses each page of templates/ with the layout.
func parsePages() (map[string]*page, error) {
	names, err := fs.Glob(files, "templates/*.html")
	if err != nil {
		return nil, err
	}
	pages := map[string]*page{}
	for _, name := range names {
		base := strings.TrimSuffix(strings.TrimPrefix(name, "templates/"), ".html")
		if base == "layout" {
			continue
		}
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(files, "templates/layout.html", name)
		if err != nil {
			return nil, fmt.Errorf("console: %s: %w", name, err)
		}
		pages[base] = &page{t: t}
	}
	return pages, nil
}

// view is what every page shows: its title, the section of the menu it
// belongs to, the login, and the page's own data.
type view struct {
	Title   string
	Section string
	Who     operator.Actor
	Now     time.Time
	Data    any
}

// render writes the page name with data, with status.
func (h *handler) render(w http.ResponseWriter, r *http.Request, status int, name, title, section string, data any) {
	p, ok := h.pages[name]
	if !ok {
		panic("console: no page " + name)
	}
	var buf bytes.Buffer
	if err := p.t.Execute(&buf, &view{Title: title, Section: section, Who: who(r), Now: h.now(), Data: data}); err != nil {
		h.logger.ErrorContext(r.Context(), "console: render", slog.String("page", name), slog.String("error", err.Error()))
		http.Error(w, "the page could not be shown", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// fail answers with the error page: status and a sentence for people.
func (h *handler) fail(w http.ResponseWriter, r *http.Request, status int, msg string) {
	h.render(w, r, status, "error", http.StatusText(status), "", msg)
}

// funcs are the templates' helpers.
var funcs = template.FuncMap{
	// ago is how long before now t was, for people ("3m ago").
	"ago": func(now, t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		d := now.Sub(t)
		if d < 0 {
			return "in " + short(-d)
		}
		return short(d) + " ago"
	},
	// in is how long after now t is ("in 25s"), or "due" when past.
	"in": func(now, t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		if d := t.Sub(now); d > 0 {
			return "in " + short(d)
		}
		return "due"
	},
	"dur": short,
	// at is t in UTC, to the second.
	"at": func(t any) string {
		switch v := t.(type) {
		case time.Time:
			if v.IsZero() {
				return "-"
			}
			return v.UTC().Format("2006-01-02 15:04:05Z")
		case *time.Time:
			if v == nil || v.IsZero() {
				return "-"
			}
			return v.UTC().Format("2006-01-02 15:04:05Z")
		}
		return "-"
	},
	"timeOf": func(p *time.Time) time.Time {
		if p == nil {
			return time.Time{}
		}
		return *p
	},
	"deref": func(p *string) string {
		if p == nil {
			return ""
		}
		return *p
	},
	"join": strings.Join,
	// touch names an attribution's touch for its template.
	"touch": func(title string, t *lead.Touch) map[string]any { return map[string]any{"Title": title, "T": t} },
	// sorted returns the keys of m in order.
	"sorted": func(m any) []string {
		var keys []string
		switch v := m.(type) {
		case map[string]string:
			for k := range v {
				keys = append(keys, k)
			}
		case map[string]any:
			for k := range v {
				keys = append(keys, k)
			}
		}
		sort.Strings(keys)
		return keys
	},
	// value renders one member of a JSON object (the enrichment) as text.
	"value": func(v any) string {
		if s, ok := v.(string); ok {
			return s
		}
		b, _ := json.Marshal(v)
		return string(b)
	},
	"compact": func(raw json.RawMessage) string {
		var buf bytes.Buffer
		if json.Compact(&buf, raw) != nil || buf.String() == "{}" {
			return ""
		}
		return buf.String()
	},
	// keyPath is the path of a key's page.
	"keyPath": func(client, key string) string {
		return Prefix + "keys/" + url.PathEscape(client) + "/" + url.PathEscape(key)
	},
	"pathEscape": url.PathEscape,
}

// short writes d for people: 45s, 12m, 3h5m, 2d4h.
func short(d time.Duration) string {
	switch {
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 24*time.Hour:
		return fmt.Sprintf("%dh%dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd%dh", int(d.Hours())/24, int(d.Hours())%24)
}
