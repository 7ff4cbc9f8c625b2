package intake

import (
	"context"
	"errors"
	"io"
	"mime"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"github.com/leadintake/leadintake/callers"
	"github.com/leadintake/leadintake/lead"
	"github.com/leadintake/leadintake/response"
	"github.com/leadintake/leadintake/spam"
	"github.com/leadintake/leadintake/store"
)

// Submission outcomes, as logged and counted.
const (
	outcomeRefused     = "refused"
	outcomeUnavailable = "unavailable"
	outcomeRateLimited = "rate_limited"
)

// processingBody is the 202 body of a submission in progress.
type processingBody struct {
	Status         string `json:"status"`
	IdempotencyKey string `json:"idempotency_key"`
	LeadID         string `json:"lead_id"`
	StatusURL      string `json:"status_url"`
}

// submitter is what a submission needs, whichever way it authenticates.
type submitter struct {
	hashKey   lead.HashKey
	store     *store.Store
	waiters   *Waiters
	limits    *limiters
	trusted   []netip.Prefix
	decode    *lead.DecodeOpts
	maxBody   int64
	timeout   time.Duration
	callers   *callers.Holder
	spam      *spam.Verifier
	metrics   *Metrics
	retention time.Duration
	// peeks decides whether a bearer token's submission reads its key
	// before it claims.
	peeks peekPolicy
}

// handleLeadCreate is POST /v1/leads: a caller authenticated by its bearer
// token or publishable key submits one enquiry under its Idempotency-Key.
func handleLeadCreate(sub *submitter) echo.HandlerFunc {
	return func(c echo.Context) error {
		req := c.Request()
		clientID := requestOf(c).clientID
		key, err := ParseKey(req.Header.Values("Idempotency-Key"))
		if err != nil {
			return err
		}
		requestOf(c).ref = ExternalRef(clientID, key)
		if err := requireJSON(req); err != nil {
			return err
		}
		body, err := readBody(c, sub.maxBody)
		if err != nil {
			return err
		}
		return sub.submit(c, clientID, key, body)
	}
}

// requireJSON refuses a request whose body is not declared JSON.
func requireJSON(req *http.Request) error {
	if mt, _, err := mime.ParseMediaType(req.Header.Get(echo.HeaderContentType)); err != nil || mt != echo.MIMEApplicationJSON {
		return response.Errorf(response.CodeUnsupportedMediaType, "send Content-Type: application/json")
	}
	return nil
}

