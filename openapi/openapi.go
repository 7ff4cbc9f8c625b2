// Package openapi owns the description of leadintake's public API: the
// OpenAPI 3.1 document openapi.json, written by hand from the contract, and
// the handler that serves it as GET /openapi.json. Every route, status,
// header and error code a caller can meet is in the document; the tests hold
// the server and the document to each other (the routes in package intake,
// real traffic in the end-to-end tests through internal/apicheck).
package openapi

import (
	"bytes"
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
	"net/http"
	"strconv"
	"strings"

	"github.com/leadintake/leadintake/response"
)

//go:embed openapi.json
var document []byte

// etag is the document's strong entity tag: a digest of its bytes, so that
// it changes exactly when the document does, whichever binary serves it.
var etag = func() string {
	sum := sha256.Sum256(document)
	return `"` + base64.RawURLEncoding.EncodeToString(sum[:18]) + `"`
}()

// cacheControl lets clients and proxies keep the document for five minutes
// and then revalidate it with If-None-Match: it changes only with a deploy.
const cacheControl = "public, max-age=300"

// methodNotAllowed is the API's error body for a method the route does not
// take.
var methodNotAllowed = response.Marshal(response.ErrorBody{Error: response.ErrorDetail{
	Code: response.CodeMethodNotAllowed, Message: "method not allowed",
}})

// Document returns the OpenAPI document, JSON, as served. The caller owns
// the returned slice.
func Document() []byte { return bytes.Clone(document) }

// Handler returns an http.Handler that serves the document to GET and HEAD
// with Content-Type application/json, an ETag and Cache-Control, and answers
// 304 to an If-None-Match that matches. Other methods get 405 with Allow.
// It writes no X-Request-Id: the API's middleware does that for every route.
func Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusMethodNotAllowed)
			_, _ = w.Write(methodNotAllowed)
			return
		}
		h := w.Header()
		h.Set("ETag", etag)
		h.Set("Cache-Control", cacheControl)
		if noneMatch(r.Header.Values("If-None-Match"), etag) {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		h.Set("Content-Type", "application/json")
		if r.Method == http.MethodHead {
			// The length a GET would send, without the body.
			h.Set("Content-Length", strconv.Itoa(len(document)))
			w.WriteHeader(http.StatusOK)
			return
		}
		_, _ = w.Write(document)
	})
}

// noneMatch reports whether an If-None-Match field (RFC 9110, 13.1.2)
// matches tag: "*", or a listed tag equal to it under the weak comparison,
// which is the one If-None-Match uses.
func noneMatch(fields []string, tag string) bool {
	for _, field := range fields {
		for candidate := range strings.SplitSeq(field, ",") {
			candidate = strings.TrimSpace(candidate)
			if candidate == "*" || strings.TrimPrefix(candidate, "W/") == tag {
				return true
			}
		}
	}
	return false
}
