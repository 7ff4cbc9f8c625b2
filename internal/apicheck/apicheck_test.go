package apicheck_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/leadintake/leadintake/internal/apicheck"
)

// newChecker returns a Checker for testdata/things.json, a small API with
// one operation, POST /things.
func newChecker(t *testing.T) *apicheck.Checker {
	t.Helper()
	doc, err := os.ReadFile("testdata/things.json")
	if err != nil {
		t.Fatal(err)
	}
	c, err := apicheck.New(doc)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// reports collects what a checking transport reports.
type reports struct {
	mu   sync.Mutex
	errs []error
}

func (r *reports) add(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, err)
}

func (r *reports) all() []error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]error(nil), r.errs...)
}

// serve starts a server answering with h and returns a client whose
// requests go through c's transport, reporting to the returned reports.
func serve(t *testing.T, c *apicheck.Checker, h http.HandlerFunc) (*httptest.Server, *http.Client, *reports) {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	r := &reports{}
	return srv, &http.Client{Transport: c.Transport(srv.Client().Transport, r.add)}, r
}

// created answers POST /things as documented: 201, Location, X-Request-Id,
// and the thing, named after the request's body.
func created(w http.ResponseWriter, r *http.Request) {
	thing := struct {
		ID     int               `json:"id"`
		Name   string            `json:"name"`
		Labels map[string]string `json:"labels,omitempty"`
	}{ID: 1}
	_ = json.NewDecoder(r.Body).Decode(&thing)
	w.Header().Set("X-Request-Id", "req-1")
	w.Header().Set("Location", "/things/1")
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(thing)
}

func refuse(status int, code string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("X-Request-Id", "req-1")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		fmt.Fprintf(w, `{"error":{"code":%q,"message":"no"}}`, code)
	}
}

func post(t *testing.T, client *http.Client, url, body string, edits ...func(*http.Request)) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Thing-Key", "key-1")
	for _, edit := range edits {
		edit(req)
	}
	return send(t, client, req)
}

func send(t *testing.T, client *http.Client, req *http.Request) (*http.Response, string) {
	t.Helper()
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

// requireReported fails unless exactly one mismatch was reported, whose
// message holds every one of want.
func requireReported(t *testing.T, r *reports, want ...string) {
	t.Helper()
	errs := r.all()
	if len(errs) != 1 {
		t.Fatalf("reported %d mismatches, want 1: %v", len(errs), errs)
	}
	var mismatch *apicheck.MismatchError
	if !errors.As(errs[0], &mismatch) {
		t.Fatalf("reported %T, want *apicheck.MismatchError: %v", errs[0], errs[0])
	}
	t.Log(errs[0])
	for _, w := range want {
		if !strings.Contains(errs[0].Error(), w) {
			t.Errorf("report does not say %q: %v", w, errs[0])
		}
	}
}

func requireNothingReported(t *testing.T, r *reports) {
	t.Helper()
	if errs := r.all(); len(errs) > 0 {
		t.Fatalf("reported mismatches for a documented exchange: %v", errs)
	}
}

func TestConformingExchangePasses(t *testing.T) {
	t.Parallel()
	srv, client, r := serve(t, newChecker(t), created)
	resp, body := post(t, client, srv.URL+"/things", `{"name":"box","labels":{"colour":"red","a.b":"c"}}`)
	if resp.StatusCode != http.StatusCreated || body != `{"id":1,"name":"box","labels":{"a.b":"c","colour":"red"}}`+"\n" {
		t.Fatalf("the caller got %d %s: the request or response body was lost on the way", resp.StatusCode, body)
	}
	requireNothingReported(t, r)
}

func TestUndocumentedStatusIsReported(t *testing.T) {
	t.Parallel()
	srv, client, r := serve(t, newChecker(t), refuse(http.StatusConflict, "conflict"))
	resp, body := post(t, client, srv.URL+"/things", `{"name":"box"}`)
	if resp.StatusCode != http.StatusConflict || !strings.Contains(body, "conflict") {
		t.Fatalf("the caller got %d %s", resp.StatusCode, body)
	}
	requireReported(t, r, "POST /things answered 409", "409")
}

func TestMissingRequiredHeaderIsReported(t *testing.T) {
	t.Parallel()
	srv, client, r := serve(t, newChecker(t), func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("X-Request-Id", "req-1")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"id":1,"name":"box"}`)
	})
	post(t, client, srv.URL+"/things", `{"name":"box"}`)
	requireReported(t, r, "Location")
}

func TestUndeclaredHeaderIsReported(t *testing.T) {
	t.Parallel()
	srv, client, r := serve(t, newChecker(t), func(w http.ResponseWriter, req *http.Request) {
		w.Header().Set("X-Secret-Debug", "on")
		created(w, req)
	})
	post(t, client, srv.URL+"/things", `{"name":"box"}`)
	requireReported(t, r, "X-Secret-Debug")
}

func TestBodyMismatchIsReported(t *testing.T) {
	t.Parallel()
	srv, client, r := serve(t, newChecker(t), func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("X-Request-Id", "req-1")
		w.Header().Set("Location", "/things/1")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"id":"one","name":"box"}`)
	})
	post(t, client, srv.URL+"/things", `{"name":"box"}`)
	requireReported(t, r, "POST /things answered 201", `{"id":"one"`, "integer")
}

