package downstream_test

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

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
			e, ok := downstream.AsError(err)
			if !ok || e.Transient || e.StatusCode != status {
				t.Errorf("%d: %v, want a permanent failure with the status", status, err)
			}
		}
	})

	// The URL's user-info is basic auth and its query is sent, but
	// neither is in an error.
	t.Run("URLSecretsAreSentNotShown", func(t *testing.T) {
		t.Parallel()
		var got string
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			user, pass, _ := r.BasicAuth()
			got = user + " " + pass + " " + r.URL.RawQuery
			w.WriteHeader(http.StatusServiceUnavailable)
		}))
		defer srv.Close()
		host := strings.TrimPrefix(srv.URL, "http://")
		err := cb.Deliver(t.Context(), "http://hook-user:hook-pass@"+host+"/hook?token=hook-query", secret, "msg_1", []byte(`{}`))
		if got != "hook-user hook-pass token=hook-query" {
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
		for _, raw := range []string{
			"http://hook-user:hook-pass@" + dead + "/hook?token=hook-query",
			"http://hook-user:hook-pass@" + dead + "/hook?token=hook-query#frag",
			"http://hook-user:hook-pass@[::1/hook?token=hook-query",
		} {
			err := cb.Deliver(t.Context(), raw, secret, "msg_1", []byte(`{}`))
			if err == nil {
				t.Fatalf("%s: delivered", raw)
			}
			for _, s := range []string{"hook-user", "hook-pass", "hook-query"} {
				if strings.Contains(err.Error(), s) {
					t.Errorf("the error %q names %s", err, s)
				}
			}
		}
	})
}
