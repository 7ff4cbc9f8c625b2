package web_test

import (
	"bytes"
	"compress/gzip"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/leadintake/leadintake/web"
)

// get sends a request to h and returns the recorded answer.
func get(t *testing.T, h http.Handler, method, target string, header ...string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(method, target, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func TestSnippet(t *testing.T) {
	t.Parallel()
	h := web.Snippet()
	res := get(t, h, http.MethodGet, "/v1/sdk/leadintake.js")
	if res.Code != http.StatusOK {
		t.Fatalf("GET: %d", res.Code)
	}
	hdr := res.Header()
	for name, want := range map[string]string{
		"Content-Type":                 "text/javascript; charset=utf-8",
		"Cache-Control":                "public, max-age=300",
		"Access-Control-Allow-Origin":  "*",
		"X-Content-Type-Options":       "nosniff",
		"Cross-Origin-Resource-Policy": "cross-origin",
	} {
		if got := hdr.Get(name); got != want {
			t.Errorf("%s: %q, want %q", name, got, want)
		}
	}
	etag := hdr.Get("ETag")
	if len(etag) < 10 || !strings.HasPrefix(etag, `"`) || !strings.HasSuffix(etag, `"`) {
		t.Fatalf("ETag %q, want a strong one", etag)
	}
	body := res.Body.Bytes()
	for _, export := range []string{"export async function submitLead(", "export function attachForm(", "export class OutcomeUnknown"} {
		if !bytes.Contains(body, []byte(export)) {
			t.Errorf("the snippet lacks %q", export)
		}
	}
	if again := get(t, h, http.MethodGet, "/v1/sdk/leadintake.js"); again.Header().Get("ETag") != etag || !bytes.Equal(again.Body.Bytes(), body) {
		t.Error("a second GET differs from the first")
	}

	t.Run("NotModified", func(t *testing.T) {
		t.Parallel()
		for _, inm := range []string{etag, `"other", ` + etag, "W/" + etag, "*"} {
			res := get(t, h, http.MethodGet, "/v1/sdk/leadintake.js", "If-None-Match", inm)
			if res.Code != http.StatusNotModified || res.Body.Len() != 0 || res.Header().Get("ETag") != etag {
				t.Errorf("If-None-Match %s: %d with %d bytes, ETag %q; want 304, empty, the ETag", inm, res.Code, res.Body.Len(), res.Header().Get("ETag"))
			}
		}
		if res := get(t, h, http.MethodGet, "/v1/sdk/leadintake.js", "If-None-Match", `"stale"`); res.Code != http.StatusOK || res.Body.Len() != len(body) {
			t.Errorf("a stale If-None-Match: %d with %d bytes, want 200 and the snippet", res.Code, res.Body.Len())
		}
	})

	t.Run("Head", func(t *testing.T) {
		t.Parallel()
		res := get(t, h, http.MethodHead, "/v1/sdk/leadintake.js")
		if res.Code != http.StatusOK || res.Body.Len() != 0 || res.Header().Get("ETag") != etag {
			t.Errorf("HEAD: %d with %d bytes, ETag %q", res.Code, res.Body.Len(), res.Header().Get("ETag"))
		}
	})

	t.Run("OtherMethods", func(t *testing.T) {
		t.Parallel()
		res := get(t, h, http.MethodPost, "/v1/sdk/leadintake.js")
		if res.Code != http.StatusMethodNotAllowed || res.Header().Get("Allow") != "GET, HEAD" {
			t.Errorf("POST: %d, Allow %q", res.Code, res.Header().Get("Allow"))
		}
	})

	// A page pays for every byte on its first visit.
	t.Run("Small", func(t *testing.T) {
		t.Parallel()
		var gz bytes.Buffer
		w, _ := gzip.NewWriterLevel(&gz, gzip.BestCompression)
		_, _ = io.Copy(w, bytes.NewReader(body))
		_ = w.Close()
		t.Logf("leadintake.js: %d bytes, %d gzipped", len(body), gz.Len())
		if gz.Len() > 10<<10 {
			t.Errorf("leadintake.js is %d bytes gzipped, over 10 KiB", gz.Len())
		}
	})
}
