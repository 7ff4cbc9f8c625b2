package spam_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"uuid"

	"github.com/leadintake/leadintake/callers"
	"github.com/leadintake/leadintake/internal/testkit"
	"github.com/leadintake/leadintake/spam"
)

func TestMain(m *testing.M) { testkit.Main(m) }

func TestParseSignals(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		in   []string
		want spam.Signals
		ok   bool
	}{
		{[]string{`hp=?0, t=12`}, spam.Signals{Seconds: 12, HasSeconds: true}, true},
		{[]string{`hp, t=3`}, spam.Signals{Honeypot: true, Seconds: 3, HasSeconds: true}, true},
		{[]string{`hp=?1`, `t=0`}, spam.Signals{Honeypot: true, HasSeconds: true}, true},
		{[]string{`t=40, captcha="XXXX.dd-ff"`}, spam.Signals{Seconds: 40, HasSeconds: true, Captcha: "XXXX.dd-ff"}, true},
		{nil, spam.Signals{}, false},
		{[]string{``}, spam.Signals{}, false},
		{[]string{`hp=?0`}, spam.Signals{}, false},              // no t
		{[]string{`t=-1`}, spam.Signals{}, false},               // negative
		{[]string{`t=1.5`}, spam.Signals{}, false},              // not an integer
		{[]string{`t="5"`}, spam.Signals{}, false},              // a string
		{[]string{`hp=1, t=5`}, spam.Signals{}, false},          // not a boolean
		{[]string{`t=5, captcha=token`}, spam.Signals{}, false}, // a token, not a string
		{[]string{`t=(1 2)`}, spam.Signals{}, false},            // an inner list
		{[]string{`t=5;;`}, spam.Signals{}, false},              // not RFC 8941
		{[]string{`{"t": 5}`}, spam.Signals{}, false},
	} {
		got, ok := spam.ParseSignals(tt.in)
		if ok != tt.ok || ok && got != tt.want {
			t.Errorf("ParseSignals(%q) = %+v, %t; want %+v, %t", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}

// siteverify is a stand-in siteverify service that answers with status and
// body, and records what it was sent.
type siteverify struct {
	*httptest.Server
	calls   atomic.Int64
	lastReq atomic.Value // url.Values
}

func newSiteverify(t *testing.T, h http.HandlerFunc) *siteverify {
	t.Helper()
	s := &siteverify{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.calls.Add(1)
		if err := r.ParseForm(); err == nil && r.Header.Get("Content-Type") == "application/x-www-form-urlencoded" {
			s.lastReq.Store(r.PostForm)
		}
		h(w, r)
	}))
	t.Cleanup(s.Close)
	return s
}

func answer(status int, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		fmt.Fprint(w, body)
	}
}

const secret = "0x4AAAAAAA-siteverify-secret"

// sub1 is the submission of most cases; others differ from it in one part.
var (
	sub1         = spam.Submission{ClientID: "a", Key: "key-1", Fingerprint: []byte("fingerprint-1")}
	subOtherKey  = spam.Submission{ClientID: "a", Key: "key-2", Fingerprint: []byte("fingerprint-1")}
	subOtherBody = spam.Submission{ClientID: "a", Key: "key-1", Fingerprint: []byte("fingerprint-2")}
	subOtherID   = spam.Submission{ClientID: "b", Key: "key-1", Fingerprint: []byte("fingerprint-1")}
)

