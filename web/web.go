// Package web owns what leadintake gives web pages: the snippet
// (leadintake.js, the browser's side of the retry contract), served by the
// api at /v1/sdk/leadintake.js, and the demo site (a lead form that uses it,
// and the page its plain form POST lands on without JavaScript).
package web

import (
	"bytes"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"net/http"
	"strconv"
	"time"
)

//go:embed leadintake.js
var snippet []byte

// snippetETag is a strong validator of the snippet: a hash of its bytes, so
// that it changes exactly when the content does, whichever process serves it.
var snippetETag = func() string {
	sum := sha256.Sum256(snippet)
	return `"` + hex.EncodeToString(sum[:16]) + `"`
}()

// SnippetMaxAge is how long browsers and caches may use the snippet without
// asking again; after it, a matching ETag costs a 304.
const SnippetMaxAge = 5 * time.Minute

// Snippet returns the handler of GET and HEAD /v1/sdk/leadintake.js: the
// snippet as JavaScript, cacheable for SnippetMaxAge, with a strong ETag and
// 304 for a matching If-None-Match. It is public: no credentials, and any
// page may import it (a module script from another origin needs CORS).
func Snippet() http.Handler {
	modified := time.Time{} // no Last-Modified: the ETag is the validator
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		h := w.Header()
		h.Set("Content-Type", "text/javascript; charset=utf-8")
		h.Set("Cache-Control", "public, max-age="+strconv.Itoa(int(SnippetMaxAge/time.Second)))
		h.Set("ETag", snippetETag)
		h.Set("Access-Control-Allow-Origin", "*")
		h.Set("Cross-Origin-Resource-Policy", "cross-origin")
		h.Set("X-Content-Type-Options", "nosniff")
		// ServeContent answers If-None-Match (304), HEAD and ranges.
		http.ServeContent(w, r, "leadintake.js", modified, bytes.NewReader(snippet))
	})
}
