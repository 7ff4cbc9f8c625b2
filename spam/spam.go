// Package spam judges the submissions of web pages: a publishable key is
// public, so anyone can post with it, and a key whose client asked for it
// (its clients-file entry has a spam policy) has each new submission
// judged from what its page sent in Form-Signals (an RFC 8941 dictionary:
// hp, the honeypot; t, the seconds since the form was shown; captcha, the
// widget's token) and, with a captcha, from the siteverify service's
// answer. Nothing here looks at the body: the verdict is never part of the
// request's fingerprint, and a retry is never judged again.
package spam

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/dunglas/httpsfv"
	"github.com/google/uuid"

	"github.com/leadintake/leadintake/callers"
)

// The reasons of a verdict, as stored with a quarantined lead and counted
// in leadintake_spam_total.
const (
	// ReasonNoSignals: Form-Signals is missing or malformed (a page with
	// the snippet always sends it).
	ReasonNoSignals = "no_signals"
	// ReasonHoneypot: a field hidden from people was filled in.
	ReasonHoneypot = "honeypot"
	// ReasonTooFast: the form was sent sooner after it was shown than the
	// policy's min_seconds.
	ReasonTooFast = "too_fast"
	// ReasonCaptchaFailed: the captcha token is missing, too long, or
	// the siteverify service said it is not valid.
	ReasonCaptchaFailed = "captcha_failed"
)

// Reasons lists every reason.
var Reasons = []string{ReasonNoSignals, ReasonHoneypot, ReasonTooFast, ReasonCaptchaFailed}

// Header is the request header the signals come in.
const Header = "Form-Signals"

// MaxToken is the longest captcha token, in bytes, that is sent to be
// verified; a longer one fails verification without a call. Turnstile's
// and reCAPTCHA's tokens are under 2 KiB, hCaptcha's run to several KiB.
const MaxToken = 8192

// Signals are what a page sent of how its form was filled.
type Signals struct {
	// Honeypot: a field marked data-leadintake-honeypot held anything.
	Honeypot bool
	// Seconds since the form was shown, when HasSeconds.
	Seconds    int64
	HasSeconds bool
	// Captcha is the widget's token; empty for none.
	Captcha string
}

// ParseSignals reads the Form-Signals header's values; ok is false when
// there is none, or it is not a dictionary whose hp is a boolean, t a
// non-negative integer and captcha a string (each optional but t).
func ParseSignals(values []string) (s Signals, ok bool) {
	if len(values) == 0 {
		return s, false
	}
	d, err := httpsfv.UnmarshalDictionary(values)
	if err != nil {
		return s, false
	}
	item := func(name string) (any, bool, bool) {
		m, found := d.Get(name)
		if !found {
			return nil, false, true
		}
		it, isItem := m.(httpsfv.Item)
		return it.Value, true, isItem
	}
	if v, found, isItem := item("hp"); found {
		b, isBool := v.(bool)
		if !isItem || !isBool {
			return s, false
		}
		s.Honeypot = b
	}
	v, found, isItem := item("t")
	n, isInt := v.(int64)
	if !found || !isItem || !isInt || n < 0 {
		return s, false
	}
	s.Seconds, s.HasSeconds = n, true
	if v, found, isItem := item("captcha"); found {
		str, isString := v.(string)
		if !isItem || !isString {
			return s, false
		}
		s.Captcha = str
	}
	return s, true
}

// ErrCaptchaUnavailable is returned by Judge when the captcha could not be
// verified: the siteverify service timed out, could not be reached, or
// answered other than 200 with a boolean success. The submission is
// refused for now (503 captcha_unavailable), and nothing is stored.
var ErrCaptchaUnavailable = errors.New("the captcha could not be verified")

// Submission names a submission across its retries, for the siteverify
// service's idempotency_key: its client, its Idempotency-Key, and its
// request's fingerprint (keyed: lead.RequestHash.MAC), so that another
// request under the same key is another submission.
type Submission struct {
	ClientID    string
	Key         string
	Fingerprint []byte
}