// submit claims key for the client's body, and answers as the key stands:
// the rest of POST /v1/leads once the caller, its key and its body are
// known. A retry of a key that exists is answered from one read, without a
// transaction, and its body is not decoded again when its bytes are the
// first request's, while retries are common enough for the read to pay
// (peekPolicy); otherwise the claim answers it. Only a claim claims.
//
// A page's new key is refused in the contract's order, before anything is
// spent on it: validation, its Supersedes (the key it amends, read and
// judged), the page's rate limit, then the spam verdict.
func (sub *submitter) submit(c echo.Context, clientID, key string, body []byte) error {
	req := c.Request()
	st, timeout := sub.store, sub.timeout
	supersedes, err := ParseSupersedes(req.Header.Values("Supersedes"))
	if err != nil {
		return err
	}
	// A request that names its own key in Supersedes: the key's own state
	// answers first (below), as for any request whose key exists.
	ownKey := supersedes == key
	decode := func() (*lead.Payload, error) {
		payload, err := lead.Decode(body, sub.decode)
		if err != nil {
			return nil, err
		}
		if supersedes != "" {
			payload.Supersede(supersedes)
		}
		return payload, nil
	}
	raw := sub.hashKey.Request(lead.RawHash(body, supersedes))

	// The claim runs to its end even if the caller hangs up: a half-done
	// claim helps nobody, and the caller's retry will find the result.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(req.Context()), timeout)
	defer cancel()
	pk := publishableKeyOf(c)
	var peeked *store.Peeked
	policyPeek := pk == "" && sub.peeks.wanted()
	if pk != "" || policyPeek || ownKey {
		if peeked, err = st.Peek(ctx, clientID, key); err != nil && !errors.Is(err, store.ErrNotFound) {
			return storeError(err)
		}
		if policyPeek && peeked != nil {
			sub.peeks.observe(true)
		}
	}
	var payload *lead.Payload
	if ownKey {
		// Validation first; then a key that exists was never sent with
		// Supersedes naming itself: this is another request under it.
		if _, err := decode(); err != nil {
			return err
		}
		if peeked == nil {
			return response.Errorf(response.CodeSupersedesInvalid, "a request cannot supersede its own Idempotency-Key")
		}
		res, _, _ := peeked.Answer(pk != "", func() (bool, error) { return false, nil })
		return sub.answer(c, clientID, key, res)
	}
	if peeked != nil {
		// The same request when its bytes are the first's, else when its
		// decoded fingerprint is.
		res, decided, err := peeked.Answer(pk != "", func() (bool, error) {
			if raw.Matches(peeked.RawHash, peeked.PlainHashes) {
				return true, nil
			}
			var err error
			if payload, err = decode(); err != nil {
				return false, err
			}
			return sub.hashKey.Request(payload.Fingerprint[:]).Matches(peeked.Fingerprint, peeked.PlainHashes), nil
		})
		if err != nil {
			return err
		}
		if decided {
			return sub.answer(c, clientID, key, res)
		}
	}
	if payload == nil {
		if payload, err = decode(); err != nil {
			return err
		}
	}
	p := &store.ClaimParams{
		ClientID: clientID, Key: key, ExternalRef: requestOf(c).ref, Payload: payload,
		Fingerprint: sub.hashKey.Request(payload.Fingerprint[:]), RawHash: raw,
		EmailHMAC: sub.hashKey.Email(payload.Lead.Email), ContentHMAC: sub.hashKey.Content(payload),
		Publishable: pk != "", Retention: sub.retention,
	}
	if pk != "" && peeked == nil {
		// Only a submission that would claim a new key counts, and is
		// judged: a retry, a re-open, never. An amendment that could not
		// amend its key is refused first, spending neither.
		if supersedes != "" {
			refusal, err := st.Supersedable(ctx, clientID, key, supersedes, true)
			if err != nil {
				return storeError(err)
			}
			if refusal != 0 {
				return sub.answer(c, clientID, key, &store.ClaimResult{Outcome: refusal})
			}
		}
		addr := clientAddr(req, sub.trusted)
		if sub.limits != nil {
			if ok, wait := sub.limits.allow(pk, addr); !ok {
				c.Response().Header().Set(echo.HeaderRetryAfter, retryAfter(wait))
				requestOf(c).outcome = outcomeRateLimited
				return response.Errorf(response.CodeRateLimited, "too many new submissions from this page; retry after the time in Retry-After")
			}
		}
		if err := sub.judge(ctx, c, pk, addr, p); err != nil {
			return err
		}
	}
	res, err := st.Claim(ctx, p)
	if err != nil {
		return storeError(err)
	}
	if pk == "" && peeked == nil {
		sub.peeks.observe(res.Outcome != store.OutcomeClaimed)
	}
	return sub.answer(c, clientID, key, res)
}

// judge gives the verdict on a new key's submission through the publishable
// key pk, when its policy asks for one (callers.Spam): spam is quarantined
// or refused as the policy says (p.Quarantine, p.Refuse), and counted. A
// captcha that cannot be verified refuses the request for now: 503
// captcha_unavailable, nothing stored. The verification has at most half
// of the request's time: a single-use token is not spent on a claim left
// too little time to commit.
func (sub *submitter) judge(ctx context.Context, c echo.Context, pk string, addr netip.Addr, p *store.ClaimParams) error {
	policy := sub.callers.Set().SpamPolicy(pk)
	if policy == nil {
		return nil
	}
	remote := ""
	if addr.IsValid() {
		remote = addr.String()
	}
	vctx, cancel := context.WithTimeout(ctx, sub.timeout/2)
	defer cancel()
	reasons, err := sub.spam.Judge(vctx, policy, c.Request().Header.Values(spam.Header), remote,
		spam.Submission{ClientID: p.ClientID, Key: p.Key, Fingerprint: p.Fingerprint.MAC})
	if err != nil {
		return &response.Error{Code: response.CodeCaptchaUnavailable,
			Message: "the captcha could not be verified just now; send the enquiry again", Err: err}
	}
	if len(reasons) == 0 {
		return nil
	}
	sub.metrics.spamVerdict(reasons, policy.Action)
	if policy.Action == callers.SpamRefuse {
		p.Refuse = true
	} else {
		p.Quarantine = reasons
	}
	return nil
}

