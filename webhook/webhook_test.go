package webhook_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/leadintake/leadintake/webhook"
)

// The test vector of the Standard Webhooks libraries: the same secret, id,
// timestamp, payload and signature appear in the signing test of each of
// them, in github.com/standard-webhooks/standard-webhooks, libraries/:
// go/webhook_test.go (TestWebhookSign), python/tests/test_webhooks.py,
// javascript/src/webhook.test.ts, csharp/StandardWebhooks.Tests/WebhookTest.cs,
// php/tests/WebhookTest.php, ruby/spec/webhook_spec.rb and
// java/src/test/java/com/standardwebhooks/TestScenario.java (validSigned),
// as the module v0.0.1 ships them.
const (
	specSecret    = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	specMsgID     = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	specUnix      = 1614265330
	specPayload   = `{"test": 2432232314}`
	specSignature = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
)

// The header example of the specification (spec/standard-webhooks.md,
// "Webhook headers"): a v1 and a v1a signature. The specification does not
// give their secret, so it only serves the parser.
const specHeaderExample = "v1,K5oZfzN95Z9UVu1EsfQmfVNQhnkZ2pj9o9NDN/H/pI4= v1a,hnO3f9T8Ytu9HwrXslvumlUpqtNVqkhqw/enGzPCXe5BdqzCInXqYXFymVJaA7AZdpXwVLPo3mNl8EM+m7TBAg=="

var specTime = time.Unix(specUnix, 0)

func mustSecret(t testing.TB, s string) webhook.Secret {
	t.Helper()
	secret, err := webhook.ParseSecret(s)
	if err != nil {
		t.Fatal(err)
	}
	return secret
}

// specHeaders are the vector's headers, signature included.
func specHeaders() http.Header {
	h := http.Header{}
	h.Set("webhook-id", specMsgID)
	h.Set("webhook-timestamp", strconv.Itoa(specUnix))
	h.Set("webhook-signature", specSignature)
	return h
}

func TestSpecVector(t *testing.T) {
	t.Parallel()
	secret := mustSecret(t, specSecret)

	t.Run("Sign", func(t *testing.T) {
		t.Parallel()
		if got := webhook.Sign(secret, specMsgID, specTime, []byte(specPayload)); got != specSignature {
			t.Errorf("Sign = %s, want %s", got, specSignature)
		}
		// Only the whole second is signed.
		if got := webhook.Sign(secret, specMsgID, specTime.Add(999*time.Millisecond), []byte(specPayload)); got != specSignature {
			t.Errorf("Sign 999ms later = %s, want %s", got, specSignature)
		}
		h := http.Header{}
		webhook.SetHeaders(h, secret, specMsgID, specTime, []byte(specPayload))
		for name, want := range map[string]string{"Webhook-Id": specMsgID, "Webhook-Timestamp": "1614265330", "Webhook-Signature": specSignature} {
			if got := h.Values(name); len(got) != 1 || got[0] != want {
				t.Errorf("SetHeaders: %s = %q, want %q", name, got, want)
			}
		}
	})

	t.Run("Verify", func(t *testing.T) {
		t.Parallel()
		id, err := webhook.Verify([]webhook.Secret{secret}, specHeaders(), []byte(specPayload), specTime, 0)
		if err != nil || id != specMsgID {
			t.Fatalf("Verify = %q, %v; want %q", id, err, specMsgID)
		}
	})

	// The libraries' verification cases, with the vector's message: the
	// invalid and partial signatures of go/webhook_test.go, the one-letter
	// change of python/tests/test_webhooks.py, the wrong version and the
	// malformed values of java's TestScenario.
	t.Run("LibraryRefusals", func(t *testing.T) {
		t.Parallel()
		for _, sig := range []string{
			"v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc=",
			"v1,",
			"v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OA=",
			"v2,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=",
			"invalid_signature",
			"v1,invalid_signature",
			"v1,dawfeoifkpqwoekfpqoekf",
		} {
			h := specHeaders()
			h.Set("webhook-signature", sig)
			if _, err := webhook.Verify([]webhook.Secret{secret}, h, []byte(specPayload), specTime, 0); !errors.Is(err, webhook.ErrSignature) {
				t.Errorf("signature %q: %v, want ErrSignature", sig, err)
			}
		}
		// go/webhook_test.go's "valid multi sig is valid": the good one
		// among bad ones and another version.
		h := specHeaders()
		h.Set("webhook-signature", strings.Join([]string{
			"v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc=",
			"v2,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc=",
			specSignature,
			"v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc=",
		}, " "))
		if _, err := webhook.Verify([]webhook.Secret{secret}, h, []byte(specPayload), specTime, 0); err != nil {
			t.Errorf("multi signature: %v", err)
		}
	})

	// What Sign makes, the library verifies: the two speak the same scheme
	// beyond the one vector.
	t.Run("LibraryAgrees", func(t *testing.T) {
		t.Parallel()
		lib, err := standardwebhooks.NewWebhook(specSecret)
		if err != nil {
			t.Fatal(err)
		}
		for _, body := range []string{"", "{}", `{"type":"lead.completed","data":{"lead_id":"x"}}`, "not json. at all\n"} {
			h := http.Header{}
			webhook.SetHeaders(h, secret, "msg_"+strconv.Itoa(len(body)), time.Unix(1700000000, 0), []byte(body))
			if err := lib.VerifyIgnoringTimestamp([]byte(body), h); err != nil {
				t.Errorf("body %q: the library refuses Sign's signature: %v", body, err)
			}
		}
	})
}

