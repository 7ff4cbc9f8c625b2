package web_test

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
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
		if gz.Len() >= 12000 {
			t.Errorf("leadintake.js is %d bytes gzipped, not under 12 KB", gz.Len())
		}
	})

	// The unversioned file names its version, and that version's URL
	// serves the same bytes, for good; no other version is served.
	t.Run("Versioned", func(t *testing.T) {
		t.Parallel()
		version := hdr.Get("Leadintake-Snippet-Version")
		if version != web.SnippetVersion || !regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+$`).MatchString(version) {
			t.Fatalf("Leadintake-Snippet-Version %q, want the package's %q", version, web.SnippetVersion)
		}
		path := "/v1/sdk/leadintake@" + version + ".js"
		res := get(t, h, http.MethodGet, path)
		if res.Code != http.StatusOK || !bytes.Equal(res.Body.Bytes(), body) {
			t.Fatalf("GET %s: %d with %d bytes, want 200 and the unversioned file's %d", path, res.Code, res.Body.Len(), len(body))
		}
		for name, want := range map[string]string{
			"Cache-Control":               "public, max-age=31536000, immutable",
			"Content-Type":                "text/javascript; charset=utf-8",
			"Access-Control-Allow-Origin": "*",
			"ETag":                        etag,
			"Leadintake-Snippet-Version":  version,
		} {
			if got := res.Header().Get(name); got != want {
				t.Errorf("GET %s: %s %q, want %q", path, name, got, want)
			}
		}
		if res := get(t, h, http.MethodHead, path); res.Code != http.StatusOK || res.Body.Len() != 0 {
			t.Errorf("HEAD %s: %d with %d bytes", path, res.Code, res.Body.Len())
		}
		if res := get(t, h, http.MethodGet, path, "If-None-Match", etag); res.Code != http.StatusNotModified {
			t.Errorf("GET %s with its ETag: %d, want 304", path, res.Code)
		}
		for _, other := range []string{"0.0.1", version + "-rc1", "latest", "", version + ".js"} {
			res := get(t, h, http.MethodGet, "/v1/sdk/leadintake@"+other+".js")
			var e struct {
				Error struct{ Code, Message string }
			}
			if res.Code != http.StatusNotFound || res.Header().Get("Content-Type") != "application/json" ||
				json.Unmarshal(res.Body.Bytes(), &e) != nil || e.Error.Code != "not_found" || e.Error.Message == "" {
				t.Errorf("GET leadintake@%s.js: %d %q %s, want 404 with the API's error body", other, res.Code, res.Header().Get("Content-Type"), res.Body)
			}
			if res := get(t, h, http.MethodHead, "/v1/sdk/leadintake@"+other+".js"); res.Code != http.StatusNotFound || res.Body.Len() != 0 {
				t.Errorf("HEAD leadintake@%s.js: %d with %d bytes, want 404 without a body", other, res.Code, res.Body.Len())
			}
		}
	})
}