func TestUndeclaredBodyMemberIsReported(t *testing.T) {
	t.Parallel()
	srv, client, r := serve(t, newChecker(t), func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("X-Request-Id", "req-1")
		w.Header().Set("Location", "/things/1")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"id":1,"name":"box","internal_note":"x"}`)
	})
	post(t, client, srv.URL+"/things", `{"name":"box"}`)
	requireReported(t, r, "internal_note")
}

// A request outside the description, refused with a documented answer, is
// what a test of refusals sends: no mismatch. The same request accepted is
// one.
func TestRequestOutsideTheDescription(t *testing.T) {
	t.Parallel()
	const tooLong = `{"name":"far too long a name"}`
	t.Run("Refused", func(t *testing.T) {
		t.Parallel()
		srv, client, r := serve(t, newChecker(t), refuse(http.StatusUnprocessableEntity, "validation_failed"))
		post(t, client, srv.URL+"/things", tooLong)
		post(t, client, srv.URL+"/things", `{"name":"box"}`, func(req *http.Request) { req.Header.Del("Thing-Key") })
		requireNothingReported(t, r)
	})
	t.Run("Accepted", func(t *testing.T) {
		t.Parallel()
		srv, client, r := serve(t, newChecker(t), created)
		post(t, client, srv.URL+"/things", tooLong)
		requireReported(t, r, "POST /things answered 201", "maxLength")
	})
	t.Run("RefusedUndocumented", func(t *testing.T) {
		t.Parallel()
		srv, client, r := serve(t, newChecker(t), refuse(http.StatusBadRequest, "invalid_json"))
		post(t, client, srv.URL+"/things", `{"name":`)
		requireReported(t, r, "POST /things answered 400")
	})
}

func TestUnroutedRequests(t *testing.T) {
	t.Parallel()
	get := func(url string) *http.Request {
		req, err := http.NewRequest(http.MethodGet, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		return req
	}
	t.Run("UnknownPath404", func(t *testing.T) {
		t.Parallel()
		srv, client, r := serve(t, newChecker(t), refuse(http.StatusNotFound, "not_found"))
		send(t, client, get(srv.URL+"/nowhere?x=1"))
		requireNothingReported(t, r)
	})
	t.Run("UnknownPathWrongCode", func(t *testing.T) {
		t.Parallel()
		srv, client, r := serve(t, newChecker(t), refuse(http.StatusNotFound, "no_such_thing"))
		send(t, client, get(srv.URL+"/nowhere"))
		requireReported(t, r, "GET /nowhere answered 404", "not_found")
	})
	t.Run("UnknownPath200", func(t *testing.T) {
		t.Parallel()
		srv, client, r := serve(t, newChecker(t), created)
		send(t, client, get(srv.URL+"/nowhere"))
		requireReported(t, r, "GET /nowhere answered 201")
	})
	t.Run("WrongMethod405", func(t *testing.T) {
		t.Parallel()
		srv, client, r := serve(t, newChecker(t), func(w http.ResponseWriter, req *http.Request) {
			w.Header().Set("Allow", "POST")
			refuse(http.StatusMethodNotAllowed, "method_not_allowed")(w, req)
		})
		send(t, client, get(srv.URL+"/things"))
		requireNothingReported(t, r)
	})
	t.Run("UnknownPath405", func(t *testing.T) {
		t.Parallel()
		srv, client, r := serve(t, newChecker(t), refuse(http.StatusMethodNotAllowed, "method_not_allowed"))
		send(t, client, get(srv.URL+"/nowhere"))
		requireReported(t, r, "GET /nowhere answered 405")
	})
	t.Run("UnknownMethodUnknownPath405", func(t *testing.T) {
		t.Parallel()
		srv, client, r := serve(t, newChecker(t), refuse(http.StatusMethodNotAllowed, "method_not_allowed"))
		req := get(srv.URL + "/nowhere")
		req.Method = "BREW"
		send(t, client, req)
		requireNothingReported(t, r)
	})
	t.Run("WrongMethod404", func(t *testing.T) {
		t.Parallel()
		srv, client, r := serve(t, newChecker(t), refuse(http.StatusNotFound, "not_found"))
		send(t, client, get(srv.URL+"/things"))
		requireReported(t, r, "GET /things answered 404")
	})
	t.Run("HeadWithoutBody", func(t *testing.T) {
		t.Parallel()
		srv, client, r := serve(t, newChecker(t), func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("X-Request-Id", "req-1")
			w.WriteHeader(http.StatusMethodNotAllowed)
		})
		req := get(srv.URL + "/things")
		req.Method = http.MethodHead
		send(t, client, req)
		requireNothingReported(t, r)
	})
}

func TestUncheckedPassesThrough(t *testing.T) {
	t.Parallel()
	srv, client, r := serve(t, newChecker(t), refuse(http.StatusTeapot, "teapot"))
	req, err := http.NewRequest("BREW", srv.URL+"/pot", nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp, _ := send(t, client, apicheck.Unchecked(req)); resp.StatusCode != http.StatusTeapot {
		t.Fatalf("status %d", resp.StatusCode)
	}
	requireNothingReported(t, r)
}

// A body without GetBody (a stream) still reaches the server as it is
// written, and is checked as sent.
func TestStreamedRequestBody(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, body string
		reported   bool
	}{{"Conforming", `{"name":"box"}`, false}, {"Breaking", `{"name":"box","colour":"red"}`, true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv, client, r := serve(t, newChecker(t), created)
			pr, pw := io.Pipe()
			go func() {
				for _, part := range []string{tc.body[:5], tc.body[5:]} {
					if _, err := io.WriteString(pw, part); err != nil {
						break
					}
				}
				pw.Close()
			}()
			req, err := http.NewRequest(http.MethodPost, srv.URL+"/things", pr)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Thing-Key", "key-1")
			if resp, _ := send(t, client, req); resp.StatusCode != http.StatusCreated {
				t.Fatalf("status %d", resp.StatusCode)
			}
			if tc.reported {
				requireReported(t, r, "colour")
			} else {
				requireNothingReported(t, r)
			}
		})
	}
}

// One Checker serves many clients at once.
func TestConcurrentUse(t *testing.T) {
	t.Parallel()
	c := newChecker(t)
	srv, client, r := serve(t, c, created)
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			name := fmt.Sprintf("box-%d", i)
			if i%4 == 0 {
				name = strings.Repeat("x", 11) // accepted though too long
			}
			body := fmt.Sprintf(`{"name":%q,"labels":{"n":"%d"}}`, name, i)
			req, err := http.NewRequest(http.MethodPost, srv.URL+"/things", strings.NewReader(body))
			if err != nil {
				t.Error(err)
				return
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Thing-Key", "key-1")
			resp, err := client.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		})
	}
	wg.Wait()
	if n := len(r.all()); n != 4 {
		t.Fatalf("%d mismatches reported, want 4 (one per name too long): %v", n, r.all())
	}
}

func TestNewRefuses(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, doc, want string }{
		{"NotJSON", `{"openapi":`, "parse"},
		{"OpenAPI30", `{"openapi":"3.0.3","info":{"title":"x","version":"1"},"paths":{}}`, "3.1"},
		{"BrokenSchema", `{"openapi":"3.1.0","info":{"title":"x","version":"1"},"paths":{"/x":{"get":{"responses":{"200":{}}}}}}`, "description"},
		{"NoUnroutedAnswers", `{"openapi":"3.1.0","info":{"title":"x","version":"1"},"paths":{}}`, "NotFound"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := apicheck.New([]byte(tc.doc))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New: %v, want an error saying %q", err, tc.want)
			}
		})
	}
}