func TestVerify(t *testing.T) {
	t.Parallel()

	oldSecret := mustSecret(t, specSecret)
	newSecret := mustSecret(t, "whsec_"+base64.StdEncoding.EncodeToString([]byte("a new secret of 32 bytes, really")))
	now := time.Date(2026, 5, 12, 9, 30, 0, 0, time.UTC)
	body := []byte(`{"type":"lead.completed","timestamp":"2026-05-12T09:30:00Z","data":{"idempotency_key":"k-12345678"}}`)

	// signed returns the headers of body sent at ts, signed with secrets
	// (their signatures listed in this order).
	signed := func(id string, ts time.Time, secrets ...webhook.Secret) http.Header {
		h := http.Header{}
		h.Set("webhook-id", id)
		h.Set("webhook-timestamp", strconv.FormatInt(ts.Unix(), 10))
		var sigs []string
		for _, s := range secrets {
			sigs = append(sigs, webhook.Sign(s, id, ts, body))
		}
		h.Set("webhook-signature", strings.Join(sigs, " "))
		return h
	}
	verify := func(secrets []webhook.Secret, h http.Header, b []byte, at time.Time, tolerance time.Duration) error {
		id, err := webhook.Verify(secrets, h, b, at, tolerance)
		if err == nil && id != h.Get("webhook-id") {
			t.Errorf("Verify returned id %q, want %q", id, h.Get("webhook-id"))
		}
		if err != nil && id != "" {
			t.Errorf("Verify returned id %q with its error %v", id, err)
		}
		return err
	}
	both := []webhook.Secret{newSecret, oldSecret}

	t.Run("Rotation", func(t *testing.T) {
		t.Parallel()
		for name, c := range map[string]struct {
			signers, verifiers []webhook.Secret
			ok                 bool
		}{
			"OldSignatureBothSecrets":  {[]webhook.Secret{oldSecret}, both, true},
			"NewSignatureBothSecrets":  {[]webhook.Secret{newSecret}, both, true},
			"BothSignaturesNewSecret":  {both, []webhook.Secret{newSecret}, true},
			"BothSignaturesOldSecret":  {both, []webhook.Secret{oldSecret}, true},
			"OldSignatureNewSecret":    {[]webhook.Secret{oldSecret}, []webhook.Secret{newSecret}, false},
			"NoSecret":                 {both, nil, false},
			"ZeroSecretsAreSkipped":    {[]webhook.Secret{oldSecret}, []webhook.Secret{{}, oldSecret, {}}, true},
			"OnlyZeroSecretsVerifyNot": {[]webhook.Secret{oldSecret}, []webhook.Secret{{}}, false},
		} {
			err := verify(c.verifiers, signed("msg_rotation", now, c.signers...), body, now, 0)
			if c.ok && err != nil || !c.ok && !errors.Is(err, webhook.ErrSignature) {
				t.Errorf("%s: %v, want ok=%t or ErrSignature", name, err, c.ok)
			}
		}
	})

	t.Run("ZeroSecretIsNotAnEmptyKey", func(t *testing.T) {
		t.Parallel()
		// Anyone can compute the HMAC with an empty key: the zero Secret
		// must not accept it.
		m := hmac.New(sha256.New, nil)
		m.Write([]byte("msg_x." + strconv.FormatInt(now.Unix(), 10) + "." + string(body)))
		h := http.Header{}
		h.Set("webhook-id", "msg_x")
		h.Set("webhook-timestamp", strconv.FormatInt(now.Unix(), 10))
		h.Set("webhook-signature", "v1,"+base64.StdEncoding.EncodeToString(m.Sum(nil)))
		if err := verify([]webhook.Secret{{}}, h, body, now, 0); !errors.Is(err, webhook.ErrSignature) {
			t.Errorf("empty-key HMAC with the zero Secret: %v, want ErrSignature", err)
		}
		defer func() {
			if recover() == nil {
				t.Error("Sign with the zero Secret did not panic")
			}
		}()
		webhook.Sign(webhook.Secret{}, "msg_x", now, body)
	})

	t.Run("ToleranceEdges", func(t *testing.T) {
		t.Parallel()
		h := signed("msg_edges", now, oldSecret)
		secrets := []webhook.Secret{oldSecret}
		for _, c := range []struct {
			name      string
			at        time.Time
			tolerance time.Duration
			ok        bool
		}{
			{"Now", now, 0, true},
			{"FiveMinutesLater", now.Add(5 * time.Minute), 0, true},
			{"JustPastFiveMinutesLater", now.Add(5*time.Minute + time.Nanosecond), 0, false},
			{"FiveMinutesEarlier", now.Add(-5 * time.Minute), 0, true},
			{"JustPastFiveMinutesEarlier", now.Add(-5*time.Minute - time.Nanosecond), 0, false},
			{"NegativeToleranceIsTheDefault", now.Add(5 * time.Minute), -time.Second, true},
			{"ExplicitTolerance", now.Add(30 * time.Second), 30 * time.Second, true},
			{"PastExplicitTolerance", now.Add(31 * time.Second), 30 * time.Second, false},
			{"AnHourLater", now.Add(time.Hour), 0, false},
			{"CenturiesLater", now.AddDate(300, 0, 0), 0, false},
		} {
			err := verify(secrets, h, body, c.at, c.tolerance)
			if c.ok && err != nil || !c.ok && !errors.Is(err, webhook.ErrTimestamp) {
				t.Errorf("%s: %v, want ok=%t or ErrTimestamp", c.name, err, c.ok)
			}
		}
		if webhook.DefaultTolerance != 5*time.Minute {
			t.Errorf("DefaultTolerance = %v, want the contract's 5m", webhook.DefaultTolerance)
		}
	})

	t.Run("Tampered", func(t *testing.T) {
		t.Parallel()
		secrets := []webhook.Secret{oldSecret}
		tampered := map[string]func(h http.Header) []byte{
			"Body": func(http.Header) []byte {
				return []byte(strings.Replace(string(body), "k-12345678", "k-12345679", 1))
			},
			"BodyWhiteSpace": func(http.Header) []byte { return append(append([]byte{}, body...), '\n') },
			"EmptyBody":      func(http.Header) []byte { return nil },
			"ID":             func(h http.Header) []byte { h.Set("webhook-id", "msg_other"); return body },
			// Within the tolerance: only the signature tells.
			"Timestamp": func(h http.Header) []byte {
				h.Set("webhook-timestamp", strconv.FormatInt(now.Unix()+1, 10))
				return body
			},
			// The same bytes signed, split differently between id and
			// timestamp.
			"IDAndTimestampShifted": func(h http.Header) []byte {
				h.Set("webhook-id", "msg_tampered."+strconv.FormatInt(now.Unix(), 10))
				h.Set("webhook-timestamp", strconv.FormatInt(now.Unix(), 10))
				return body
			},
		}
		for name, tamper := range tampered {
			h := signed("msg_tampered", now, oldSecret)
			b := tamper(h)
			if err := verify(secrets, h, b, now, 0); !errors.Is(err, webhook.ErrSignature) {
				t.Errorf("%s: %v, want ErrSignature", name, err)
			}
		}
		if err := verify(secrets, signed("msg_tampered", now, oldSecret), body, now, 0); err != nil {
			t.Errorf("untouched: %v", err)
		}
	})

	t.Run("DistinctErrors", func(t *testing.T) {
		t.Parallel()
		secrets := []webhook.Secret{oldSecret}
		for _, c := range []struct {
			name   string
			change func(h http.Header)
			want   error
		}{
			{"NoID", func(h http.Header) { h.Del("webhook-id") }, webhook.ErrMissingID},
			{"EmptyID", func(h http.Header) { h.Set("webhook-id", "") }, webhook.ErrMissingID},
			{"NoIDNoSignature", func(h http.Header) { h.Del("webhook-id"); h.Del("webhook-signature") }, webhook.ErrMissingID},
			{"NoTimestamp", func(h http.Header) { h.Del("webhook-timestamp") }, webhook.ErrTimestamp},
			{"TimestampWord", func(h http.Header) { h.Set("webhook-timestamp", "hello") }, webhook.ErrTimestamp},
			{"TimestampMilliseconds", func(h http.Header) { h.Set("webhook-timestamp", strconv.FormatInt(now.UnixMilli(), 10)) }, webhook.ErrTimestamp},
			{"TimestampPlus", func(h http.Header) { h.Set("webhook-timestamp", "+"+strconv.FormatInt(now.Unix(), 10)) }, webhook.ErrTimestamp},
			{"TimestampLeadingZero", func(h http.Header) { h.Set("webhook-timestamp", "0"+strconv.FormatInt(now.Unix(), 10)) }, webhook.ErrTimestamp},
			{"TimestampFraction", func(h http.Header) { h.Set("webhook-timestamp", strconv.FormatInt(now.Unix(), 10)+".0") }, webhook.ErrTimestamp},
			{"TimestampRFC3339", func(h http.Header) { h.Set("webhook-timestamp", now.Format(time.RFC3339)) }, webhook.ErrTimestamp},
			{"TimestampNegative", func(h http.Header) { h.Set("webhook-timestamp", "-1") }, webhook.ErrTimestamp},
			{"TimestampOverflow", func(h http.Header) { h.Set("webhook-timestamp", "99999999999999999999") }, webhook.ErrTimestamp},
			{"TimestampMaxInt64", func(h http.Header) { h.Set("webhook-timestamp", "9223372036854775807") }, webhook.ErrTimestamp},
			{"TimestampZero", func(h http.Header) { h.Set("webhook-timestamp", "0") }, webhook.ErrTimestamp},
			{"NoSignature", func(h http.Header) { h.Del("webhook-signature") }, webhook.ErrSignature},
			{"SignatureTooLong", func(h http.Header) {
				h.Set("webhook-signature", h.Get("webhook-signature")+strings.Repeat(" ", webhook.MaxSignatureHeaderLen))
			}, webhook.ErrSignature},
		} {
			h := signed("msg_errors", now, oldSecret)
			c.change(h)
			err := verify(secrets, h, body, now, 0)
			if !errors.Is(err, c.want) {
				t.Errorf("%s: %v, want %v", c.name, err, c.want)
			}
			for _, other := range []error{webhook.ErrMissingID, webhook.ErrTimestamp, webhook.ErrSignature} {
				if other != c.want && errors.Is(err, other) {
					t.Errorf("%s: %v is also %v", c.name, err, other)
				}
			}
			if err != nil && (strings.Contains(err.Error(), "msg_errors") || strings.Contains(err.Error(), "hello") || strings.Contains(err.Error(), "MfKQ")) {
				t.Errorf("%s: the error quotes a header or the secret: %v", c.name, err)
			}
		}
	})

	t.Run("IDAsSent", func(t *testing.T) {
		t.Parallel()
		// An idempotency key may hold dots and colons.
		for _, id := range []string{"k.1.2", "order:42:a", "0190a5f4-8d3c-7b2e-9f1a-2b3c4d5e6f70"} {
			if err := verify([]webhook.Secret{oldSecret}, signed(id, now, oldSecret), body, now, 0); err != nil {
				t.Errorf("id %q: %v", id, err)
			}
		}
	})
}
