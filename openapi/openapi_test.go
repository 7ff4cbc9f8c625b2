package openapi_test

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	v3 "github.com/pb33f/libopenapi/datamodel/high/v3"

	"github.com/leadintake/leadintake/internal/apicheck"
	"github.com/leadintake/leadintake/lead"
	"github.com/leadintake/leadintake/openapi"
)

// model parses the document as OpenAPI 3.1 and builds its model.
func model(t *testing.T) (libopenapi.Document, *v3.Document) {
	t.Helper()
	doc, err := libopenapi.NewDocument(openapi.Document())
	if err != nil {
		t.Fatalf("the document does not parse: %v", err)
	}
	if v := doc.GetVersion(); !strings.HasPrefix(v, "3.1.") {
		t.Fatalf("OpenAPI %q, want 3.1", v)
	}
	m, err := doc.BuildV3Model()
	if err != nil {
		t.Fatalf("the document's model: %v", err)
	}
	return doc, &m.Model
}

func TestDocumentIsOpenAPI31(t *testing.T) {
	t.Parallel()
	doc, _ := model(t)
	v, errs := validator.NewValidator(doc)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if ok, verrs := v.ValidateDocument(); !ok {
		for _, e := range verrs {
			t.Errorf("%s: %s", e.Message, e.Reason)
			for _, f := range e.SchemaValidationErrors {
				t.Errorf("\t%s", f.Error())
			}
		}
	}
	// What the end-to-end tests check traffic with accepts it too.
	if _, err := apicheck.New(openapi.Document()); err != nil {
		t.Fatal(err)
	}
}

// responseCodes returns the value of every constant of type Code that
// package response declares, read from its source.
func responseCodes(t *testing.T) []string {
	t.Helper()
	fset := token.NewFileSet()
	files, err := filepath.Glob(filepath.Join("..", "response", "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var codes []string
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range f.Decls {
			gen, ok := decl.(*ast.GenDecl)
			if !ok || gen.Tok != token.CONST {
				continue
			}
			for _, spec := range gen.Specs {
				vs := spec.(*ast.ValueSpec)
				if typ, ok := vs.Type.(*ast.Ident); !ok || typ.Name != "Code" {
					continue
				}
				for _, v := range vs.Values {
					lit, ok := v.(*ast.BasicLit)
					if !ok || lit.Kind != token.STRING {
						t.Fatalf("%s: a Code constant that is not a string literal", fset.Position(v.Pos()))
					}
					s, err := strconv.Unquote(lit.Value)
					if err != nil {
						t.Fatal(err)
					}
					codes = append(codes, s)
				}
			}
		}
	}
	return codes
}

func TestEveryErrorCodeIsInTheEnum(t *testing.T) {
	t.Parallel()
	_, m := model(t)
	schema := m.Components.Schemas.GetOrZero("ErrorCode")
	if schema == nil {
		t.Fatal("no components/schemas/ErrorCode")
	}
	var enum []string
	for _, node := range schema.Schema().Enum {
		enum = append(enum, node.Value)
	}
	codes := responseCodes(t)
	// The package declares at least the codes of the first API version; a
	// reader that finds none has stopped reading it.
	if !slices.Contains(codes, "unauthorized") || !slices.Contains(codes, "downstream_unavailable") {
		t.Fatalf("read %v from package response; the reader missed constants", codes)
	}
	for _, code := range codes {
		if !slices.Contains(enum, code) {
			t.Errorf("response code %q is not in components/schemas/ErrorCode", code)
		}
	}
	// The table in the enum's description names every code too.
	for _, code := range enum {
		if !strings.Contains(schema.Schema().Description, "`"+code+"`") {
			t.Errorf("components/schemas/ErrorCode's description does not explain %q", code)
		}
	}
}

// The contract's routes, each with its methods (the snippet's HEAD, for
// caches and link checkers, is served beside its GET).
var contractRoutes = map[string][]string{
	"/v1/leads":                       {"OPTIONS", "POST"},
	"/v1/operations/{key}":            {"GET", "OPTIONS"},
	"/v1/webhooks/{client_id}/leads":  {"POST"},
	"/v1/sdk/leadintake.js":           {"GET", "HEAD"},
	"/v1/sdk/leadintake@{version}.js": {"GET", "HEAD"},
	"/openapi.json":                   {"GET"},
	"/healthz":                        {"GET"},
	"/readyz":                         {"GET"},
}

func TestEveryContractRouteIsDescribed(t *testing.T) {
	t.Parallel()
	_, m := model(t)
	described := map[string][]string{}
	for path, item := range m.Paths.PathItems.FromOldest() {
		for method := range item.GetOperations().FromOldest() {
			described[path] = append(described[path], strings.ToUpper(method))
		}
		slices.Sort(described[path])
	}
	for path, methods := range contractRoutes {
		if !slices.Equal(described[path], methods) {
			t.Errorf("%s: described methods %v, the contract's %v", path, described[path], methods)
		}
	}
	for path := range described {
		if _, ok := contractRoutes[path]; !ok {
			t.Errorf("%s is described but is no route of the contract", path)
		}
	}
}

// Every response of every operation declares X-Request-Id, required unless
// the HTTP server itself may answer (431).
func TestEveryResponseDeclaresRequestID(t *testing.T) {
	t.Parallel()
	_, m := model(t)
	for path, item := range m.Paths.PathItems.FromOldest() {
		for method, op := range item.GetOperations().FromOldest() {
			for code, resp := range op.Responses.Codes.FromOldest() {
				h := resp.Headers.GetOrZero("X-Request-Id")
				switch {
				case h == nil:
					t.Errorf("%s %s %s: no X-Request-Id", strings.ToUpper(method), path, code)
				case !h.Required && code != "431":
					t.Errorf("%s %s %s: X-Request-Id is not required", strings.ToUpper(method), path, code)
				}
			}
		}
	}
}

func get(t *testing.T, srv *httptest.Server, method string, header ...string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+"/openapi.json", nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1])
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, body
}