// answer answers a submission as the claim (or the read) found its key.
func (sub *submitter) answer(c echo.Context, clientID, key string, res *store.ClaimResult) error {
	requestOf(c).outcome = res.Outcome.String()
	if res.LeadID != uuid.Nil {
		requestOf(c).leadID = res.LeadID.String()
	}
	h := c.Response().Header()
	switch res.Outcome {
	case store.OutcomeClaimed, store.OutcomeReopened, store.OutcomeInProgress:
		h.Set("Idempotency-Key", key)
		replayed := res.Outcome == store.OutcomeInProgress
		h.Set("Idempotent-Replayed", strconv.FormatBool(replayed))
		state := res.State
		if d := waitOf(c); d > 0 {
			op, err := holdUntilFinished(c, sub.store, sub.waiters, clientID, key, res.LeadID, d, sub.timeout)
			if err != nil {
				return err
			}
			if op != nil && op.Response != nil {
				// A new key that finished in time is answered with its
				// final response, and is no replay.
				return writeFinal(c, *op.Response)
			}
			if op != nil {
				state = op.State
			}
		}
		statusURL := "/v1/operations/" + key
		h.Set(echo.HeaderLocation, statusURL)
		h.Set(echo.HeaderRetryAfter, "1")
		return writeJSON(c, http.StatusAccepted, processingBody{
			Status: string(state), IdempotencyKey: key, LeadID: res.LeadID.String(), StatusURL: statusURL,
		})
	case store.OutcomeReplayed:
		h.Set("Idempotency-Key", key)
		h.Set("Idempotent-Replayed", "true")
		return writeFinal(c, res.Response)
	case store.OutcomeQuarantined:
		// Finished at its claim: its final response, and no replay.
		h.Set("Idempotency-Key", key)
		h.Set("Idempotent-Replayed", "false")
		return writeFinal(c, res.Response)
	case store.OutcomeSpamRefused:
		return response.Errorf(response.CodeSpamRefused, "the enquiry looks automated; it was not accepted")
	case store.OutcomeSupersedesUnknown:
		return response.Errorf(response.CodeSupersedesUnknown, "the Supersedes key is not a key of this client, or it has expired")
	case store.OutcomeAlreadySuperseded:
		return response.Errorf(response.CodeAlreadySuperseded, "the Supersedes key was already superseded by another key; amend that one")
	default: // OutcomeMismatch
		return response.Errorf(response.CodeKeyReused, "this Idempotency-Key was used with a different request (body or Supersedes); use a new key for a new enquiry")
	}
}

// holdUntilFinished holds a request that asked to wait d for the client's
// key, of lead, to finish, and returns the operation as it stood at the last
// look (nil when no look found it). The time held is not bounded by the
// request time-out; each look at the key is. When the hold ends unfinished
// and its last look failed (the database was away), the key may have
// finished meanwhile and nobody knows: the error is the store's, for a 503
// the caller retries, rather than a stale "processing".
func holdUntilFinished(c echo.Context, st *store.Store, waiters *Waiters, clientID, key string, lead uuid.UUID, d, timeout time.Duration) (*store.Operation, error) {
	var op *store.Operation
	var lastErr error
	look := func() bool {
		ctx, cancel := context.WithTimeout(c.Request().Context(), timeout)
		defer cancel()
		got, err := st.Operation(ctx, clientID, key)
		lastErr = nil
		switch {
		case errors.Is(err, store.ErrNotFound):
			return true // expired meanwhile: nothing to wait for
		case err != nil:
			lastErr = err
			return false
		}
		op = got
		return op.Response != nil
	}
	if done, _ := waiters.Wait(c.Request().Context(), clientID, lead, d, look); !done && lastErr != nil {
		return nil, storeError(lastErr)
	}
	return op, nil
}

// readBody reads at most maxBody bytes of the body, whether or not it was
// sent chunked.
func readBody(c echo.Context, maxBody int64) ([]byte, error) {
	req := c.Request()
	tooLarge := response.Errorf(response.CodeBodyTooLarge, "the body is larger than %d bytes", maxBody)
	if req.ContentLength > maxBody {
		return nil, tooLarge
	}
	body, err := io.ReadAll(http.MaxBytesReader(c.Response(), req.Body, maxBody))
	var maxErr *http.MaxBytesError
	switch {
	case err == nil:
		return body, nil
	case errors.As(err, &maxErr):
		return nil, tooLarge
	case errors.Is(err, os.ErrDeadlineExceeded):
		return nil, &response.Error{Code: response.CodeRequestTimeout, Message: "the body did not arrive in time", Err: err}
	default:
		return nil, &response.Error{Code: response.CodeBadRequest, Message: "the body could not be read", Err: err}
	}
}

// writeFinal answers with a stored final response: as stored, byte for
// byte, or, for a web page, projected (response.ForBrowser) with the
// stored status.
func writeFinal(c echo.Context, f response.Final) error {
	body := f.Body
	if publishableKeyOf(c) != "" {
		body = response.ForBrowser(body)
	}
	return c.Blob(f.Status, echo.MIMEApplicationJSON, body)
}

// pathParam returns the path parameter name, percent-decoded: Echo routes
// on the escaped path when the request's differs from the default encoding
// (as demo%2Dkey does), and then hands parameters over still escaped. ok is
// false for an escape that does not decode.
func pathParam(c echo.Context, name string) (string, bool) {
	v := c.Param(name)
	if c.Request().URL.RawPath == "" {
		return v, true
	}
	decoded, err := url.PathUnescape(v)
	return decoded, err == nil
}
