package webhook_test

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/leadintake/leadintake/webhook"
)

// A sender signs a callback; the receiver, in the middle of a rotation,
// verifies it with its new and its old secret, and uses the id as its
// idempotency key. A replay ten minutes later is refused.
func Example() {
	oldSecret, err := webhook.ParseSecret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	if err != nil {
		fmt.Println(err)
		return
	}
	newSecret, _ := webhook.ParseSecret("whsec_085LXMpLgGRZqGY4ez1FoeDsvBw1kP5f")
	sent := time.Unix(1614265330, 0)
	body := []byte(`{"test": 2432232314}`)

	h := http.Header{}
	webhook.SetHeaders(h, oldSecret, "msg_p5jXN8AQM9LWM0D4loKWxJek", sent, body)
	fmt.Println(h.Get("webhook-signature"))

	id, err := webhook.Verify([]webhook.Secret{newSecret, oldSecret}, h, body, sent.Add(2*time.Second), webhook.DefaultTolerance)
	fmt.Println(id, err)

	_, err = webhook.Verify([]webhook.Secret{newSecret, oldSecret}, h, body, sent.Add(10*time.Minute), webhook.DefaultTolerance)
	fmt.Println(errors.Is(err, webhook.ErrTimestamp))
	// Output:
	// v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=
	// msg_p5jXN8AQM9LWM0D4loKWxJek <nil>
	// true
}
