package callers_test

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leadintake/leadintake/callers"
	"github.com/leadintake/leadintake/internal/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }

func hashOf(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// Secrets of the example file; no error may show them.
const (
	callbackSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	webhookSecret  = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD"
	publishableKey = "pk_acme_9f2cA81b77e04d11"
	captchaSecret  = "0x4AAAAAAAcaptcha-secret-do-not-show"
	otherKey       = "pk_acme_other_1234567890"
	plainKey       = "pk_acme_plain_1234567890"
)

var goodFile = `
clients:
  - id: acme
    tokens_sha256: [` + hashOf("acme-token-one") + `, ` + hashOf("acme-token-two") + `]
    publishable_keys:
      - key: ` + publishableKey + `
        origins: [https://www.acme.example, "https://Acme.example:8443"]
        spam:
          min_seconds: 5
          captcha: {verify_url: "https://challenges.example/siteverify", secret: ` + captchaSecret + `}
          action: refuse
      - key: ` + otherKey + `
        origins: [https://www.acme.example]
        spam: {}
      - key: ` + plainKey + `
        origins: [https://www.acme.example]
    callback:
      url: https://hooks.acme.example/leadintake
      secret: ` + callbackSecret + `
    webhook_secret: ` + webhookSecret + `
  - id: beta_2
    tokens_sha256: [` + hashOf("beta-token") + `]
`

func TestParseFile(t *testing.T) {
	t.Parallel()
	set, err := callers.ParseFile([]byte(goodFile))
	if err != nil {
		t.Fatal(err)
	}
	for token, want := range map[string]string{"acme-token-one": "acme", "acme-token-two": "acme", "beta-token": "beta_2"} {
		if id, ok := set.Authenticate(token); !ok || id != want {
			t.Errorf("token %q: %q, %t; want %q", token, id, ok, want)
		}
	}
	if _, ok := set.Authenticate(publishableKey); ok {
		t.Error("a publishable key authenticates as a bearer token")
	}
	id, allowed, ok := set.Publishable(publishableKey, "https://acme.example:8443")
	if !ok || id != "acme" || !allowed {
		t.Errorf("publishable key from an allowed origin: %q %t %t", id, allowed, ok)
	}
	if _, allowed, _ := set.Publishable(publishableKey, "https://evil.example"); allowed {
		t.Error("another origin is allowed")
	}
	if !set.OriginAllowed("https://www.acme.example") || set.OriginAllowed("https://beta.example") {
		t.Error("OriginAllowed")
	}
	if sp := set.SpamPolicy(publishableKey); sp == nil || sp.MinSeconds != 5 || sp.Action != callers.SpamRefuse ||
		sp.Captcha == nil || sp.Captcha.Secret != captchaSecret || sp.Captcha.VerifyURL != "https://challenges.example/siteverify" {
		t.Errorf("spam policy %+v", sp)
	}
	if sp := set.SpamPolicy(otherKey); sp == nil || sp.MinSeconds != callers.DefaultMinSeconds || sp.Action != callers.SpamQuarantine || sp.Captcha != nil {
		t.Errorf("spam: {} is %+v, want the defaults", sp)
	}
	if sp := set.SpamPolicy(plainKey); sp != nil {
		t.Errorf("a key without spam is judged: %+v", sp)
	}
	acme, _ := set.Client("acme")
	if acme.Callback == nil || acme.Callback.URL != "https://hooks.acme.example/leadintake" || acme.Callback.Secret.IsZero() || acme.WebhookSecret.IsZero() {
		t.Errorf("acme: %+v", acme)
	}
}

func TestParseFileRefusals(t *testing.T) {
	t.Parallel()
	h := hashOf("x")
	for _, tt := range []struct {
		name, file string
		want       string // in the error
	}{
		{"NotYAML", "clients: [", "yaml"},
		{"NoList", "clients: 3", "list of clients"},
		{"UnknownTop", "clients: []\nsecrets: " + callbackSecret, "the file: unknown member at line 2, column 1"},
		{"BadID", "clients:\n  - id: Acme!\n", "client 1"},
		{"MissingID", "clients:\n  - tokens_sha256: [" + h + "]\n", "client 1"},
		{"DuplicateID", "clients:\n  - id: a\n  - id: a\n", `"a" is listed twice`},
		{"ShortHash", "clients:\n  - id: a\n    tokens_sha256: [abc]\n", `client "a": tokens_sha256 entry 1`},
		{"HashIsAToken", "clients:\n  - id: a\n    tokens_sha256: " + callbackSecret + "\n", `client "a": tokens_sha256`},
		{"SameHashTwice", "clients:\n  - id: a\n    tokens_sha256: [" + h + "]\n  - id: b\n    tokens_sha256: [" + h + "]\n", "token hash is listed twice"},
		{"BadPublishableKey", "clients:\n  - id: a\n    publishable_keys: [{key: pk_short, origins: [https://a.example]}]\n", "publishable key 1"},
		{"NoOrigins", "clients:\n  - id: a\n    publishable_keys: [{key: " + publishableKey + "}]\n", "origins"},
		{"OriginWithPath", "clients:\n  - id: a\n    publishable_keys: [{key: " + publishableKey + ", origins: [https://a.example/x]}]\n", "origin 1"},
		{"PublishableKeyTwice", "clients:\n  - id: a\n    publishable_keys: [{key: " + publishableKey + ", origins: [https://a.example]}]\n  - id: b\n    publishable_keys: [{key: " + publishableKey + ", origins: [https://b.example]}]\n", "publishable key is listed twice"},
		{"CallbackURL", "clients:\n  - id: a\n    callback: {url: ftp://x, secret: " + callbackSecret + "}\n", "callback: url"},
		{"CallbackSecret", "clients:\n  - id: a\n    callback: {url: https://x.example, secret: " + strings.TrimPrefix(callbackSecret, "whsec_") + "}\n", "callback: secret"},
		{"WebhookSecret", "clients:\n  - id: a\n    webhook_secret: whsec_" + strings.Repeat("%", 30) + "\n", "webhook_secret"},
		{"UnknownMember", "clients:\n  - id: a\n    token: " + callbackSecret + "\n", `client "a": unknown member at line 3, column 5`},
		{"SpamNotAMapping", "clients:\n  - id: a\n    publishable_keys: [{key: " + publishableKey + ", origins: [https://a.example], spam: yes}]\n", "spam: want a mapping"},
		{"SpamUnknownMember", "clients:\n  - id: a\n    publishable_keys: [{key: " + publishableKey + ", origins: [https://a.example], spam: {threshold: 3}}]\n", "spam: unknown member at line 3"},
		{"SpamMinSecondsNegative", "clients:\n  - id: a\n    publishable_keys: [{key: " + publishableKey + ", origins: [https://a.example], spam: {min_seconds: -1}}]\n", "min_seconds"},
		{"SpamMinSecondsQuoted", "clients:\n  - id: a\n    publishable_keys: [{key: " + publishableKey + ", origins: [https://a.example], spam: {min_seconds: \"3\"}}]\n", "min_seconds"},
		{"SpamMinSecondsFraction", "clients:\n  - id: a\n    publishable_keys: [{key: " + publishableKey + ", origins: [https://a.example], spam: {min_seconds: 2.5}}]\n", "min_seconds"},
		{"SpamAction", "clients:\n  - id: a\n    publishable_keys: [{key: " + publishableKey + ", origins: [https://a.example], spam: {action: delete}}]\n", "action must be quarantine or refuse"},
		{"CaptchaURL", "clients:\n  - id: a\n    publishable_keys: [{key: " + publishableKey + ", origins: [https://a.example], spam: {captcha: {verify_url: " + captchaSecret + ", secret: " + captchaSecret + "}}}]\n", "captcha: verify_url"},
		{"CaptchaNoSecret", "clients:\n  - id: a\n    publishable_keys: [{key: " + publishableKey + ", origins: [https://a.example], spam: {captcha: {verify_url: https://c.example/v}}}]\n", "captcha: secret is required"},
		{"CaptchaUnknownMember", "clients:\n  - id: a\n    publishable_keys: [{key: " + publishableKey + ", origins: [https://a.example], spam: {captcha: {verify_url: https://c.example/v, secret: " + captchaSecret + ", site_key: x}}}]\n", "captcha: unknown member"},
		{"UnknownPublishableMember", "clients:\n  - id: a\n    publishable_keys: [{key: " + publishableKey + ", origins: [https://a.example], expires: 1}]\n", `client "a": publishable key 1: unknown member at line 3`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := callers.ParseFile([]byte(tt.file))
			if err == nil {
				t.Fatal("accepted")
			}
			msg := err.Error()
			if !strings.Contains(msg, tt.want) {
				t.Errorf("error %q does not say %q", msg, tt.want)
			}
			for _, secret := range []string{callbackSecret, strings.TrimPrefix(callbackSecret, "whsec_"), publishableKey, h, "%%%%", captchaSecret} {
				if strings.Contains(msg, secret) {
					t.Errorf("error %q shows a value of the file", msg)
				}
			}
			if strings.Contains(msg, "\n") {
				t.Errorf("error %q is not one line", msg)
			}
		})
	}
}

