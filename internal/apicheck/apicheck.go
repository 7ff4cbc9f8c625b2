// Package apicheck holds real HTTP traffic to an OpenAPI 3.1 description:
// every request a client sends and every response it gets, checked with
// libopenapi-validator in strict mode (no undeclared header, query parameter
// or body member). The tests use it to keep the server and openapi.json
// honest with each other.
//
// The rule it applies: a request the description allows must get a response
// the description lists for it, with the documented headers and body. A
// request the description does not allow (tests send malformed and hostile
// ones on purpose) must be refused with a documented 4xx answer; it is a
// mismatch only when the server accepts it. A request to a path, or with a
// method, that no operation names must be answered as the description's
// components/responses say: NotFound (404), MethodNotAllowed (405), or, for a
// publishable key or a preflight, PublishableKeyRefused or PreflightRefused
// (403).
package apicheck

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	"github.com/pb33f/libopenapi-validator/config"
	verrors "github.com/pb33f/libopenapi-validator/errors"
	"github.com/pb33f/libopenapi-validator/helpers"
	"github.com/pb33f/libopenapi-validator/responses"
	"github.com/pb33f/libopenapi/datamodel/high/base"
	v3 "github.com/pb33f/libopenapi/datamodel/high/v3"
)

// The components/responses that answer a request no operation takes.
const (
	respNotFound         = "NotFound"
	respMethodNotAllowed = "MethodNotAllowed"
	respPublishableKey   = "PublishableKeyRefused"
	respPreflight        = "PreflightRefused"
)

// Checker checks requests and responses against one description. It is safe
// for concurrent use.
type Checker struct {
	// mu serialises checks: the validator renders schemas lazily, writing
	// to the shared model as it does (libopenapi v0.42), and its strict
	// mode keeps unguarded caches.
	mu      sync.Mutex
	v       validator.Validator
	version float32
	opts    []config.Option
	// unrouted are the answers to a request no operation takes, by name.
	unrouted map[string]*v3.Response
}

// New parses doc, an OpenAPI 3.1 document, and returns a Checker for it. It
// fails when the document does not parse, breaks the OpenAPI schema, or
// lacks one of the components/responses that answer unrouted requests.
func New(doc []byte) (*Checker, error) {
	d, err := libopenapi.NewDocument(doc)
	if err != nil {
		return nil, fmt.Errorf("apicheck: parse: %w", err)
	}
	if v := d.GetVersion(); !strings.HasPrefix(v, "3.1.") {
		return nil, fmt.Errorf("apicheck: OpenAPI %q, want 3.1", v)
	}
	m, err := d.BuildV3Model()
	if err != nil {
		return nil, fmt.Errorf("apicheck: model: %w", err)
	}
	// Strict mode: what the description does not declare is a mismatch,
	// also where JSON Schema would let it through (an undeclared response
	// header, a member of an open object). The members of a map (an object
	// whose additionalProperties is a schema) are declared by that schema,
	// which strict mode does not see: they are left to JSON Schema.
	opts := []config.Option{config.WithStrictMode(), config.WithStrictIgnorePaths(mapPaths(&m.Model)...)}
	v, errs := validator.NewValidator(d, opts...)
	if len(errs) > 0 {
		return nil, fmt.Errorf("apicheck: validator: %w", errors.Join(errs...))
	}
	if ok, verrs := v.ValidateDocument(); !ok {
		return nil, fmt.Errorf("apicheck: the document breaks the OpenAPI schema: %w", joinValidation(verrs))
	}
	c := &Checker{
		v: v, version: helpers.VersionToFloat(m.Model.Version), opts: opts,
		unrouted: map[string]*v3.Response{},
	}
	for _, name := range []string{respNotFound, respMethodNotAllowed, respPublishableKey, respPreflight} {
		var r *v3.Response
		if m.Model.Components != nil && m.Model.Components.Responses != nil {
			r = m.Model.Components.Responses.GetOrZero(name)
		}
		if r == nil {
			return nil, fmt.Errorf("apicheck: the document has no components/responses/%s", name)
		}
		c.unrouted[name] = r
	}
	return c, nil
}

