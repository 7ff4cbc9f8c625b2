package intake_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/leadintake/leadintake/response"
)

// The snippet is served by the api, to anyone: whatever Authorization a
// request carries (a wrong token, a publishable key from an origin it does
// not allow), with its validator and 304 for a matching one.
func TestSnippetRoute(t *testing.T) {
	t.Parallel()
	api := newTestAPI(t, nil)
	for name, edit := range map[string]func(*http.Request){
		"anonymous":     func(*http.Request) {},
		"wrong token":   withHeader("Authorization", "Bearer not-a-token"),
		"other origin":  fromPage("https://evil.example"),
		"allowed page":  fromPage(shopOrigin),
		"bearer client": withHeader("Authorization", "Bearer "+tokenA),
	} {
		req := edited(newRequest(t, api, http.MethodGet, "/v1/sdk/leadintake.js"), edit)
		res := api.send(t, req)
		if res.Status != http.StatusOK || res.Header.Get("Content-Type") != "text/javascript; charset=utf-8" ||
			!strings.Contains(string(res.Body), "export function attachForm(") {
			t.Fatalf("GET /v1/sdk/leadintake.js (%s): %d %q", name, res.Status, res.Header.Get("Content-Type"))
		}
		if res.Header.Get("Access-Control-Allow-Origin") != "*" {
			t.Errorf("GET /v1/sdk/leadintake.js (%s): Access-Control-Allow-Origin %q, want * (a module script of any page)", name, res.Header.Get("Access-Control-Allow-Origin"))
		}
		etag := res.Header.Get("ETag")
		if etag == "" || !strings.Contains(res.Header.Get("Cache-Control"), "max-age=") {
			t.Fatalf("GET /v1/sdk/leadintake.js (%s): ETag %q, Cache-Control %q", name, etag, res.Header.Get("Cache-Control"))
		}
		again := api.send(t, edited(newRequest(t, api, http.MethodGet, "/v1/sdk/leadintake.js"), edit, withHeader("If-None-Match", etag)))
		if again.Status != http.StatusNotModified || len(again.Body) != 0 {
			t.Errorf("GET with If-None-Match (%s): %d with %d bytes, want 304", name, again.Status, len(again.Body))
		}
	}
	head := api.send(t, newRequest(t, api, http.MethodHead, "/v1/sdk/leadintake.js"))
	if head.Status != http.StatusOK || len(head.Body) != 0 || head.Header.Get("ETag") == "" {
		t.Errorf("HEAD /v1/sdk/leadintake.js: %d with %d bytes", head.Status, len(head.Body))
	}
	api.send(t, newRequest(t, api, http.MethodPost, "/v1/sdk/leadintake.js")).requireError(t, http.StatusMethodNotAllowed, response.CodeMethodNotAllowed)
}