// Judge is the verdict on a new key's submission through a publishable key
// with policy: the reasons it is spam, none when it is not. values are the
// request's Form-Signals; remoteIP is the visitor's address, sent to the
// siteverify service; sub names the submission. A captcha is verified only
// when nothing else made the submission spam already, and only a token of
// at most MaxToken bytes; the verification is bounded by ctx and by the
// Verifier's time-out. It returns ErrCaptchaUnavailable (wrapped) when the
// captcha cannot be verified.
func (v *Verifier) Judge(ctx context.Context, policy *callers.Spam, values []string, remoteIP string, sub Submission) ([]string, error) {
	sig, ok := ParseSignals(values)
	if !ok {
		return []string{ReasonNoSignals}, nil
	}
	var reasons []string
	if sig.Honeypot {
		reasons = append(reasons, ReasonHoneypot)
	}
	if policy.MinSeconds > 0 && sig.Seconds < int64(policy.MinSeconds) {
		reasons = append(reasons, ReasonTooFast)
	}
	if policy.Captcha == nil || len(reasons) > 0 {
		return reasons, nil
	}
	if sig.Captcha == "" || len(sig.Captcha) > MaxToken {
		return []string{ReasonCaptchaFailed}, nil
	}
	valid, err := v.verify(ctx, policy.Captcha, sig.Captcha, remoteIP, verificationKey(sub, sig.Captcha))
	if err != nil {
		return nil, err
	}
	if !valid {
		return []string{ReasonCaptchaFailed}, nil
	}
	return nil, nil
}

// Verifier verifies captcha tokens with the siteverify services of the
// policies. It is safe for concurrent use.
type Verifier struct {
	http *http.Client
}

// NewVerifier returns a Verifier whose every verification is bounded by
// timeout (and by the caller's context).
func NewVerifier(timeout time.Duration) *Verifier {
	dialer := &net.Dialer{Timeout: min(timeout, 5*time.Second), KeepAlive: 30 * time.Second}
	return &Verifier{http: &http.Client{
		Timeout: timeout,
		Transport: &http.Transport{
			Proxy:               http.ProxyFromEnvironment,
			DialContext:         dialer.DialContext,
			MaxIdleConnsPerHost: 20,
			IdleConnTimeout:     90 * time.Second,
			TLSHandshakeTimeout: min(timeout, 5*time.Second),
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
}

// siteverifyAnswer is the part of a siteverify answer that decides.
type siteverifyAnswer struct {
	Success *bool `json:"success"`
}

// verify asks c's siteverify service about token: a form-encoded POST of
// secret, response, remoteip and idempotency_key, answered {"success":
// bool}. Its errors wrap
// ErrCaptchaUnavailable and never quote the secret or the token.
func (v *Verifier) verify(ctx context.Context, c *callers.Captcha, token, remoteIP, idempotencyKey string) (bool, error) {
	form := url.Values{"secret": {c.Secret}, "response": {token}, "idempotency_key": {idempotencyKey}}
	if remoteIP != "" {
		form.Set("remoteip", remoteIP)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.VerifyURL, strings.NewReader(form.Encode()))
	if err != nil {
		return false, fmt.Errorf("%w: %s", ErrCaptchaUnavailable, "bad verify_url")
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	resp, err := v.http.Do(req)
	if err != nil {
		// The *url.Error quotes the URL, which the operator chose; the
		// form (secret and token) is in the body, never in the message.
		return false, fmt.Errorf("%w: %s", ErrCaptchaUnavailable, transportCause(err))
	}
	defer func() {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
	}()
	if resp.StatusCode != http.StatusOK {
		return false, fmt.Errorf("%w: siteverify answered HTTP %d", ErrCaptchaUnavailable, resp.StatusCode)
	}
	var a siteverifyAnswer
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&a); err != nil || a.Success == nil {
		return false, fmt.Errorf("%w: siteverify's answer has no boolean success", ErrCaptchaUnavailable)
	}
	return *a.Success, nil
}

// transportCause names why a call got no answer, without the URL.
func transportCause(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "siteverify timed out"
	case errors.Is(err, context.Canceled):
		return "the request was cancelled"
	default:
		return "siteverify could not be reached"
	}
}

// verificationNamespace is the UUID namespace of verificationKey.
var verificationNamespace = uuid.MustParse("5d1f0b38-4a7e-4c1e-9f3b-8c2d7e6a9b10")

// verificationKey is the idempotency_key of a token's verification: a UUID
// of the submission (its client, Idempotency-Key and fingerprint) and its
// token. A token is good for one verification; when the first one's answer
// was lost (a time-out: 503 captcha_unavailable) the page's retry sends the
// same request and token, under the same key, and Turnstile answers the
// same key with the same verdict rather than as a token used twice.
// Services without the parameter ignore it.
func verificationKey(sub Submission, token string) string {
	name := sub.ClientID + "\x00" + sub.Key + "\x00" + hex.EncodeToString(sub.Fingerprint) + "\x00" + token
	return uuid.NewSHA1(verificationNamespace, []byte(name)).String()
}
