// Package web owns what leadintake gives web pages: the snippet
// (sdk/leadintake.js, the browser's side of the retry contract), served by
// the api at /v1/sdk/leadintake.js and under its version, and the demo site
// (a lead form that hosts its own copy of the snippet and sends through it,
// and the page its plain form POST lands on without JavaScript).
//
// The folder sdk is the snippet as a package a site can host beside its
// pages or bundle: the module, its TypeScript declarations, and the
// package.json whose version is the snippet's one version number.
package web

import (
	"bytes"
	"crypto/sha256"
	"crypto/sha512"
	_ "embed"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/leadintake/leadintake/response"
)

//go:embed sdk/leadintake.js
var snippet []byte

//go:embed sdk/package.json
var packageJSON []byte

// SnippetVersion is the snippet's version, from sdk/package.json: the api
// serves these bytes at /v1/sdk/leadintake@<SnippetVersion>.js, and names
// it in the Leadintake-Snippet-Version header of /v1/sdk/leadintake.js.
var SnippetVersion = func() string {
	var pkg struct{ Version string }
	if err := json.Unmarshal(packageJSON, &pkg); err != nil || !versionSyntax.MatchString(pkg.Version) {
		// Embedded: a bad one never gets past the package's own tests.
		panic("web: sdk/package.json has no usable version")
	}
	return pkg.Version
}()

// versionSyntax is what a version may be: bare and URL-safe, so that it
// goes into a path and a header as it is.
var versionSyntax = regexp.MustCompile(`^[0-9A-Za-z._-]{1,64}$`)

// SnippetIntegrity is the Subresource Integrity hash of the snippet
// (sha384), with which a page pins the versioned URL (integrity=, or an
// import map's integrity).
var SnippetIntegrity = func() string {
	sum := sha512.Sum384(snippet)
	return "sha384-" + base64.StdEncoding.EncodeToString(sum[:])
}()

// SnippetSource returns the snippet's bytes, for a site that serves its
// own copy (the demo site does). The caller must not change them.
func SnippetSource() []byte { return snippet }

// snippetETag is a strong validator of the snippet: a hash of its bytes, so
// that it changes exactly when the content does, whichever process serves it.
var snippetETag = func() string {
	sum := sha256.Sum256(snippet)
	return `"` + hex.EncodeToString(sum[:16]) + `"`
}()

// SnippetMaxAge is how long browsers and caches may use the unversioned
// snippet without asking again; after it, a matching ETag costs a 304. A
// versioned URL is cacheable for good: its bytes never change.
const SnippetMaxAge = 5 * time.Minute

// Paths of the snippet: the current one, and one version's.
const (
	snippetPath          = "/v1/sdk/leadintake.js"
	versionedPrefix      = "/v1/sdk/leadintake@"
	versionedSuffix      = ".js"
	immutableCacheHeader = "public, max-age=31536000, immutable"
)

// Snippet returns the handler of GET and HEAD /v1/sdk/leadintake.js and
// /v1/sdk/leadintake@<version>.js: the snippet as JavaScript, with a
// strong ETag and 304 for a matching If-None-Match, and its version in
// Leadintake-Snippet-Version. The unversioned file is cacheable for
// SnippetMaxAge, so that an upgrade reaches pages soon; the versioned one
// for a year, immutable, so that a page may pin its bytes. A version other
// than SnippetVersion is 404 with the API's error body: this process has
// no other. It is public: no credentials, and any page may import it (a
// module script from another origin needs CORS).
func Snippet() http.Handler {
	modified := time.Time{} // no Last-Modified: the ETag is the validator
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		h := w.Header()
		cache := "public, max-age=" + strconv.Itoa(int(SnippetMaxAge/time.Second))
		if r.URL.Path != snippetPath {
			version, ok := strings.CutPrefix(r.URL.Path, versionedPrefix)
			version, ok2 := strings.CutSuffix(version, versionedSuffix)
			if !ok || !ok2 || version != SnippetVersion {
				notFound(w, r)
				return
			}
			cache = immutableCacheHeader
		}
		h.Set("Content-Type", "text/javascript; charset=utf-8")
		h.Set("Cache-Control", cache)
		h.Set("ETag", snippetETag)
		h.Set("Leadintake-Snippet-Version", SnippetVersion)
		h.Set("Access-Control-Allow-Origin", "*")
		h.Set("Cross-Origin-Resource-Policy", "cross-origin")
		h.Set("X-Content-Type-Options", "nosniff")
		// ServeContent answers If-None-Match (304), HEAD and ranges.
		http.ServeContent(w, r, "leadintake.js", modified, bytes.NewReader(snippet))
	})
}

// notFound answers a version this process does not have as the API
// answers any path it does not have: 404 not_found, the error body.
func notFound(w http.ResponseWriter, r *http.Request) {
	body := response.Marshal(&response.ErrorBody{Error: response.ErrorDetail{
		Code:    response.CodeNotFound,
		Message: "this api serves the snippet's version " + SnippetVersion + " only",
	}})
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusNotFound)
	if r.Method != http.MethodHead {
		_, _ = w.Write(body)
	}
}