// A member name that is in fact a value pasted where a name belongs (a
// secret, a token) is named by its line and column: no part of it is shown.
func TestParseFileUnknownMemberShowsNoText(t *testing.T) {
	t.Parallel()
	for name, file := range map[string]string{
		"ClientMember":   "clients:\n  - id: a\n    " + callbackSecret + ": x\n",
		"TopMember":      callbackSecret + ": x\nclients: []\n",
		"CallbackMember": "clients:\n  - id: a\n    callback: {url: https://x.example, secret: " + webhookSecret + ", " + callbackSecret + ": 1}\n",
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := callers.ParseFile([]byte(file))
			if err == nil || !strings.Contains(err.Error(), "unknown member at line ") {
				t.Fatalf("error %v, want an unknown member named by its line", err)
			}
			// Not even its start: "whsec_MfKQ".
			if strings.Contains(err.Error(), callbackSecret[:10]) {
				t.Fatalf("error %q shows the member's text", err)
			}
		})
	}
}

func TestAPIClientsAndMerge(t *testing.T) {
	t.Parallel()
	env, err := callers.ParseAPIClients("demo=" + hashOf("demo-token") + ", demo=" + hashOf("new-token") + ",Old.Client=" + hashOf("old"))
	if err != nil {
		t.Fatal(err)
	}
	file, err := callers.ParseFile([]byte(goodFile))
	if err != nil {
		t.Fatal(err)
	}
	set, err := callers.Merge(env, file)
	if err != nil {
		t.Fatal(err)
	}
	for token, want := range map[string]string{"demo-token": "demo", "new-token": "demo", "old": "Old.Client", "beta-token": "beta_2"} {
		if id, ok := set.Authenticate(token); !ok || id != want {
			t.Errorf("token %q: %q, %t; want %q", token, id, ok, want)
		}
	}
	clash, err := callers.ParseAPIClients("acme=" + hashOf("other"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := callers.Merge(clash, file); err == nil || !strings.Contains(err.Error(), `"acme"`) {
		t.Errorf("an id in both: %v, want an error naming it", err)
	}
	for _, bad := range []string{"", "demo:" + hashOf("x"), "demo=abc", "demo=" + hashOf("x") + ",demo=" + hashOf("x")} {
		if _, err := callers.ParseAPIClients(bad); err == nil {
			t.Errorf("API_CLIENTS %q accepted", bad)
		}
	}
}

// A clients file that others may read, or a group the process is not in,
// is reported, with its mode; one its own group may read is not (a
// Kubernetes Secret mounted 0440 for the pod's fsGroup).
func TestReadableByOthers(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, tt := range []struct {
		mode os.FileMode
		// other gives the file a group this process is not in (as root
		// only: others cannot give a file such a group).
		other    bool
		readable bool
	}{
		{0o600, false, false}, {0o400, false, false}, {0o640, false, false}, {0o440, false, false},
		{0o604, false, true}, {0o644, false, true},
		{0o640, true, true}, {0o600, true, false},
	} {
		if tt.other && os.Geteuid() != 0 {
			continue
		}
		path := filepath.Join(dir, fmt.Sprintf("%s-%t", tt.mode, tt.other))
		if err := os.WriteFile(path, []byte(goodFile), 0o600); err != nil {
			t.Fatal(err)
		}
		if tt.other {
			if err := os.Chown(path, -1, 65533); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Chmod(path, tt.mode); err != nil {
			t.Fatal(err)
		}
		mode, readable := callers.ReadableByOthers(path)
		if readable != tt.readable || mode != tt.mode {
			t.Errorf("mode %04o, another group %t: %04o, readable %t; want readable %t", tt.mode, tt.other, mode, readable, tt.readable)
		}
	}
	if _, readable := callers.ReadableByOthers(filepath.Join(dir, "missing")); readable {
		t.Error("a missing file is reported readable")
	}
}
