package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leadintake/leadintake/internal/otlpsink"
	"github.com/leadintake/leadintake/internal/testkit"
)

// gatedSink is an OTLP endpoint that holds every export until it is opened,
// then passes it on to a receiver: while it is shut, the process's spans
// wait in its queue, as they do for a collector that is slow or down.
type gatedSink struct {
	rcv  *otlpsink.Receiver
	srv  *http.Server
	url  string
	open chan struct{}
	once sync.Once
}

func startGatedSink(t *testing.T) *gatedSink {
	t.Helper()
	rcv, err := otlpsink.Start(false)
	if err != nil {
		t.Fatal(err)
	}
	target, err := url.Parse(rcv.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	g := &gatedSink{rcv: rcv, open: make(chan struct{})}
	proxy := httputil.NewSingleHostReverseProxy(target)
	// Exports cut short when the test ends are no failure of the test.
	proxy.ErrorHandler = func(w http.ResponseWriter, _ *http.Request, _ error) { w.WriteHeader(http.StatusBadGateway) }
	ts := newLocalServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-g.open:
		case <-r.Context().Done():
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	g.srv, g.url = ts.srv, ts.url
	t.Cleanup(func() {
		// Close ends the held requests too: they pass nothing on.
		_ = g.srv.Close()
		_ = rcv.Close()
	})
	return g
}

// Open lets the held exports and every later one through.
func (g *gatedSink) Open() { g.once.Do(func() { close(g.open) }) }

// localServer is an http.Server on 127.0.0.1 whose Close does not wait for
// the requests it holds (httptest.Server.Close would).
type localServer struct {
	srv *http.Server
	url string
}

func newLocalServer(t *testing.T, h http.Handler) *localServer {
	t.Helper()
	ts := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = ts.Serve(ln) }()
	return &localServer{srv: ts, url: "http://" + ln.Addr().String()}
}

// vmRSS reads the resident memory of process pid, in bytes.
func vmRSS(t *testing.T, pid int) int64 {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("VmRSS %q: %v", v, err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no VmRSS in /proc/%d/status", pid)
	return 0
}

// hugeRequest is the i-th request of TestTracingBoundsWhatRequestsLeave: a
// sampled traceparent and, by turns, most of a megabyte of method, path,
// User-Agent, Host or X-Forwarded-For (each under the 1 MiB of headers the
// listener takes), the rest ordinary.
func hugeRequest(t *testing.T, apiURL string, i int) *http.Request {
	t.Helper()
	const size = 768 << 10
	filler := strings.Repeat(string(rune('a'+i%26)), size)
	method, path := http.MethodGet, "/v1/operations/some-key-0001"
	switch i % 5 {
	case 0:
		method = "X" + strings.ToUpper(filler)
	case 1:
		path = "/" + filler
	}
	req, err := http.NewRequest(method, apiURL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	switch i % 5 {
	case 2:
		req.Header.Set("User-Agent", filler)
	case 3:
		req.Host = filler
	case 4:
		req.Header.Set("X-Forwarded-For", filler)
	}
	traceID, spanID := newTraceIDs()
	req.Header.Set("traceparent", "00-"+traceID+"-"+spanID+"-01")
	return req
}

// A caller cannot make a traced api hold memory: while the collector does
// not answer (every span waits in the process's queue), hundreds of
// requests with a sampled traceparent and most of a megabyte each of
// method, path, User-Agent, Host or X-Forwarded-For leave the process's
// resident memory within tens of MiB of where it was. Once the collector
// answers, it receives every request's span, none named after what the
// caller sent, none with a name or value over 4 KiB or more than 16 KiB of
// names and values in all.
func TestTracingBoundsWhatRequestsLeave(t *testing.T) {
	t.Parallel()
	sink := startGatedSink(t)
	s := newStack(t, nil)
	api := s.startAPI(
		"OTEL_EXPORTER_OTLP_ENDPOINT="+sink.url,
		"OTEL_BSP_SCHEDULE_DELAY=100",
		// An export waits for the gate, not for the default 10 s.
		"OTEL_EXPORTER_OTLP_TIMEOUT=300000",
		"OTEL_SERVICE_NAME=",
	)
	client := &http.Client{Timeout: time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	t.Cleanup(client.CloseIdleConnections)
	var sent atomic.Int64
	send := func(from, to int) {
		var wg sync.WaitGroup
		next := make(chan int)
		for range 4 {
			wg.Go(func() {
				for i := range next {
					resp, err := client.Do(hugeRequest(t, s.apiURL, i))
					if err != nil {
						t.Errorf("request %d: %v", i, err)
						continue
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode == http.StatusRequestHeaderFieldsTooLarge {
						t.Errorf("request %d: 431: its headers were not taken", i)
					}
					sent.Add(1)
				}
			})
		}
		for i := from; i < to; i++ {
			next <- i
		}
		close(next)
		wg.Wait()
	}

	// Warm up: the process's heap and buffers at their working size.
	send(0, 40)
	before := vmRSS(t, api.Pid())
	// 400 requests of 768 KiB: 300 MiB, were their spans to keep what
	// they were sent. The bound leaves room for the garbage of the requests
	// in flight between two collections (and the race detector's shadow).
	const total, bound = 440, 64 << 20
	for from := 40; from < total; from += 40 {
		send(from, from+40)
		if t.Failed() {
			t.FailNow()
		}
		if grown := vmRSS(t, api.Pid()) - before; grown > bound {
			t.Fatalf("after %d requests the api's resident memory grew by %d MiB (from %d MiB), over %d MiB",
				from+40, grown>>20, before>>20, bound>>20)
		}
	}
	t.Logf("resident memory: %d MiB before, %d MiB after %d requests", before>>20, vmRSS(t, api.Pid())>>20, total-40)

	// The spans were kept, bounded: once the collector answers, each
	// request's span arrives.
	sink.Open()
	var spans []otlpsink.Span
	testkit.EventuallyWithin(t, 2*time.Minute, "every request's span exported", func() bool {
		spans = sink.rcv.Spans()
		return len(spans) >= int(sent.Load())
	})
	for _, sp := range spans {
		name := fmt.Sprintf("span %.80q", sp.Name)
		if len(sp.Name) > 64 {
			t.Errorf("%s: not named by a route template or a method", name)
		}
		sum := 0
		values := []string{sp.Name, sp.Raw.GetStatus().GetMessage()}
		for k, v := range sp.Attributes {
			values = append(values, k, v)
		}
		for _, e := range sp.Raw.GetEvents() {
			values = append(values, e.GetName())
			for _, kv := range e.GetAttributes() {
				values = append(values, kv.GetKey(), otlpsink.Text(kv.GetValue()))
			}
		}
		for _, v := range values {
			if len(v) > 4<<10 {
				t.Errorf("%s holds a name or value of %d bytes: %.80q...", name, len(v), v)
			}
			sum += len(v)
		}
		if sum > 16<<10 {
			t.Errorf("%s holds %d bytes of names and values", name, sum)
		}
	}
}