func TestHandler(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(openapi.Handler())
	t.Cleanup(srv.Close)

	resp, body := get(t, srv, http.MethodGet)
	etag := resp.Header.Get("ETag")
	switch {
	case resp.StatusCode != http.StatusOK:
		t.Fatalf("GET: %d", resp.StatusCode)
	case resp.Header.Get("Content-Type") != "application/json":
		t.Errorf("Content-Type %q", resp.Header.Get("Content-Type"))
	case !bytes.Equal(body, openapi.Document()):
		t.Errorf("the body is not the document")
	case !strings.Contains(resp.Header.Get("Cache-Control"), "max-age="):
		t.Errorf("Cache-Control %q, want a max-age", resp.Header.Get("Cache-Control"))
	case !strings.HasPrefix(etag, `"`) || !strings.HasSuffix(etag, `"`) || len(etag) < 10:
		t.Errorf("ETag %q, want a strong entity tag", etag)
	}

	for _, inm := range []string{etag, "W/" + etag, `"stale", ` + etag, "*"} {
		resp, body := get(t, srv, http.MethodGet, "If-None-Match", inm)
		if resp.StatusCode != http.StatusNotModified || len(body) != 0 || resp.Header.Get("ETag") != etag {
			t.Errorf("If-None-Match %s: %d, ETag %q, %d bytes; want 304 without a body", inm, resp.StatusCode, resp.Header.Get("ETag"), len(body))
		}
	}
	if resp, _ := get(t, srv, http.MethodGet, "If-None-Match", `"stale"`); resp.StatusCode != http.StatusOK {
		t.Errorf("If-None-Match of another tag: %d, want 200", resp.StatusCode)
	}
	resp, body = get(t, srv, http.MethodHead)
	if resp.StatusCode != http.StatusOK || len(body) != 0 || resp.ContentLength != int64(len(openapi.Document())) {
		t.Errorf("HEAD: %d, Content-Length %d, %d bytes", resp.StatusCode, resp.ContentLength, len(body))
	}
	resp, body = get(t, srv, http.MethodPost)
	if resp.StatusCode != http.StatusMethodNotAllowed || !bytes.Contains(body, []byte(`"method_not_allowed"`)) {
		t.Errorf("POST: %d %s, want 405 method_not_allowed", resp.StatusCode, body)
	}
}

// Document hands out a copy: a caller that writes to it changes nothing.
func TestDocumentIsACopy(t *testing.T) {
	t.Parallel()
	d := openapi.Document()
	d[0] = 'X'
	if openapi.Document()[0] == 'X' {
		t.Fatal("Document returned the package's own slice")
	}
}

