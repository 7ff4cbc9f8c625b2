package salesforce

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"regexp"
	"sync"
	"time"

	"github.com/leadintake/leadintake/destination"
)

// tokens is the destination's access token, shared by every lead of the
// process. A token is fetched when there is none, or when the vendor
// refused the one in use (a 401): however many leads ask at once, one
// fetch runs and they all wait for it (single flight), and a lead whose
// 401 arrives after another lead already renewed the token takes the new
// one instead of fetching again. Each token has a generation, which is how
// a refusal names the token it refused.
//
// golang.org/x/sync/singleflight merges concurrent fetches but not a late
// refusal of a token already replaced, which would fetch again; and
// golang.org/x/oauth2's client credentials source keeps a token until it
// expires, which Salesforce's answer does not say, and fetches outside
// destination.Do, out of the delivery log.
type tokens struct {
	fetch func(ctx context.Context) (string, error)

	mu      sync.Mutex
	token   string // "" while none is usable
	gen     uint64 // the generation of token; 0 before the first
	pending *tokenFetch
}

// tokenFetch is one fetch, and its result for every lead waiting on it.
type tokenFetch struct {
	done  chan struct{}
	token string
	gen   uint64
	err   error
	// observed are the fetch's calls, for the delivery log of the lead
	// that started it.
	observed []destination.Observation
}

// get returns the token and its generation. refused is the generation of a
// token the vendor refused (0 for none): when it is the one in use, a new
// one is fetched. The fetch runs on its own, with ctx's values (the lead's
// trace) but not its cancellation, so that a lead that gives up does not
// fail the others waiting on it; the HTTP client's time-out bounds it. The
// lead that started it records it in its delivery log, once it has the
// answer: a lead that gave up records nothing after it left.
func (t *tokens) get(ctx context.Context, refused uint64) (string, uint64, error) {
	t.mu.Lock()
	if t.token != "" && t.gen != refused {
		tok, gen := t.token, t.gen
		t.mu.Unlock()
		return tok, gen, nil
	}
	f := t.pending
	leader := f == nil
	if leader {
		f = &tokenFetch{done: make(chan struct{})}
		t.pending = f
		// Leads that come now wait for the new token rather than spend a
		// call on the refused one.
		t.token = ""
		go t.run(ctx, f)
	}
	t.mu.Unlock()
	select {
	case <-f.done:
		if leader {
			for _, o := range f.observed {
				destination.Observe(ctx, o)
			}
		}
		return f.token, f.gen, f.err
	case <-ctx.Done():
		return "", 0, &destination.Error{Op: "crm token", Class: destination.Transient, Err: ctx.Err()}
	}
}

func (t *tokens) run(ctx context.Context, f *tokenFetch) {
	ctx = destination.WithObserver(context.WithoutCancel(ctx), func(o destination.Observation) { f.observed = append(f.observed, o) })
	tok, err := t.fetch(ctx)
	t.mu.Lock()
	if err == nil {
		t.gen++
		t.token = tok
	}
	f.token, f.gen, f.err = tok, t.gen, err
	t.pending = nil
	t.mu.Unlock()
	close(f.done)
}

// call makes req with the destination's token, and once more with a new
// token when the vendor answers 401 (an expired or revoked session). A 401
// to the second is returned like any answer, for answerError to call it
// refused credentials.
func (c *CRM) call(ctx context.Context, req *destination.Request) (*destination.Response, error) {
	var refused uint64
	for try := 1; ; try++ {
		tok, gen, err := c.tokens.get(ctx, refused)
		if err != nil {
			return nil, err
		}
		r := *req
		r.Header = req.Header.Clone()
		if r.Header == nil {
			r.Header = http.Header{}
		}
		r.Header.Set("Authorization", "Bearer "+tok)
		resp, err := destination.Do(ctx, c.http, &r)
		if err != nil || resp.Status != http.StatusUnauthorized || try == 2 {
			return resp, err
		}
		refused = gen
	}
}

// tokenAnswer is the token endpoint's answer: a token, or an OAuth error.
// The answer's instance_url is not followed: the configured one (or
// base_url) is where the calls go.
type tokenAnswer struct {
	AccessToken string `json:"access_token"`
	Error       string `json:"error"`
}

// oauthCode is the shape of an OAuth error code; anything else is not
// shown.
var oauthCode = regexp.MustCompile(`^[a-z_]{1,64}$`)

// transientOAuth are the token endpoint's errors that say "try again".
var transientOAuth = map[string]bool{"unknown_error": true, "server_error": true, "temporarily_unavailable": true}

// fetchToken asks the token endpoint for an access token (the client
// credentials flow). A refusal is Unauthorized: the External Client App's
// key or secret is wrong or rotated (invalid_client), the flow or its Run
// As user is off (invalid_grant, unsupported_grant_type), or the request
// is refused for another reason of configuration, never the lead's. A
// token call applies nothing, so none of its failures is uncertain.
func (c *CRM) fetchToken(ctx context.Context) (string, error) {
	const op = "crm token"
	form := url.Values{"grant_type": {"client_credentials"}, "client_id": {c.clientID}, "client_secret": {c.clientSecret}}
	req := &destination.Request{Op: op, Step: "crm_token", Method: http.MethodPost, URL: c.base + "/services/oauth2/token",
		Header: http.Header{"Content-Type": {"application/x-www-form-urlencoded"}}, Body: []byte(form.Encode())}
	resp, err := destination.Do(ctx, c.http, req)
	if err != nil {
		if e, ok := destination.AsError(err); ok {
			e.Uncertain = false
		}
		return "", err
	}
	var a tokenAnswer
	_ = json.Unmarshal(resp.Body, &a)
	if resp.Status == http.StatusOK && a.AccessToken != "" {
		return a.AccessToken, nil
	}
	e := destination.StatusError(op, resp.Status, resp.Header, time.Now())
	e.Uncertain = false
	if oauthCode.MatchString(a.Error) {
		e.Code = a.Error
	}
	switch {
	case resp.Status == http.StatusOK:
		e.Class, e.Err = destination.Transient, errors.New("answer has no access_token")
	case transientOAuth[a.Error]:
		e.Class = destination.Transient
	case resp.Status >= 400 && resp.Status < 500 && e.Class != destination.Transient:
		e.Class = destination.Unauthorized
	}
	return "", e
}
