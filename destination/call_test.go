package destination_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leadintake/leadintake/destination"
	"github.com/leadintake/leadintake/internal/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// observer collects the observations reported to its context.
type observer struct {
	mu  sync.Mutex
	obs []destination.Observation
}

func (o *observer) context() context.Context {
	return destination.WithObserver(context.Background(), func(ob destination.Observation) {
		o.mu.Lock()
		defer o.mu.Unlock()
		o.obs = append(o.obs, ob)
	})
}

func (o *observer) all() []destination.Observation {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]destination.Observation(nil), o.obs...)
}

// Do reports each call it makes for the delivery log: its step, when it
// started, how long it took, and its status, or timeout, or
// connection_error.
func TestDoObservesEachCall(t *testing.T) {
	t.Parallel()

	t.Run("Answer", func(t *testing.T) {
		t.Parallel()
		ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			time.Sleep(20 * time.Millisecond)
			w.WriteHeader(http.StatusCreated)
		}))
		t.Cleanup(ts.Close)
		var o observer
		before := time.Now()
		resp, err := destination.Do(o.context(), destination.NewHTTPClient("test", 0),
			&destination.Request{Op: "crm create", Step: "crm", Method: http.MethodPost, URL: ts.URL})
		if err != nil || resp.Status != http.StatusCreated {
			t.Fatalf("Do = %+v, %v", resp, err)
		}
		obs := o.all()
		if len(obs) != 1 {
			t.Fatalf("observations %+v, want 1", obs)
		}
		if ob := obs[0]; ob.Step != "crm" || ob.Outcome != "201" || ob.StartedAt.Before(before) || ob.Duration < 20*time.Millisecond {
			t.Errorf("observation %+v, want step crm, outcome 201, started at the call, at least 20ms", ob)
		}
	})

	t.Run("ErrorStatus", func(t *testing.T) {
		t.Parallel()
		ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusServiceUnavailable)
		}))
		t.Cleanup(ts.Close)
		var o observer
		resp, err := destination.Do(o.context(), destination.NewHTTPClient("test", 0),
			&destination.Request{Op: "crm lookup", Step: "crm_lookup", Method: http.MethodGet, URL: ts.URL})
		if err != nil || resp.Status != http.StatusServiceUnavailable {
			t.Fatalf("Do = %+v, %v; want the 503 as an answer", resp, err)
		}
		if obs := o.all(); len(obs) != 1 || obs[0].Step != "crm_lookup" || obs[0].Outcome != "503" {
			t.Errorf("observations %+v, want crm_lookup 503", obs)
		}
	})

	t.Run("ConnectionError", func(t *testing.T) {
		t.Parallel()
		ts := httptest.NewServer(http.NotFoundHandler())
		ts.Close()
		var o observer
		_, err := destination.Do(o.context(), destination.NewHTTPClient("test", 0),
			&destination.Request{Op: "notify", Step: "notification", Method: http.MethodPost, URL: ts.URL})
		if err == nil {
			t.Fatal("a call to a closed server succeeded")
		}
		if obs := o.all(); len(obs) != 1 || obs[0].Step != "notification" || obs[0].Outcome != destination.OutcomeConnectionError {
			t.Errorf("observations %+v, want notification connection_error", obs)
		}
	})

	t.Run("Timeout", func(t *testing.T) {
		t.Parallel()
		ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			<-r.Context().Done()
		}))
		t.Cleanup(ts.Close)
		var o observer
		_, err := destination.Do(o.context(), destination.NewHTTPClient("test", 100*time.Millisecond),
			&destination.Request{Op: "enrichment", Step: "enrichment", Method: http.MethodPost, URL: ts.URL})
		if e, ok := destination.AsError(err); !ok || e.Class != destination.Transient || !e.Uncertain {
			t.Fatalf("error %v, want transient and uncertain", err)
		}
		if obs := o.all(); len(obs) != 1 || obs[0].Outcome != destination.OutcomeTimeout {
			t.Errorf("observations %+v, want one timeout", obs)
		}
	})

	// A call without a step is not for the delivery log; a context without
	// an observer takes none.
	t.Run("NoStepNoObserver", func(t *testing.T) {
		t.Parallel()
		ts := httptest.NewServer(http.NotFoundHandler())
		t.Cleanup(ts.Close)
		var o observer
		c := destination.NewHTTPClient("test", 0)
		if _, err := destination.Do(o.context(), c, &destination.Request{Op: "check", Method: http.MethodGet, URL: ts.URL}); err != nil {
			t.Fatal(err)
		}
		if obs := o.all(); len(obs) != 0 {
			t.Errorf("observations %+v, want none for a call without a step", obs)
		}
		if _, err := destination.Do(context.Background(), c, &destination.Request{Op: "check", Step: "crm", Method: http.MethodGet, URL: ts.URL}); err != nil {
			t.Fatal(err)
		}
	})
}

