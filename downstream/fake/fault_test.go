package fake_test

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/leadintake/leadintake/downstream/fake"
	"github.com/leadintake/leadintake/internal/testkit"
)

func TestScriptedFaults(t *testing.T) {
	t.Parallel()

	t.Run("StatusWithRetryAfterThenNormal", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		b.fake.Script(fake.CRMUpsert,
			fake.Fault{Status: 429, RetryAfter: "2"},
			fake.Fault{Status: 503, Body: `{"error":"maintenance"}`},
		)
		r1, err := b.upsert("ref-a")
		if err != nil || r1.status != 429 || r1.header.Get("Retry-After") != "2" {
			t.Fatalf("first: %v %v Retry-After %q; want 429 with Retry-After 2", r1.status, err, r1.header.Get("Retry-After"))
		}
		r2, err := b.upsert("ref-a")
		if err != nil || r2.status != 503 || string(r2.body) != `{"error":"maintenance"}` || r2.header.Get("Retry-After") != "" {
			t.Fatalf("second: %v %v %s; want 503 with the scripted body", r2.status, err, r2.body)
		}
		if _, ok := b.fake.CRM("ref-a"); ok {
			t.Fatal("a faulted write was applied")
		}
		r3, err := b.upsert("ref-a")
		if err != nil || r3.status != http.StatusCreated {
			t.Fatalf("third: %v %v; want 201 once the script is used up", r3.status, err)
		}
		if n := b.fake.Requests(fake.CRMUpsert); n != 3 {
			t.Errorf("Requests(CRMUpsert) = %d, want 3", n)
		}
	})

	t.Run("ScriptsArePerTarget", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		b.fake.Script(fake.Notify, fake.Fault{Status: 400})
		if r, err := b.upsert("ref-a"); err != nil || r.status != http.StatusCreated {
			t.Fatalf("upsert: %v %v; the notify script must not apply", r.status, err)
		}
		if r, err := b.notify("ref-a"); err != nil || r.status != 400 {
			t.Fatalf("notify: %v %v; want the scripted 400", r.status, err)
		}
	})

	t.Run("Delay", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		const delay = 200 * time.Millisecond
		b.fake.Script(fake.Enrichment, fake.Fault{Delay: delay})
		start := time.Now()
		r := b.mustDo(t, http.MethodPost, "/enrichment", map[string]any{"email": "a@acme.test"})
		if elapsed := time.Since(start); elapsed < delay {
			t.Errorf("answered after %v, before the %v delay", elapsed, delay)
		}
		if r.status != http.StatusOK {
			t.Errorf("status %d, want 200 after the delay", r.status)
		}
	})

	t.Run("HangEndsWithClientTimeout", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		b.fake.Script(fake.CRMUpsert, fake.Fault{Hang: true})
		client := &http.Client{Transport: b.client.Transport, Timeout: 300 * time.Millisecond}
		_, err := doWith(client, http.MethodPut, b.url+"/crm/leads/ref-a", lead("ref-a"), "Idempotency-Key", "ref-a")
		var uerr *url.Error
		if !errors.As(err, &uerr) || !uerr.Timeout() {
			t.Fatalf("err = %v, want a client time-out", err)
		}
		if _, ok := b.fake.CRM("ref-a"); ok {
			t.Error("a hung write was applied")
		}
	})

	t.Run("HangAfterApply", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		b.fake.Script(fake.CRMUpsert, fake.Fault{HangAfterApply: true})
		client := &http.Client{Transport: b.client.Transport, Timeout: 300 * time.Millisecond}
		_, err := doWith(client, http.MethodPut, b.url+"/crm/leads/ref-a", lead("ref-a"), "Idempotency-Key", "ref-a")
		var uerr *url.Error
		if !errors.As(err, &uerr) || !uerr.Timeout() {
			t.Fatalf("err = %v, want a client time-out", err)
		}
		if rec, ok := b.fake.CRM("ref-a"); !ok || rec.Writes != 1 {
			t.Errorf("CRM(ref-a) = %+v, %v; want the write applied", rec, ok)
		}
	})

	t.Run("CloseEndsHang", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		b.fake.Script(fake.Notify, fake.Fault{Hang: true})
		errc := make(chan error, 1)
		go func() {
			_, err := b.notify("ref-a") // the client's time-out is far away
			errc <- err
		}()
		testkit.Eventually(t, "the notification to arrive", func() bool { return b.fake.Requests(fake.Notify) == 1 })
		b.fake.Close()
		if err := <-errc; err == nil {
			t.Fatal("a hung request got an answer when the fake closed; want a broken connection")
		}
		if _, ok := b.fake.Notification("ref-a:notify"); ok {
			t.Error("a hung notification was recorded")
		}
	})

	t.Run("DropBeforeApplyLeavesNoRecord", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		b.fake.Script(fake.CRMCreate, fake.Fault{DropBeforeApply: true})
		if _, err := b.create("ref-a"); err == nil {
			t.Fatal("no error; want a broken connection")
		}
		if _, ok := b.fake.CRM("ref-a"); ok {
			t.Error("a write dropped before applying left a record")
		}
		if n := b.fake.Requests(fake.CRMCreate); n != 1 {
			t.Errorf("Requests(CRMCreate) = %d, want 1", n)
		}
	})

	t.Run("DropAfterApplyLeavesTheRecord", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		b.fake.Script(fake.CRMCreate, fake.Fault{DropAfterApply: true})
		if _, err := b.create("ref-a"); err == nil {
			t.Fatal("no error; want a broken connection")
		}
		rec, ok := b.fake.CRM("ref-a")
		if !ok || rec.Records != 1 {
			t.Fatalf("CRM(ref-a) = %+v, %v; want the record the lost answer was about", rec, ok)
		}
		// The look-up finds it; a blind re-post duplicates it.
		if r := b.mustDo(t, http.MethodGet, "/crm/leads?external_ref=ref-a", nil); r.status != 200 || r.json(t)["id"] != rec.IDs[0] {
			t.Errorf("look-up: %d %s", r.status, r.body)
		}
		if _, err := b.create("ref-a"); err != nil {
			t.Fatal(err)
		}
		if rec, _ := b.fake.CRM("ref-a"); rec.Records != 2 {
			t.Errorf("records = %d after a re-post, want 2", rec.Records)
		}
	})

	t.Run("DropAfterApplyNotification", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		b.fake.Script(fake.Notify, fake.Fault{DropAfterApply: true})
		if _, err := b.notify("ref-a"); err == nil {
			t.Fatal("no error; want a broken connection")
		}
		if r, err := b.notify("ref-a"); err != nil || r.status != http.StatusOK {
			t.Fatalf("retry: %v %v; want 200 for a repeat", r.status, err)
		}
		if n, _ := b.fake.Notification("ref-a:notify"); n.Deliveries != 2 {
			t.Errorf("deliveries = %d, want 2", n.Deliveries)
		}
	})
}

