package webhook_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/leadintake/leadintake/webhook"
)

func TestParseSecret(t *testing.T) {
	t.Parallel()

	key := func(n int) string { return base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{0xa5}, n)) }

	t.Run("Accepts", func(t *testing.T) {
		t.Parallel()
		for _, s := range []string{specSecret, "whsec_" + key(24), "whsec_" + key(32), "whsec_" + key(64)} {
			secret, err := webhook.ParseSecret(s)
			if err != nil || secret.IsZero() {
				t.Errorf("ParseSecret(%q) = %v, %v; want a secret", s, secret, err)
			}
		}
	})

	t.Run("RefusesWithoutQuoting", func(t *testing.T) {
		t.Parallel()
		for name, s := range map[string]string{
			"Empty":         "",
			"NoPrefix":      "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
			"OtherPrefix":   "whsk_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
			"PrefixOnly":    "whsec_",
			"NotBase64":     "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLa$w",
			"URLAlphabet":   "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLa-_",
			"TrailingLF":    specSecret + "\n",
			"InnerCRLF":     "whsec_MfKQ9r8GKYqrTwjU\r\nPD8ILPZIo2LaLaSw",
			"Space":         "whsec_MfKQ9r8GKYqrTwjU PD8ILPZIo2LaLaSw",
			"MissingPad":    "whsec_" + strings.TrimRight(key(25), "="),
			"TooShort":      "whsec_" + key(23),
			"TooLong":       "whsec_" + key(65),
			"UpperPrefix":   "WHSEC_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
			"PaddingInside": "whsec_MfKQ9r8G=KYqrTwjUPD8ILPZIo2LaLaSw",
		} {
			secret, err := webhook.ParseSecret(s)
			if err == nil {
				t.Errorf("%s: ParseSecret accepted it", name)
				continue
			}
			if !errors.Is(err, webhook.ErrInvalidSecret) || !secret.IsZero() {
				t.Errorf("%s: ParseSecret = %v, %v; want the zero Secret and ErrInvalidSecret", name, secret, err)
			}
			if encoded := strings.TrimPrefix(s, "whsec_"); len(encoded) >= 8 && strings.Contains(err.Error(), encoded[:8]) {
				t.Errorf("%s: the error quotes the secret: %v", name, err)
			}
		}
	})

	t.Run("NeverPrinted", func(t *testing.T) {
		t.Parallel()
		secret, err := webhook.ParseSecret(specSecret)
		if err != nil {
			t.Fatal(err)
		}
		config := struct {
			ID     string
			Secret webhook.Secret
		}{"acme", secret}
		var logs bytes.Buffer
		slog.New(slog.NewJSONHandler(&logs, nil)).Info("config", "secret", secret, "config", config)
		marshalled, _ := json.Marshal(config)
		out := fmt.Sprintf("%v %+v %#v %s %q", secret, config, config, secret, secret) + logs.String() + string(marshalled)
		// The key in base64, and its raw bytes, must not show.
		raw, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(specSecret, "whsec_"))
		for _, leak := range []string{"MfKQ9r8G", string(raw[:8]), fmt.Sprint(raw[:4])[1:8]} {
			if strings.Contains(out, leak) {
				t.Errorf("printed: %s", out)
			}
		}
		if !strings.Contains(out, "[redacted]") {
			t.Errorf("printed without the redaction mark: %s", out)
		}
	})
}