// describedAccepts reports whether the description allows body as a
// submission: whether an api that accepted it (a documented 202) would
// answer a request the description takes.
func describedAccepts(t *testing.T, c *apicheck.Checker, body string) (bool, error) {
	t.Helper()
	const key = "agree-key-0001"
	req, err := http.NewRequest(http.MethodPost, "http://api.test/v1/leads", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer token-0123456789")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	answer := []byte(`{"status":"processing","idempotency_key":"` + key + `","lead_id":"0195a3c2-7b1e-7c4d-9a2b-3c4d5e6f7a8b","status_url":"/v1/operations/` + key + `"}`)
	resp := &http.Response{StatusCode: http.StatusAccepted, Header: http.Header{}}
	for name, value := range map[string]string{
		"Content-Type": "application/json", "Location": "/v1/operations/" + key, "Retry-After": "1",
		"Idempotency-Key": key, "Idempotent-Replayed": "false", "X-Request-Id": "req-1",
	} {
		resp.Header.Set(name, value)
	}
	err = c.Check(req, []byte(body), resp, answer)
	return err == nil, err
}

// The description of the body and the api's decoder agree on what a lead
// is, at the corners of its nested members (attribution, utm, fields): a
// body the api accepts is one the description allows, and one it refuses
// is one the description does not (the checks of real traffic would report
// an accepted body outside the description).
func TestLeadSchemaAgreesWithTheDecoder(t *testing.T) {
	t.Parallel()
	c, err := apicheck.New(openapi.Document())
	if err != nil {
		t.Fatal(err)
	}
	with := func(member string) string {
		return `{"email":"ada@example.com","source":"website"` + member + `}`
	}
	long := "https://acme.example/" + strings.Repeat("p", 2048-len("https://acme.example/"))
	// (The description cannot tell a day a month lacks, 2025-02-30: the
	// api alone refuses it, which it may, with a documented 422.)
	for _, body := range []string{
		with(``),
		with(`,"utm":{"source":"google"},"fields":{"budget":"10k"}`),
		with(`,"attribution":{"first":{"landing_page":"https://acme.example/landing?utm_source=google&gclid=abc123","referrer":"https://www.google.com/",` +
			`"utm":{"source":"google","medium":"cpc","campaign":"spring"},"click_ids":{"gclid":"abc123","fbclid":"f","msclkid":"m"},"at":"2025-03-01T09:30:00.123Z"},` +
			`"last":{"landing_page":"http://acme.example/contact","at":"2025-03-01T10:00:00+01:00"}}`),
		with(`,"attribution":null`),
		with(`,"attribution":{}`),
		with(`,"attribution":{"first":null,"last":{}}`),
		with(`,"attribution":{"first":{"landing_page":null,"referrer":null,"utm":null,"click_ids":null,"at":null}}`),
		with(`,"attribution":{"last":{"click_ids":{"gclid":null,"fbclid":""}}}`),
		with(`,"attribution":{"first":{"landing_page":"` + long + `","click_ids":{"gclid":"` + strings.Repeat("x", 512) + `"}}}`),
		with(`,"attribution":{"first":{"utm":{"k0":"a","k1":"b","k2":"c","k3":"d","k4":"e","k5":"f","k6":"g","k7":"h","k8":"i","k9":"j",` +
			`"l0":"a","l1":"b","l2":"c","l3":"d","l4":"e","l5":"f","l6":"g","l7":"h","l8":"i","l9":"` + strings.Repeat("é", 200) + `"}}}`),
		// Refused, by both.
		with(`,"attribution":{"middle":{}}`),
		with(`,"attribution":{"first":{"page":"https://acme.example/"}}`),
		with(`,"attribution":{"first":{"click_ids":{"ttclid":"x"}}}`),
		with(`,"attribution":{"first":{"landing_page":"ftp://acme.example/"}}`),
		with(`,"attribution":{"first":{"landing_page":"/contact"}}`),
		with(`,"attribution":{"first":{"referrer":""}}`),
		with(`,"attribution":{"first":{"landing_page":"` + long + `x"}}`),
		with(`,"attribution":{"first":{"click_ids":{"gclid":"` + strings.Repeat("x", 513) + `"}}}`),
		with(`,"attribution":{"first":{"click_ids":{"gclid":1}}}`),
		with(`,"attribution":{"first":{"click_ids":"abc"}}`),
		with(`,"attribution":{"first":{"at":"yesterday"}}`),
		with(`,"attribution":{"first":{"at":"2025-03-01"}}`),
		with(`,"attribution":{"first":{"at":"2025-03-01T10:00:00"}}`),
		with(`,"attribution":{"first":{"at":1740820000}}`),
		with(`,"attribution":{"first":{"at":"2025-13-01T10:00:00Z"}}`),
		with(`,"attribution":{"first":{"at":"2025-03-01T10:00:00+24:00"}}`),
		with(`,"attribution":{"first":{"at":"2025-03-01t10:00:00z"}}`),
		with(`,"attribution":{"first":{"at":"2025-03-01T10:00:00,5Z"}}`),
		with(`,"attribution":{"first":{"at":"2025-03-01T24:00:00Z"}}`),
		with(`,"attribution":{"first":{"utm":{"source":"` + strings.Repeat("é", 201) + `"}}}`),
		with(`,"attribution":{"first":{"utm":{"source":1}}}`),
		with(`,"attribution":{"first":"https://acme.example/"}`),
		with(`,"attribution":{"last":[]}`),
		with(`,"attribution":"https://acme.example/"`),
		with(`,"utm":{"source":1}`),
		with(`,"fields":{"Budget":"10k"}`),
	} {
		_, decodeErr := lead.Decode([]byte(body), nil)
		described, err := describedAccepts(t, c, body)
		if described != (decodeErr == nil) {
			t.Errorf("%.160s\nthe api: %v\nthe description: %v", body, decodeErr, err)
		}
	}
}
