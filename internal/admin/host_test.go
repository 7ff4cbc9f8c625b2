package admin_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/leadintake/leadintake/internal/admin"
	"github.com/leadintake/leadintake/internal/testkit"
	"github.com/leadintake/leadintake/store"
)

// A request whose Host is not a name of the host the admin listener is
// bound to (ADMIN_ADDR) is refused with 421 before anything is served, its
// credentials right or not: a DNS rebinding points another site's name at
// the listener, and the browser then sends that name. A loopback listener
// takes localhost and the loopback addresses, whatever the port (an SSH
// tunnel or a port-forward names another); a listener on every interface
// takes any Host.
func TestHostCheck(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		addr    string
		allowed []string
		refused []string
	}{
		{"127.0.0.1:8081", []string{"127.0.0.1:8081", "localhost:8081", "LOCALHOST", "localhost.:9000", "[::1]:8081", "127.0.0.2", "[::ffff:127.0.0.1]:8081"},
			[]string{"evil.example:8081", "evil.example", "10.0.0.5:8081", "localhost.evil.example:8081", "127.0.0.1.nip.io:8081", ""}},
		{"localhost:0", []string{"localhost:41234", "127.0.0.1:41234", "[::1]"}, []string{"attacker.example:41234"}},
		{"[::1]:8082", []string{"[::1]:8082", "localhost:8082", "127.0.0.1:8082"}, []string{"evil.example:8082"}},
		{"10.1.2.3:8081", []string{"10.1.2.3:8081", "10.1.2.3"}, []string{"localhost:8081", "10.1.2.4:8081", "evil.example:8081"}},
		{"admin.internal.example:8081", []string{"admin.internal.example:8081", "Admin.Internal.Example"}, []string{"evil.example:8081", "127.0.0.1:8081"}},
		{":8081", []string{"10.1.2.3:8081", "leadintake-api-admin.leadintake.svc:8081", "anything.example"}, nil},
		{"0.0.0.0:8081", []string{"10.1.2.3:8081", "anything.example"}, nil},
		{"[::]:8081", []string{"[fd00::1]:8081", "anything.example"}, nil},
		{"", []string{"anything.example"}, nil},
	} {
		t.Run(c.addr, func(t *testing.T) {
			t.Parallel()
			h, err := admin.NewHandler(t.Context(), &admin.Opts{
				Gatherer: prometheus.NewRegistry(), User: "operator", Password: "secret-pw", Addr: c.addr,
				Ready: func(context.Context) error { return nil },
			})
			if err != nil {
				t.Fatal(err)
			}
			send := func(path, host string) *httptest.ResponseRecorder {
				req := httptest.NewRequest(http.MethodGet, path, nil)
				req.Host = host
				req.SetBasicAuth("operator", "secret-pw")
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
				return rec
			}
			for _, host := range c.allowed {
				for path, want := range map[string]int{"/metrics": 200, "/readyz": 200, "/healthz": 200} {
					if rec := send(path, host); rec.Code != want {
						t.Errorf("GET %s with Host %q: %d, want %d", path, host, rec.Code, want)
					}
				}
			}
			for _, host := range c.refused {
				for _, path := range []string{"/metrics", "/readyz", "/healthz", "/riverui/"} {
					rec := send(path, host)
					if rec.Code != http.StatusMisdirectedRequest {
						t.Errorf("GET %s with Host %q: %d, want 421", path, host, rec.Code)
					}
					if host != "" && strings.Contains(rec.Body.String(), host) {
						t.Errorf("the answer echoes the Host %q: %s", host, rec.Body)
					}
				}
			}
		})
	}
}

// redrives records the redrives it is asked for, with their contexts'
// deadlines.
type redrives struct {
	mu        sync.Mutex
	asked     []*store.RedriveParams
	deadlines []time.Duration
}

func (r *redrives) redrive(ctx context.Context, p *store.RedriveParams) (*store.Redriven, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.asked = append(r.asked, p)
	d, ok := ctx.Deadline()
	if !ok {
		r.deadlines = append(r.deadlines, 0)
	} else {
		r.deadlines = append(r.deadlines, time.Until(d))
	}
	return &store.Redriven{}, nil
}

// POST /admin/redrives names at most admin.MaxRedriveKeys keys (more is
// 400 bad_request, nothing redriven), and the redrive runs under a time-out
// of its own, within the listener's write time-out.
func TestRedriveBounds(t *testing.T) {
	t.Parallel()
	r := &redrives{}
	h, err := admin.NewHandler(t.Context(), &admin.Opts{
		Gatherer: prometheus.NewRegistry(), User: "operator", Password: "secret-pw",
		Redrive: r.redrive, Logger: slogJSON(&testkit.LockedBuffer{}),
	})
	if err != nil {
		t.Fatal(err)
	}
	post := func(n int) (int, string) {
		keys := make([]string, n)
		for i := range keys {
			keys[i] = fmt.Sprintf("key-%06d", i)
		}
		body, _ := json.Marshal(map[string]any{"client_id": "known", "keys": keys})
		req := httptest.NewRequest(http.MethodPost, "/admin/redrives", strings.NewReader(string(body)))
		req.SetBasicAuth("operator", "secret-pw")
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		var e struct {
			Error struct{ Code string } `json:"error"`
		}
		_ = json.Unmarshal(rec.Body.Bytes(), &e)
		return rec.Code, e.Error.Code
	}
	if code, errCode := post(admin.MaxRedriveKeys + 1); code != http.StatusBadRequest || errCode != "bad_request" {
		t.Errorf("%d keys: %d %s, want 400 bad_request", admin.MaxRedriveKeys+1, code, errCode)
	}
	if len(r.asked) != 0 {
		t.Fatalf("a redrive of %d keys was made", len(r.asked[0].Keys))
	}
	if code, _ := post(admin.MaxRedriveKeys); code != http.StatusOK {
		t.Errorf("%d keys: %d, want 200", admin.MaxRedriveKeys, code)
	}
	if len(r.asked) != 1 || len(r.asked[0].Keys) != admin.MaxRedriveKeys {
		t.Fatalf("redrives asked: %d", len(r.asked))
	}
	if d := r.deadlines[0]; d <= 0 || d >= admin.WriteTimeout {
		t.Errorf("the redrive's deadline is %s away, want one within the write time-out %s", d, admin.WriteTimeout)
	}
}