// Check checks one exchange: req, whose body was reqBody, and resp, whose
// body was respBody (both may be nil for none; the bodies of req and resp
// are not read). It returns nil when they match the description.
func (c *Checker) Check(req *http.Request, reqBody []byte, resp *http.Response, respBody []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	vreq := req.Clone(req.Context())
	vreq.Body = io.NopCloser(bytes.NewReader(reqBody))
	vreq.ContentLength = int64(len(reqBody))
	vresp := *resp
	vresp.Body = io.NopCloser(bytes.NewReader(respBody))
	vresp.Request = vreq

	_, reqErrs := c.v.ValidateHttpRequestSync(vreq)
	var pathMissing, methodMissing bool
	for _, e := range reqErrs {
		pathMissing = pathMissing || e.IsPathMissingError()
		methodMissing = methodMissing || e.IsOperationMissingError()
	}

	var errs []*verrors.ValidationError
	if pathMissing || methodMissing {
		errs = c.checkUnrouted(vreq, &vresp, respBody, pathMissing)
	} else {
		_, errs = c.v.ValidateHttpResponse(vreq, &vresp)
		// A request outside the description is the caller's business
		// as long as the server refuses it as documented; accepting it
		// means that the description or the server is wrong.
		if len(reqErrs) > 0 && (resp.StatusCode < 400 || resp.StatusCode > 499) {
			errs = append(reqErrs, errs...)
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return &MismatchError{
		Method: req.Method, Path: req.URL.RequestURI(), Status: resp.StatusCode,
		Body: respBody, Problems: problems(errs),
	}
}

// checkUnrouted checks the answer to a request that no operation takes.
func (c *Checker) checkUnrouted(req *http.Request, resp *http.Response, body []byte, pathMissing bool) []*verrors.ValidationError {
	var name string
	switch {
	case resp.StatusCode == http.StatusNotFound && pathMissing:
		name = respNotFound
	case resp.StatusCode == http.StatusMethodNotAllowed && (!pathMissing || !standardMethods[req.Method]):
		// A method the path lacks, or one no path takes.
		name = respMethodNotAllowed
	case resp.StatusCode == http.StatusForbidden && req.Method == http.MethodOptions:
		name = respPreflight
	case resp.StatusCode == http.StatusForbidden && isPublishableKey(req.Header.Get("Authorization")):
		name = respPublishableKey
	default:
		what := "path"
		if !pathMissing {
			what = "method for this path"
		}
		return []*verrors.ValidationError{{
			ValidationType: helpers.ResponseBodyValidation,
			Message:        fmt.Sprintf("status %d for a %s the description lacks", resp.StatusCode, what),
			Reason:         "want 404 not_found for an unknown path, 405 method_not_allowed for a method the path lacks or a non-standard method, 403 for a publishable key or a preflight",
		}}
	}
	r := c.unrouted[name]
	code := strconv.Itoa(resp.StatusCode)
	var errs []*verrors.ValidationError
	if r.Headers != nil {
		_, herrs := responses.ValidateResponseHeaders(req, resp, r.Headers, "components/responses/"+name, code, c.opts...)
		errs = append(errs, herrs...)
	}
	// An answer to HEAD has no body (RFC 9110, 9.3.2).
	if req.Method == http.MethodHead || r.Content == nil {
		return errs
	}
	mt, ok := helpers.FindMediaType(r.Content, resp.Header.Get("Content-Type"))
	if !ok {
		return append(errs, &verrors.ValidationError{
			ValidationType: helpers.ResponseBodyValidation,
			Message:        fmt.Sprintf("Content-Type %q is not documented for components/responses/%s", resp.Header.Get("Content-Type"), name),
		})
	}
	if mt.Schema != nil {
		resp.Body = io.NopCloser(bytes.NewReader(body))
		_, berrs := responses.ValidateResponseSchema(&responses.ValidateResponseSchemaInput{
			Request: req, Response: resp, Schema: mt.Schema.Schema(), Version: c.version, Options: c.opts,
		})
		errs = append(errs, berrs...)
	}
	return errs
}

// mapPaths returns strict mode's ignore patterns for the members of every
// map in a request or response body of doc: "$.body.utm.*" for a member
// "utm" whose additionalProperties is a schema.
func mapPaths(doc *v3.Document) []string {
	seen := map[string]bool{}
	var walk func(s *base.Schema, path string, depth int)
	walk = func(s *base.Schema, path string, depth int) {
		// The depth bounds recursive schemas.
		if s == nil || depth > 12 {
			return
		}
		if s.AdditionalProperties != nil && s.AdditionalProperties.IsA() {
			seen[path+".*"] = true  // member names in dot notation
			seen[path+"[**"] = true // and in bracket notation ("a.b")
		}
		if s.Properties != nil {
			for name, p := range s.Properties.FromOldest() {
				// Strict mode writes such names in bracket notation;
				// no map of this API hides behind one.
				if !strings.ContainsAny(name, ".[]*") {
					walk(p.Schema(), path+"."+name, depth+1)
				}
			}
		}
		for _, group := range [][]*base.SchemaProxy{s.AllOf, s.AnyOf, s.OneOf} {
			for _, p := range group {
				walk(p.Schema(), path, depth+1)
			}
		}
		if s.Items != nil && s.Items.IsA() {
			walk(s.Items.A.Schema(), path+"[*]", depth+1)
		}
	}
	var bodies []*v3.MediaType
	addResponses := func(rs *v3.Responses) {
		if rs == nil || rs.Codes == nil {
			return
		}
		for _, r := range rs.Codes.FromOldest() {
			if r.Content != nil {
				for _, mt := range r.Content.FromOldest() {
					bodies = append(bodies, mt)
				}
			}
		}
	}
	if doc.Paths != nil && doc.Paths.PathItems != nil {
		for _, item := range doc.Paths.PathItems.FromOldest() {
			for _, op := range item.GetOperations().FromOldest() {
				if op.RequestBody != nil && op.RequestBody.Content != nil {
					for _, mt := range op.RequestBody.Content.FromOldest() {
						bodies = append(bodies, mt)
					}
				}
				addResponses(op.Responses)
			}
		}
	}
	if doc.Components != nil && doc.Components.Responses != nil {
		for _, r := range doc.Components.Responses.FromOldest() {
			if r.Content != nil {
				for _, mt := range r.Content.FromOldest() {
					bodies = append(bodies, mt)
				}
			}
		}
	}
	for _, mt := range bodies {
		if mt.Schema != nil {
			walk(mt.Schema.Schema(), "$.body", 0)
		}
	}
	paths := make([]string, 0, len(seen))
	for p := range seen {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	return paths
}

// standardMethods are the methods an unknown path answers with 404; any
// other is refused with 405 whatever the path.
var standardMethods = map[string]bool{
	http.MethodGet: true, http.MethodHead: true, http.MethodPost: true, http.MethodPut: true,
	http.MethodPatch: true, http.MethodDelete: true, http.MethodOptions: true,
}

func isPublishableKey(authorization string) bool {
	scheme, token, _ := strings.Cut(authorization, " ")
	return strings.EqualFold(scheme, "Bearer") && strings.HasPrefix(strings.TrimSpace(token), "pk_")
}

// MismatchError is an exchange that does not match the description.
type MismatchError struct {
	Method string
	// Path is the request's path and query.
	Path   string
	Status int
	// Body is the response body.
	Body []byte
	// Problems says what does not match, one line each.
	Problems []string
}

// maxBodyShown bounds the response body quoted in an error message.
const maxBodyShown = 512

func (e *MismatchError) Error() string {
	body := e.Body
	if len(body) > maxBodyShown {
		body = append(body[:maxBodyShown:maxBodyShown], "..."...)
	}
	return fmt.Sprintf("%s %s answered %d %s; against the API description:\n\t%s",
		e.Method, e.Path, e.Status, body, strings.Join(e.Problems, "\n\t"))
}

// problems renders validation errors one line each, with the schema
// failures that explain them.
func problems(errs []*verrors.ValidationError) []string {
	var lines []string
	for _, e := range errs {
		line := e.Message
		if e.Reason != "" && e.Reason != e.Message {
			line += ": " + e.Reason
		}
		for _, f := range e.SchemaValidationErrors {
			line += "; " + f.Error()
		}
		lines = append(lines, line)
	}
	return lines
}

func joinValidation(verrs []*verrors.ValidationError) error {
	return errors.New(strings.Join(problems(verrs), "\n"))
}