// net/http quotes the whole URL in its errors; a webhook's path, a query
// or user-info may be a secret. Do's errors show the origin alone.
func TestDoRedactsURLs(t *testing.T) {
	t.Parallel()

	t.Run("TransportError", func(t *testing.T) {
		t.Parallel()
		ts := httptest.NewServer(http.NotFoundHandler())
		ts.Close()
		raw := strings.Replace(ts.URL, "http://", "http://user:PASSWORD@", 1) + "/services/T0/B0/PATHSECRET?token=QUERYSECRET"
		_, err := destination.Do(context.Background(), destination.NewHTTPClient("test", 0),
			&destination.Request{Op: "notify", Method: http.MethodPost, URL: raw, Body: []byte(`{}`)})
		e, ok := destination.AsError(err)
		if !ok || e.Class != destination.Transient || e.Uncertain {
			t.Fatalf("error %v, want transient and certain (nothing was sent)", err)
		}
		msg := err.Error()
		for _, secret := range []string{"PASSWORD", "PATHSECRET", "QUERYSECRET", "services", "user"} {
			if strings.Contains(msg, secret) {
				t.Errorf("error %q shows %q", msg, secret)
			}
		}
		if !strings.Contains(msg, destination.Origin(ts.URL)) {
			t.Errorf("error %q does not name the origin %s", msg, destination.Origin(ts.URL))
		}
	})

	t.Run("BadURL", func(t *testing.T) {
		t.Parallel()
		_, err := destination.Do(context.Background(), destination.NewHTTPClient("test", 0),
			&destination.Request{Op: "notify", Method: http.MethodPost, URL: "http://127.0.0.1/PATHSECRET\x7f"})
		e, ok := destination.AsError(err)
		if !ok || e.Class != destination.Rejected {
			t.Fatalf("error %v, want rejected", err)
		}
		if strings.Contains(err.Error(), "PATHSECRET") {
			t.Errorf("error %q shows the URL", err)
		}
	})
}

// An answer whose status came but whose body broke off may have been
// applied.
func TestDoAnswerCutShort(t *testing.T) {
	t.Parallel()

	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "1000")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"id":"crm_`)
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler)
	}))
	t.Cleanup(ts.Close)
	_, err := destination.Do(context.Background(), destination.NewHTTPClient("test", 0),
		&destination.Request{Op: "crm create", Method: http.MethodPost, URL: ts.URL})
	e, ok := destination.AsError(err)
	if !ok || e.Class != destination.Transient || !e.Uncertain || e.Status != http.StatusCreated {
		t.Errorf("error %v, want transient, uncertain, with the status", err)
	}
}

// Do sends the request as made: its method, headers and body, an Accept
// unless the kind set one.
func TestDoSendsTheRequest(t *testing.T) {
	t.Parallel()

	type seen struct {
		method, accept, contentType, custom, body string
	}
	got := make(chan seen, 2)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- seen{r.Method, r.Header.Get("Accept"), r.Header.Get("Content-Type"), r.Header.Get("X-Custom"), string(b)}
		_, _ = io.WriteString(w, `{"id":"x"}`)
	}))
	t.Cleanup(ts.Close)
	c := destination.NewHTTPClient("test", 0)

	req := &destination.Request{Op: "crm upsert", Method: http.MethodPut, URL: ts.URL, Header: http.Header{"X-Custom": {"v"}}}
	if err := req.JSON(map[string]string{"a": "b"}); err != nil {
		t.Fatal(err)
	}
	resp, err := destination.Do(context.Background(), c, req)
	if err != nil {
		t.Fatal(err)
	}
	var answer struct{ ID string }
	if err := resp.Decode("crm upsert", &answer); err != nil || answer.ID != "x" || !resp.OK() || !resp.OK(200, 201) || resp.OK(201) {
		t.Errorf("answer %+v: id %q, %v", resp, answer.ID, err)
	}
	if s := <-got; s != (seen{http.MethodPut, "application/json", "application/json", "v", `{"a":"b"}`}) {
		t.Errorf("request %+v", s)
	}

	if _, err := destination.Do(context.Background(), c, &destination.Request{Op: "token", Method: http.MethodGet, URL: ts.URL,
		Header: http.Header{"Accept": {"text/plain"}}}); err != nil {
		t.Fatal(err)
	}
	if s := <-got; s.accept != "text/plain" || s.body != "" {
		t.Errorf("request %+v, want the kind's Accept and no body", s)
	}
}
