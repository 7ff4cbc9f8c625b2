package apicheck

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"sync"
)

// Transport returns an http.RoundTripper that sends each request through
// next (http.DefaultTransport when nil) and checks the exchange against the
// description, calling report with a *MismatchError for each mismatch, on
// the goroutine that called RoundTrip. The caller sees the response as next
// returned it: its body, read whole to be checked, is given back unchanged.
// An exchange without a response (a transport error), or whose response
// body could not be read whole, is not checked. Requests marked with
// Unchecked are passed through.
func (c *Checker) Transport(next http.RoundTripper, report func(error)) http.RoundTripper {
	if next == nil {
		next = http.DefaultTransport
	}
	return &transport{c: c, next: next, report: report}
}

type transport struct {
	c      *Checker
	next   http.RoundTripper
	report func(error)
}

func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if unchecked, _ := req.Context().Value(uncheckedKey{}).(bool); unchecked {
		return t.next.RoundTrip(req)
	}
	sent, body := t.recordBody(req)
	resp, err := t.next.RoundTrip(sent)
	if err != nil {
		return resp, err
	}
	respBody, readErr := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if readErr != nil {
		// The caller meets the failure where it would have.
		resp.Body = io.NopCloser(io.MultiReader(bytes.NewReader(respBody), errReader{readErr}))
		return resp, nil
	}
	resp.Body = io.NopCloser(bytes.NewReader(respBody))
	if mismatch := t.c.Check(req, body(), resp, respBody); mismatch != nil {
		t.report(mismatch)
	}
	return resp, nil
}

// recordBody returns the request to send and a function that returns its
// body as sent. A body that can be had again (GetBody, as http.NewRequest
// sets for in-memory bodies) is read from a copy; any other is recorded as
// it is sent, so that a body streamed slowly on purpose still streams.
func (t *transport) recordBody(req *http.Request) (*http.Request, func() []byte) {
	if req.Body == nil || req.Body == http.NoBody {
		return req, func() []byte { return nil }
	}
	if req.GetBody != nil {
		if rc, err := req.GetBody(); err == nil {
			b, _ := io.ReadAll(rc)
			_ = rc.Close()
			return req, func() []byte { return b }
		}
	}
	rec := &recorder{r: req.Body}
	sent := req.Clone(req.Context())
	sent.Body = rec
	return sent, rec.bytes
}

// recorder keeps what is read through it. The transport may still be
// writing the body when the response arrives (an early refusal), hence the
// lock.
type recorder struct {
	r   io.ReadCloser
	mu  sync.Mutex
	buf bytes.Buffer
}

func (r *recorder) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	r.mu.Lock()
	r.buf.Write(p[:n])
	r.mu.Unlock()
	return n, err
}

func (r *recorder) Close() error { return r.r.Close() }

func (r *recorder) bytes() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return bytes.Clone(r.buf.Bytes())
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

type uncheckedKey struct{}

// Unchecked returns req marked to pass through a checking Transport
// unchecked: for a request that the description cannot describe on purpose.
// Say why where it is used.
func Unchecked(req *http.Request) *http.Request {
	return req.WithContext(context.WithValue(req.Context(), uncheckedKey{}, true))
}
