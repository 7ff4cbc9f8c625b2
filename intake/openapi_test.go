package intake_test

import (
	"regexp"
	"strings"
	"testing"

	"github.com/pb33f/libopenapi"

	"github.com/leadintake/leadintake/callers"
	"github.com/leadintake/leadintake/intake"
	"github.com/leadintake/leadintake/lead"
	"github.com/leadintake/leadintake/openapi"
	"github.com/leadintake/leadintake/store"
)

// echoParam is a path parameter as Echo writes it (:key).
var echoParam = regexp.MustCompile(`:([A-Za-z0-9_]+)`)

// Every route the public handler registers, with its method, is an
// operation of the API description: a route added without its description
// fails here. (Operations the description has and the handler does not yet
// serve are logged.)
func TestEveryRouteIsDescribed(t *testing.T) {
	t.Parallel()
	// Registering the routes touches no database: a store without one
	// will do.
	e := intake.NewHandler(&intake.HandlerOpts{
		Store:   store.New(nil),
		Callers: callers.NewHolder(testClients(t)),
		Decode:  lead.DecodeOpts{AllowedSources: []string{"website", "linkedin", "referral", "ads", "event"}},
	})

	doc, err := libopenapi.NewDocument(openapi.Document())
	if err != nil {
		t.Fatal(err)
	}
	m, err := doc.BuildV3Model()
	if err != nil {
		t.Fatal(err)
	}
	described := map[string]bool{} // "GET /v1/operations/{key}"
	for path, item := range m.Model.Paths.PathItems.FromOldest() {
		for method := range item.GetOperations().FromOldest() {
			described[strings.ToUpper(method)+" "+path] = true
		}
	}

	served := map[string]bool{}
	routes := e.Routes()
	if len(routes) == 0 {
		t.Fatal("the handler registers no route")
	}
	for _, r := range routes {
		if strings.Contains(r.Path, "*") {
			t.Errorf("%s %s: a wildcard route cannot be described path by path", r.Method, r.Path)
			continue
		}
		route := r.Method + " " + echoParam.ReplaceAllString(r.Path, "{$1}")
		served[route] = true
		if !described[route] {
			t.Errorf("%s is served but not in openapi/openapi.json", route)
		}
	}
	for route := range described {
		if !served[route] {
			t.Logf("%s is described but not served by this handler", route)
		}
	}
}
