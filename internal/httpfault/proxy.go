// Package httpfault is an HTTP reverse proxy that misbehaves on command, for
// tests. It stands between an HTTP client and a server (in leadintake, a
// caller and the api) and breaks the exchanges a test picks the ways the
// network between them does:
//
//   - it answers in the server's place (a 429 with Retry-After, a 503, a
//     gateway's 502), the server never seeing the request;
//   - it lets the server act on the request, then drops the connection
//     without an answer: the response is lost after the server committed;
//   - it holds the request without ever answering (before or after the
//     server acted on it), until the client gives up.
//
// Every request is recorded with the fault it met, so that a test can check
// what the client sent on each attempt. Faults apply to the requests that
// match a method and a path prefix, in the order they arrive:
//
//	p, err := httpfault.New(apiURL)
//	...
//	defer p.Close()
//	p.Script("POST", "/v1/leads", httpfault.Fault{Forward: true, Drop: true})
//	// the client talks to p.URL(); its first POST is applied and unanswered
//
// It is the HTTP counterpart of package faultproxy, which breaks TCP
// connections (to the database) instead.
package httpfault

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// forwardTimeout bounds one forwarded exchange with the server.
const forwardTimeout = time.Minute

// Fault is what the proxy does to one request instead of passing it on.
type Fault struct {
	// Forward sends the request to the server first, which acts on it;
	// the rest of the fault then stands in for the server's answer.
	// Without it the server never sees the request.
	Forward bool
	// Status, with Header and Body, is the answer given in the server's
	// place.
	Status int
	Header http.Header
	Body   string
	// Drop closes the client's connection without an answer.
	Drop bool
	// Hang gives no answer: the request is held until the client gives up
	// or the proxy is closed.
	Hang bool
}

// String names the fault, for test logs.
func (f Fault) String() string {
	var s []string
	if f.Forward {
		s = append(s, "forward")
	}
	switch {
	case f.Drop:
		s = append(s, "drop")
	case f.Hang:
		s = append(s, "hang")
	case f.Status != 0:
		s = append(s, fmt.Sprintf("answer %d", f.Status))
	}
	return strings.Join(s, " then ")
}

// Request is one request the proxy received.
type Request struct {
	Method string
	// Path is the request's path, as sent (escaped).
	Path   string
	Header http.Header
	Body   []byte
	// Fault is what met the request; nil when it was passed on as it is.
	Fault *Fault
	// Status is the status of the answer the client was given, 0 for none
	// (dropped, held, or the server could not be reached).
	Status int
	// ResponseHeader is the header of that answer.
	ResponseHeader http.Header
}

// rule is a fault for the requests matching method and prefix.
type rule struct {
	method, prefix string
	faults         []Fault // consumed in order, unless always
	always         bool
}

func (r *rule) matches(req *http.Request) bool {
	return (r.method == "" || r.method == req.Method) && strings.HasPrefix(req.URL.Path, r.prefix)
}

// Proxy passes HTTP requests on to one server, except those its rules
// break. Its methods are safe for concurrent use.
type Proxy struct {
	target *url.URL
	ln     net.Listener
	srv    *http.Server
	tr     *http.Transport
	done   chan struct{}
	wg     sync.WaitGroup
	faults chan Request

	mu     sync.Mutex
	closed bool
	rules  []*rule
	seen   []Request
}

// New returns a proxy listening on 127.0.0.1 on a free port and passing
// every request on to the server at target (a base URL such as
// http://127.0.0.1:8080). Stop it with Close.
func New(target string) (*Proxy, error) {
	u, err := url.Parse(target)
	if err != nil || u.Scheme == "" || u.Host == "" {
		return nil, fmt.Errorf("httpfault: target %q is not a base URL", target)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("httpfault: listen: %w", err)
	}
	p := &Proxy{
		target: u,
		ln:     ln,
		tr:     &http.Transport{},
		done:   make(chan struct{}),
		faults: make(chan Request, 1024),
	}
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	p.wg.Add(1) // before any request can be counted
	go func() {
		defer p.wg.Done()
		_ = p.srv.Serve(ln)
	}()
	return p, nil
}

// URL returns the proxy's base URL.
func (p *Proxy) URL() string { return "http://" + p.ln.Addr().String() }

// Script queues faults for the next requests whose method is method (any
// when empty) and whose path starts with prefix: the first such request
// meets the first fault, and so on; once they are used up, requests pass.
func (p *Proxy) Script(method, prefix string, faults ...Fault) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rules = append(p.rules, &rule{method: method, prefix: prefix, faults: faults})
}

// Break applies f to every request matching method and prefix, until Heal.
func (p *Proxy) Break(method, prefix string, f Fault) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rules = append(p.rules, &rule{method: method, prefix: prefix, faults: []Fault{f}, always: true})
}

// Heal removes every fault, scripted or not: requests pass from now on.
// Requests already held stay held.
func (p *Proxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rules = nil
}