// TestTransportReplaysDroppedIdempotentRequest documents a trap for the
// worker: net/http's Transport silently resends a request that carries an
// Idempotency-Key header and a rewindable body when a reused keep-alive
// connection breaks before the answer. Against the non-idempotent POST
// /crm/leads that makes a duplicate the caller never sees.
func TestTransportReplaysDroppedIdempotentRequest(t *testing.T) {
	t.Parallel()
	s := fake.New(nil)
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	t.Cleanup(s.Close)
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	client := &http.Client{Transport: tr, Timeout: 30 * time.Second}

	// A first request leaves a keep-alive connection in the pool.
	if _, err := doWith(client, http.MethodPost, ts.URL+"/crm/leads", lead("ref-a"), "Idempotency-Key", "ref-a"); err != nil {
		t.Fatal(err)
	}
	s.Script(fake.CRMCreate, fake.Fault{DropAfterApply: true})
	r, err := doWith(client, http.MethodPost, ts.URL+"/crm/leads", lead("ref-b"), "Idempotency-Key", "ref-b")
	if err != nil {
		t.Skipf("this Go's Transport did not replay the request (%v)", err)
	}
	rec, _ := s.CRM("ref-b")
	if r.status != http.StatusCreated || rec.Records != 2 {
		t.Fatalf("status %d, records %d; want 201 and the silent duplicate", r.status, rec.Records)
	}
}

