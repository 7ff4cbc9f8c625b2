package httpfault_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leadintake/leadintake/internal/httpfault"
	"github.com/leadintake/leadintake/internal/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// setup starts a server that counts requests and echoes the path and body,
// and a proxy in front of it.
func setup(t *testing.T) (*httpfault.Proxy, *atomic.Int64, *http.Client) {
	t.Helper()
	var served atomic.Int64
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("X-Seen-Key", r.Header.Get("Idempotency-Key"))
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, r.URL.EscapedPath()+" "+string(b))
	}))
	t.Cleanup(ts.Close)
	p, err := httpfault.New(ts.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	// A new connection for each request: on a reused one, the transport
	// would re-send a dropped request carrying an Idempotency-Key by
	// itself, and the tests would see the retry rather than the drop.
	tr := &http.Transport{DisableKeepAlives: true}
	t.Cleanup(tr.CloseIdleConnections)
	return p, &served, &http.Client{Transport: tr, Timeout: testkit.Patience}
}

func post(ctx context.Context, c *http.Client, url, body string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Idempotency-Key", "key-0001")
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

func TestPassAndScript(t *testing.T) {
	t.Parallel()
	p, served, c := setup(t)
	p.Script(http.MethodPost, "/v1/leads",
		httpfault.Fault{Status: http.StatusTooManyRequests, Header: http.Header{"Retry-After": {"1"}}, Body: "slow down"},
		httpfault.Fault{Forward: true, Drop: true})

	if st, body, err := post(t.Context(), c, p.URL()+"/v1/leads", "one"); err != nil || st != 429 || body != "slow down" || served.Load() != 0 {
		t.Fatalf("scripted answer: %d %q %v, served %d", st, body, err, served.Load())
	}
	if _, _, err := post(t.Context(), c, p.URL()+"/v1/leads", "two"); err == nil || served.Load() != 1 {
		t.Fatalf("forward then drop: %v, served %d", err, served.Load())
	}
	if st, body, err := post(t.Context(), c, p.URL()+"/v1/leads/a%2Fb?x=1", "three"); err != nil || st != 201 || body != "/v1/leads/a%2Fb three" {
		t.Fatalf("passed: %d %q %v", st, body, err)
	}
	reqs := p.Requests()
	if len(reqs) != 3 || reqs[0].Fault == nil || reqs[0].Status != 429 || string(reqs[1].Body) != "two" ||
		reqs[1].Status != 0 || reqs[2].Fault != nil || reqs[2].Status != 201 || reqs[2].Header.Get("Idempotency-Key") != "key-0001" ||
		reqs[2].ResponseHeader.Get("X-Seen-Key") != "key-0001" {
		t.Fatalf("requests %+v", reqs)
	}
	for range 2 {
		select {
		case <-p.Faulted():
		case <-time.After(testkit.Patience):
			t.Fatal("a fault was not reported")
		}
	}
}

func TestHangBreakHeal(t *testing.T) {
	t.Parallel()
	p, served, c := setup(t)
	p.Break(http.MethodPost, "/", httpfault.Fault{Hang: true})
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	if _, _, err := post(ctx, c, p.URL()+"/x", "held"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("held request: %v", err)
	}
	ctx2, cancel2 := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel2()
	if _, _, err := post(ctx2, c, p.URL()+"/x", "held again"); err == nil || served.Load() != 0 {
		t.Fatalf("second held request: %v, served %d", err, served.Load())
	}
	p.Heal()
	if st, _, err := post(t.Context(), c, p.URL()+"/x", "passed"); err != nil || st != 201 {
		t.Fatalf("after Heal: %d %v", st, err)
	}
}

// Close ends requests that are still held.
func TestCloseEndsHeldRequests(t *testing.T) {
	t.Parallel()
	p, _, c := setup(t)
	p.Script("", "/", httpfault.Fault{Forward: true, Hang: true})
	errc := make(chan error, 1)
	go func() {
		_, _, err := post(context.Background(), c, p.URL()+"/x", "held")
		errc <- err
	}()
	select {
	case r := <-p.Faulted():
		if string(r.Body) != "held" {
			t.Fatalf("held %+v", r)
		}
	case <-time.After(testkit.Patience):
		t.Fatal("the request was not held")
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err == nil {
		t.Fatal("a held request was answered")
	}
}