// Requests returns every request received so far, in order of arrival,
// those still being answered included (without their answer).
func (p *Proxy) Requests() []Request {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Request(nil), p.seen...)
}

// Faulted delivers each request that met a fault, once the fault has been
// applied, or, for a held request, once the holding has begun (after the
// server acted on it, with Forward). It holds the last 1024.
func (p *Proxy) Faulted() <-chan Request { return p.faults }

// Close stops the proxy: it stops listening, closes every connection, ends
// every held request, and returns once every request has been finished.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	close(p.done)
	p.mu.Unlock()
	err := p.srv.Close()
	p.wg.Wait()
	p.tr.CloseIdleConnections()
	return err
}

// next returns the fault for req, taking it from its rule.
func (p *Proxy) next(req *http.Request) *Fault {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, r := range p.rules {
		if !r.matches(req) || len(r.faults) == 0 {
			continue
		}
		f := r.faults[0]
		if !r.always {
			r.faults = r.faults[1:]
			if len(r.faults) == 0 {
				p.rules = append(p.rules[:i:i], p.rules[i+1:]...)
			}
		}
		return &f
	}
	return nil
}

// record adds req to the log and returns its index.
func (p *Proxy) record(r Request) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.seen = append(p.seen, r)
	return len(p.seen) - 1
}

func (p *Proxy) answered(i, status int, h http.Header) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.seen[i].Status, p.seen[i].ResponseHeader = status, h
}

// enter counts a request in, unless the proxy is closed: Close waits for
// every request counted.
func (p *Proxy) enter() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.wg.Add(1)
	return true
}

// ServeHTTP passes r on to the server, or breaks it as the first matching
// rule says.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !p.enter() {
		return
	}
	defer p.wg.Done()
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return // the client went away mid-body: nothing to pass on
	}
	f := p.next(r)
	i := p.record(Request{Method: r.Method, Path: r.URL.EscapedPath(), Header: r.Header.Clone(), Body: body, Fault: f})

	if f == nil || f.Forward {
		resp, err := p.forward(r, body, f != nil)
		if f == nil {
			if err != nil {
				http.Error(w, "httpfault: "+err.Error(), http.StatusBadGateway)
				p.answered(i, http.StatusBadGateway, w.Header().Clone())
				return
			}
			copyHeader(w.Header(), resp.header)
			w.WriteHeader(resp.status)
			_, _ = w.Write(resp.body)
			p.answered(i, resp.status, resp.header)
			return
		}
	}

	switch {
	case f.Drop:
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			_ = conn.Close()
		}
		p.notify(i)
	case f.Hang:
		p.notify(i)
		select {
		case <-r.Context().Done():
		case <-p.done:
		}
		// Returning would answer 200 with nothing: close instead.
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			_ = conn.Close()
		}
	default:
		copyHeader(w.Header(), f.Header)
		w.WriteHeader(f.Status)
		_, _ = io.WriteString(w, f.Body)
		p.answered(i, f.Status, f.Header)
		p.notify(i)
	}
}

func (p *Proxy) notify(i int) {
	p.mu.Lock()
	r := p.seen[i]
	p.mu.Unlock()
	select {
	case p.faults <- r:
	default:
	}
}

// reply is the server's answer, read whole.
type reply struct {
	status int
	header http.Header
	body   []byte
}

// forward sends the request on to the server. Unless the client's own
// answer depends on it (detached false), it runs to its end even when the
// client goes away: a fault that follows the server's work must find it
// done.
func (p *Proxy) forward(r *http.Request, body []byte, detached bool) (*reply, error) {
	ctx := r.Context()
	if detached {
		ctx = context.WithoutCancel(ctx)
	}
	ctx, cancel := context.WithTimeout(ctx, forwardTimeout)
	defer cancel()
	u := *p.target
	u.Path = strings.TrimRight(p.target.Path, "/") + r.URL.Path
	u.RawPath = strings.TrimRight(p.target.EscapedPath(), "/") + r.URL.EscapedPath()
	u.RawQuery = r.URL.RawQuery
	out, err := http.NewRequestWithContext(ctx, r.Method, u.String(), bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	copyHeader(out.Header, r.Header)
	for _, h := range []string{"Connection", "Keep-Alive", "Te", "Trailer", "Transfer-Encoding", "Upgrade", "Proxy-Connection"} {
		out.Header.Del(h)
	}
	resp, err := p.tr.RoundTrip(out)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, errors.Join(errors.New("reading the server's answer"), err)
	}
	h := resp.Header.Clone()
	for _, k := range []string{"Connection", "Keep-Alive", "Transfer-Encoding", "Content-Length"} {
		h.Del(k)
	}
	return &reply{status: resp.StatusCode, header: h, body: b}, nil
}

func copyHeader(dst, src http.Header) {
	for k, vs := range src {
		for _, v := range vs {
			dst.Add(k, v)
		}
	}
}