func TestChaos(t *testing.T) {
	t.Parallel()

	// outcomes sends n enrichment requests one after the other and names
	// what each met.
	outcomes := func(t *testing.T, c fake.Chaos, n int) []string {
		b := setup(t, nil)
		if err := b.fake.SetChaos(fake.Enrichment, c); err != nil {
			t.Fatal(err)
		}
		var got []string
		for range n {
			r, err := b.do(http.MethodPost, "/enrichment", map[string]any{"email": "a@acme.test"})
			if err != nil {
				got = append(got, "dropped")
				continue
			}
			got = append(got, fmt.Sprint(r.status))
		}
		return got
	}

	t.Run("ReproducibleWithASeed", func(t *testing.T) {
		t.Parallel()
		c := fake.Chaos{FailRate: 0.3, FailStatus: 502, DropRate: 0.2, Seed: 7}
		first, second := outcomes(t, c, 40), outcomes(t, c, 40)
		if fmt.Sprint(first) != fmt.Sprint(second) {
			t.Fatalf("same seed, different faults:\n%v\n%v", first, second)
		}
		seen := map[string]int{}
		for _, o := range first {
			seen[o]++
		}
		if seen["200"] == 0 || seen["502"] == 0 || seen["dropped"] == 0 {
			t.Errorf("outcomes %v; want a mix of 200, 502 and dropped", seen)
		}
		other := outcomes(t, fake.Chaos{FailRate: 0.3, FailStatus: 502, DropRate: 0.2, Seed: 8}, 40)
		if fmt.Sprint(first) == fmt.Sprint(other) {
			t.Errorf("seeds 7 and 8 gave the same 40 outcomes")
		}
	})

	t.Run("ScriptComesFirst", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		if err := b.fake.SetChaos(fake.Notify, fake.Chaos{FailRate: 1, RetryAfter: "1"}); err != nil {
			t.Fatal(err)
		}
		b.fake.Script(fake.Notify, fake.Fault{Status: 400})
		if r, _ := b.notify("ref-a"); r.status != 400 {
			t.Errorf("first: %d, want the scripted 400", r.status)
		}
		if r, _ := b.notify("ref-a"); r.status != 503 || r.header.Get("Retry-After") != "1" {
			t.Errorf("second: %d, want chaos's 503 with Retry-After 1", r.status)
		}
		if err := b.fake.SetChaos(fake.Notify, fake.Chaos{}); err != nil {
			t.Fatal(err)
		}
		if r, _ := b.notify("ref-a"); r.status != http.StatusAccepted {
			t.Errorf("after the zero Chaos: %d, want 202", r.status)
		}
	})

	t.Run("RefusesBadRates", func(t *testing.T) {
		t.Parallel()
		s := fake.New(nil)
		for _, c := range []fake.Chaos{{FailRate: -0.1}, {HangRate: 1.5}, {FailRate: 0.6, DropRate: 0.6}, {DelayMax: -1}, {FailRate: 0.1, FailStatus: 42}} {
			if err := s.SetChaos(fake.CRMUpsert, c); err == nil {
				t.Errorf("SetChaos(%+v) accepted", c)
			}
		}
	})
}

func TestParseChaos(t *testing.T) {
	t.Parallel()
	got, err := fake.ParseChaos(" fail=0.1, hang=0.01,drop=0.05,delay=200ms,status=502,retry_after=3,seed=42")
	want := fake.Chaos{FailRate: 0.1, HangRate: 0.01, DropRate: 0.05, DelayMax: 200 * time.Millisecond, FailStatus: 502, RetryAfter: "3", Seed: 42}
	if err != nil || got != want {
		t.Fatalf("ParseChaos = %+v, %v; want %+v", got, err, want)
	}
	if got, err := fake.ParseChaos(""); err != nil || got != (fake.Chaos{}) {
		t.Errorf(`ParseChaos("") = %+v, %v`, got, err)
	}
	for _, bad := range []string{"fail", "fail=x", "boom=1", "fail=0.7,drop=0.7", "delay=soon", "hang=-1"} {
		if _, err := fake.ParseChaos(bad); err == nil {
			t.Errorf("ParseChaos(%q) accepted", bad)
		}
	}
}

// TestServedByNetHTTP checks that drops and hangs work behind a plain
// net/http.Server too, and that Close lets its Shutdown finish.
func TestServedByNetHTTP(t *testing.T) {
	t.Parallel()
	s := fake.New(nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	srv.RegisterOnShutdown(s.Close)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	b := &bundle{fake: s, url: "http://" + ln.Addr().String(), client: &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}}

	s.Script(fake.CRMUpsert, fake.Fault{DropAfterApply: true}, fake.Fault{Hang: true})
	if _, err := b.upsert("ref-a"); err == nil {
		t.Fatal("drop: no error")
	}
	if rec, _ := s.CRM("ref-a"); rec.Writes != 1 {
		t.Fatalf("writes = %d after drop-after-apply, want 1", rec.Writes)
	}
	hung := make(chan error, 1)
	go func() {
		_, err := b.upsert("ref-a")
		hung <- err
	}()
	testkit.Eventually(t, "the hung request", func() bool { return s.Requests(fake.CRMUpsert) == 2 })
	if err := srv.Shutdown(t.Context()); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if err := <-hung; err == nil {
		t.Error("the hung request got an answer")
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		t.Errorf("Serve: %v", err)
	}
}
