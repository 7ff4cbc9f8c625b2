package e2e

import (
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/leadintake/leadintake/downstream/fake"
	"github.com/leadintake/leadintake/internal/testkit"
	"github.com/leadintake/leadintake/webhook"
)

const e2eCallbackSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// The worker is killed while a callback delivery is in flight (the
// receiver took it, and never answered): another worker delivers it again
// after RESCUE_STUCK_AFTER, under the same webhook-id.
func TestCallbackSurvivesAWorkerKill(t *testing.T) {
	t.Parallel()
	secret, err := webhook.ParseSecret(e2eCallbackSecret)
	if err != nil {
		t.Fatal(err)
	}
	s := newStack(t, &stackOpts{fake: &fake.Options{CallbackSecret: secret}})
	path := filepath.Join(t.TempDir(), "clients.yaml")
	file := "clients:\n  - id: hooked\n    tokens_sha256: [" + sha256Hex("hooked-token-0001") + "]\n" +
		"    callback:\n      url: " + s.fakeURL + "/callbacks/hooked\n      secret: " + e2eCallbackSecret + "\n"
	if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	s.startAPI("CLIENTS_FILE=" + path)
	env := []string{"CLIENTS_FILE=" + path, "JOB_TIMEOUT=3s", "RESCUE_STUCK_AFTER=13s", "DOWNSTREAM_TIMEOUT=60s"}
	s.fake.Script(fake.Callback, fake.Fault{HangAfterApply: true})
	first := s.startWorker(env...)

	if got := s.submitAs("hooked-token-0001", "hooked-key-0001", leadBody(1)); got != http.StatusAccepted {
		t.Fatalf("submit: %d", got)
	}
	testkit.EventuallyWithin(t, time.Minute, "the callback taken by the receiver", func() bool { return len(s.fake.Callbacks()) == 1 })
	first.Kill()
	s.startWorker(env...)
	testkit.EventuallyWithin(t, 2*time.Minute, "the callback delivered again", func() bool {
		return s.count(`SELECT count(*) FROM callbacks WHERE delivered_at IS NOT NULL`) == 1
	})
	msgs := s.fake.Callbacks()
	if len(msgs) != 1 || msgs[0].Deliveries != 2 || !msgs[0].Verified {
		t.Fatalf("callbacks at the receiver: %+v, want one webhook-id delivered twice, every attempt verified", msgs)
	}
}
