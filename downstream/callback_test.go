package downstream_test

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/leadintake/leadintake/destination"
	"github.com/leadintake/leadintake/downstream"
	"github.com/leadintake/leadintake/webhook"
)

func TestCallbackDelivery(t *testing.T) {
	t.Parallel()
	secret, err := webhook.ParseSecret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	if err != nil {
		t.Fatal(err)
	}
	cb := downstream.NewCallbacks(5*time.Second, nil)

	// The receiver decides a redirect: it did not take the delivery, and
	// will not by being asked again.
	t.Run("ARedirectIsPermanent", func(t *testing.T) {
		t.Parallel()
		for _, status := range []int{http.StatusMovedPermanently, http.StatusFound, http.StatusTemporaryRedirect, http.StatusPermanentRedirect} {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				http.Redirect(w, r, "/elsewhere", status)
			}))
			err := cb.Deliver(t.Context(), srv.URL+"/hook", secret, "msg_1", []byte(`{}`))
			srv.Close()
			e, ok := destination.AsError(err)
			if !ok || e.Class != destination.Rejected || e.Status != status {
				t.Errorf("%d: %v, want a permanent failure with the status", status, err)
			}
		}
	})

	// The URL's user-info is basic auth, its path and query are sent, but
	// none is in an error: an error names the URL's scheme and host only
	// (Zapier, n8n, Slack and Teams put their secret in the path).
	t.Run("URLSecretsAreSentNotShown", func(t *testing.T) {
		t.Parallel()
		var got string
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			user, pass, _ := r.BasicAuth()
			got = user + " " + pass + " " + r.URL.Path + "?" + r.URL.RawQuery
			w.WriteHeader(http.StatusServiceUnavailable)
		}))
		defer srv.Close()
		host := strings.TrimPrefix(srv.URL, "http://")
		err := cb.Deliver(t.Context(), "http://hook-user:hook-pass@"+host+"/hooks/hook-path?token=hook-query", secret, "msg_1", []byte(`{}`))
		if got != "hook-user hook-pass /hooks/hook-path?token=hook-query" {
			t.Errorf("the receiver got %q, want the URL's user-info as basic auth and its query", got)
		}
		if err == nil {
			t.Fatal("a 503 delivered")
		}

		l, lerr := net.Listen("tcp", "127.0.0.1:0")
		if lerr != nil {
			t.Fatal(lerr)
		}
		dead := l.Addr().String()
		l.Close()
		// A receiver that never answers: the client's time-out.
		hung := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
			// Read whole, the request's context ends when the client
			// leaves.
			_, _ = io.Copy(io.Discard, r.Body)
			<-r.Context().Done()
		}))
		defer hung.Close()
		short := downstream.NewCallbacks(200*time.Millisecond, nil)
		for _, c := range []struct {
			cb  *downstream.Callbacks
			raw string
		}{
			{cb, "http://hook-user:hook-pass@" + dead + "/hooks/hook-path?token=hook-query"},
			{cb, "http://hook-user:hook-pass@" + dead + "/hooks/hook-path?token=hook-query#frag"},
			{cb, "http://hook-user:hook-pass@[::1/hooks/hook-path?token=hook-query"},
			{short, "http://hook-user:hook-pass@" + strings.TrimPrefix(hung.URL, "http://") + "/hooks/hook-path?token=hook-query"},
		} {
			err := c.cb.Deliver(t.Context(), c.raw, secret, "msg_1", []byte(`{}`))
			if err == nil {
				t.Fatalf("%s: delivered", c.raw)
			}
			for _, s := range []string{"hook-user", "hook-pass", "hook-query", "hook-path", "/hooks"} {
				if strings.Contains(err.Error(), s) {
					t.Errorf("the error %q names %s", err, s)
				}
			}
		}
	})
}

func TestOrigin(t *testing.T) {
	for raw, want := range map[string]string{
		"https://hooks.zapier.com/hooks/catch/123/abc-secret/":            "https://hooks.zapier.com",
		"https://u:pw@hooks.slack.com:8443/services/T0/B0/XXXX?token=abc": "https://hooks.slack.com:8443",
		"http://[::1]:9000/webhook/n8n-secret":                            "http://[::1]:9000",
		"not a url at all":                                                "the callback URL",
		"http://[::1/broken":                                              "the callback URL",
	} {
		if got := downstream.Origin(raw); got != want {
			t.Errorf("Origin(%q) = %q, want %q", raw, got, want)
		}
	}
}