func TestJudge(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	plain := &callers.Spam{MinSeconds: 3}

	t.Run("SignalsAlone", func(t *testing.T) {
		t.Parallel()
		v := spam.NewVerifier(time.Second)
		for _, tt := range []struct {
			header string
			policy *callers.Spam
			want   []string
		}{
			{"hp=?0, t=5", plain, nil},
			{"hp=?0, t=3", plain, nil},
			{"hp=?0, t=2", plain, []string{spam.ReasonTooFast}},
			{"hp=?1, t=1", plain, []string{spam.ReasonHoneypot, spam.ReasonTooFast}},
			{"hp=?1, t=9", plain, []string{spam.ReasonHoneypot}},
			{"hp=?0, t=0", &callers.Spam{MinSeconds: 0}, nil},
			{"garbage(", plain, []string{spam.ReasonNoSignals}},
			{"", plain, []string{spam.ReasonNoSignals}},
		} {
			var values []string
			if tt.header != "" {
				values = []string{tt.header}
			}
			got, err := v.Judge(ctx, tt.policy, values, "203.0.113.9", sub1)
			if err != nil || !slices.Equal(got, tt.want) {
				t.Errorf("%q: %v %v, want %v", tt.header, got, err, tt.want)
			}
		}
	})

	t.Run("Captcha", func(t *testing.T) {
		t.Parallel()
		sv := newSiteverify(t, func(w http.ResponseWriter, r *http.Request) {
			ok := r.PostFormValue("response") == "good-token" && r.PostFormValue("secret") == secret
			answer(http.StatusOK, fmt.Sprintf(`{"success": %t, "error-codes": []}`, ok))(w, r)
		})
		policy := &callers.Spam{MinSeconds: 2, Captcha: &callers.Captcha{VerifyURL: sv.URL, Secret: secret}}
		v := spam.NewVerifier(time.Second)
		if got, err := v.Judge(ctx, policy, []string{`t=5, captcha="good-token"`}, "203.0.113.9", sub1); err != nil || got != nil {
			t.Fatalf("a good token: %v %v", got, err)
		}
		form, _ := sv.lastReq.Load().(interface{ Get(string) string })
		if form == nil || form.Get("remoteip") != "203.0.113.9" || form.Get("secret") != secret {
			t.Errorf("siteverify was sent %v", sv.lastReq.Load())
		}
		// The verification of a token for a submission has one
		// idempotency_key, a UUID, whatever the retry: another submission
		// or another token has another.
		first := form.Get("idempotency_key")
		if _, err := uuid.Parse(first); err != nil {
			t.Errorf("idempotency_key %q is no UUID", first)
		}
		keyOf := func(submission spam.Submission, token string) string {
			t.Helper()
			if _, err := v.Judge(ctx, policy, []string{`t=9, captcha="` + token + `"`}, "", submission); err != nil {
				t.Fatal(err)
			}
			return sv.lastReq.Load().(interface{ Get(string) string }).Get("idempotency_key")
		}
		if again := keyOf(sub1, "good-token"); again != first {
			t.Errorf("a retry's idempotency_key %q, want the first's %q", again, first)
		}
		for _, other := range []spam.Submission{subOtherKey, subOtherBody, subOtherID} {
			if keyOf(other, "good-token") == first {
				t.Errorf("another submission, %+v, has the same idempotency_key", other)
			}
		}
		if other := keyOf(sub1, "bad-token"); other == first {
			t.Error("another token has the same idempotency_key")
		}
		counted := sv.calls.Load()
		for header, want := range map[string]string{
			`t=5, captcha="bad-token"`: spam.ReasonCaptchaFailed,
			`t=5`:                      spam.ReasonCaptchaFailed,
			`t=5, captcha="` + strings.Repeat("a", spam.MaxToken+1) + `"`: spam.ReasonCaptchaFailed,
		} {
			if got, err := v.Judge(ctx, policy, []string{header}, "", sub1); err != nil || !slices.Equal(got, []string{want}) {
				t.Errorf("%.40q: %v %v, want %s", header, got, err, want)
			}
		}
		// One call, for the bad token; none for the missing and the long
		// one, nor for a submission spam already.
		before := sv.calls.Load()
		if got, _ := v.Judge(ctx, policy, []string{`hp=?1, t=5, captcha="good-token"`}, "", sub1); !slices.Equal(got, []string{spam.ReasonHoneypot}) {
			t.Errorf("a honeypot with a captcha: %v", got)
		}
		if n := sv.calls.Load(); n-counted != 1 || before-counted != 1 {
			t.Errorf("%d calls to siteverify, want 1", n-counted)
		}
	})

	// hCaptcha's tokens run to several KiB: a token of up to 8,192 bytes
	// is verified, a longer one fails without a call.
	t.Run("LongTokens", func(t *testing.T) {
		t.Parallel()
		sv := newSiteverify(t, func(w http.ResponseWriter, r *http.Request) {
			ok := strings.HasPrefix(r.PostFormValue("response"), "P1_") && r.PostFormValue("secret") == secret
			answer(http.StatusOK, fmt.Sprintf(`{"success": %t}`, ok))(w, r)
		})
		policy := &callers.Spam{Captcha: &callers.Captcha{VerifyURL: sv.URL, Secret: secret}}
		v := spam.NewVerifier(time.Second)
		for _, n := range []int{4600, 8192} {
			token := "P1_" + strings.Repeat("e", n-3)
			got, err := v.Judge(ctx, policy, []string{`t=5, captcha="` + token + `"`}, "", sub1)
			if err != nil || got != nil {
				t.Errorf("a good token of %d bytes: %v %v, want no reasons", n, got, err)
			}
			form, _ := sv.lastReq.Load().(interface{ Get(string) string })
			if form == nil || form.Get("response") != token {
				t.Errorf("a token of %d bytes was not sent whole to siteverify", n)
			}
		}
		calls := sv.calls.Load()
		if calls != 2 {
			t.Errorf("%d verifications of two tokens, want 2", calls)
		}
		got, err := v.Judge(ctx, policy, []string{`t=5, captcha="P1_` + strings.Repeat("e", 8190) + `"`}, "", sub1)
		if err != nil || !slices.Equal(got, []string{spam.ReasonCaptchaFailed}) {
			t.Errorf("a token of 8,193 bytes: %v %v, want captcha_failed", got, err)
		}
		if n := sv.calls.Load(); n != calls {
			t.Errorf("a token of 8,193 bytes was sent to siteverify")
		}
	})

	t.Run("CaptchaUnavailable", func(t *testing.T) {
		t.Parallel()
		for name, h := range map[string]http.HandlerFunc{
			"Status500":   answer(http.StatusInternalServerError, `{"success": true}`),
			"NotJSON":     answer(http.StatusOK, `<html>`),
			"NoSuccess":   answer(http.StatusOK, `{"error-codes": ["internal-error"]}`),
			"StringValue": answer(http.StatusOK, `{"success": "true"}`),
			"Redirect": func(w http.ResponseWriter, r *http.Request) {
				http.Redirect(w, r, "https://elsewhere.example/", http.StatusFound)
			},
			"Hangs": func(w http.ResponseWriter, r *http.Request) {
				select {
				case <-r.Context().Done():
				case <-time.After(10 * time.Second):
				}
			},
		} {
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				sv := newSiteverify(t, h)
				policy := &callers.Spam{Captcha: &callers.Captcha{VerifyURL: sv.URL, Secret: secret}}
				got, err := spam.NewVerifier(300*time.Millisecond).Judge(ctx, policy, []string{`t=5, captcha="good-token"`}, "", sub1)
				if !errors.Is(err, spam.ErrCaptchaUnavailable) || got != nil {
					t.Fatalf("%v %v, want ErrCaptchaUnavailable", got, err)
				}
				if strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), "good-token") {
					t.Errorf("the error %q shows the secret or the token", err)
				}
			})
		}
	})
}
