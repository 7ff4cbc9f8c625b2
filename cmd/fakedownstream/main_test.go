package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/leadintake/leadintake/internal/testkit"
	"github.com/leadintake/leadintake/webhook"
)

// mapEnv is an environment of its own for run.
func mapEnv(m map[string]string) lookupEnv {
	return func(key string) (string, bool) {
		v, ok := m[key]
		return v, ok
	}
}

// start runs the command on port 0 with extra flags and an empty
// environment, and returns its base URL, its logs and a function that stops
// it and returns run's error.
func start(t *testing.T, flags ...string) (string, *testkit.LockedBuffer, func() error) {
	t.Helper()
	return startEnv(t, nil, flags...)
}

// startEnv is start with the environment env.
func startEnv(t *testing.T, env map[string]string, flags ...string) (string, *testkit.LockedBuffer, func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	logs := &testkit.LockedBuffer{}
	args := append([]string{"fakedownstream", "-addr", "127.0.0.1:0"}, flags...)
	var runErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		runErr = run(ctx, args, mapEnv(env), logs, io.Discard)
	}()
	stop := func() error {
		cancel()
		select {
		case <-done:
			return runErr
		case <-time.After(30 * time.Second):
			t.Fatal("run did not return after its context ended")
			return nil
		}
	}
	t.Cleanup(func() { cancel(); <-done })

	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		sc := bufio.NewScanner(strings.NewReader(logs.String()))
		for sc.Scan() {
			var line struct {
				Msg  string `json:"msg"`
				Addr string `json:"addr"`
			}
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "fake downstream listening" && line.Addr != "" {
				return "http://" + line.Addr, logs, stop
			}
		}
		select {
		case <-done:
			t.Fatalf("run returned before listening: %v\nlogs:\n%s", runErr, logs)
		case <-time.After(10 * time.Millisecond):
		}
	}
	t.Fatalf("no listening line in the logs:\n%s", logs)
	return "", nil, nil
}

func send(t *testing.T, method, url, body string, headers ...string) (*http.Response, error) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 30 * time.Second}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(b))
	return resp, nil
}

func mustSend(t *testing.T, method, url, body string, headers ...string) *http.Response {
	t.Helper()
	resp, err := send(t, method, url, body, headers...)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	return resp
}

type state struct {
	CRM map[string]struct {
		Records int `json:"records"`
		Writes  int `json:"writes"`
	} `json:"crm"`
	Callbacks map[string]struct {
		Client     string `json:"client"`
		Deliveries int    `json:"deliveries"`
		Verified   bool   `json:"verified"`
	} `json:"callbacks"`
	Requests map[string]int `json:"requests"`
	Totals   struct {
		CRMRecords int `json:"crm_records"`
	} `json:"totals"`
}

func getState(t *testing.T, base string) state {
	t.Helper()
	resp := mustSend(t, http.MethodGet, base+"/_fake/state", "")
	var st state
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	return st
}

// Two callback secrets, as a client's callback.secret would be written.
const (
	callbackSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	otherSecret    = "whsec_b3RoZXIgc2VjcmV0LCBvdGhlciBjbGllbnQh"
)

// postCallback POSTs a callback to /callbacks/acme as the message id, signed
// with secret now.
func postCallback(t *testing.T, base, id, secret string) *http.Response {
	t.Helper()
	s, err := webhook.ParseSecret(secret)
	if err != nil {
		t.Fatal(err)
	}
	body := `{"type":"lead.completed","timestamp":"2026-05-12T09:30:00Z","data":{"idempotency_key":"key-0001"}}`
	h := http.Header{}
	webhook.SetHeaders(h, s, id, time.Now(), []byte(body))
	return mustSend(t, http.MethodPost, base+"/callbacks/acme", body,
		"webhook-id", h.Get("webhook-id"), "webhook-timestamp", h.Get("webhook-timestamp"), "webhook-signature", h.Get("webhook-signature"))
}

const leadBody = `{"external_ref":"li_ref1","email":"ada@example.com","name":"Ada Lovelace","phone":"+44 20 7946 0000","score":70,"tier":"warm"}`

func TestRun(t *testing.T) {
	t.Parallel()

	t.Run("ControlAPIAndGracefulStop", func(t *testing.T) {
		t.Parallel()
		base, logs, stop := start(t)

		if resp := mustSend(t, http.MethodPost, base+"/_fake/script", `{"target":"crm_upsert","faults":[{"status":503,"retry_after":"2"}]}`); resp.StatusCode != http.StatusNoContent {
			t.Fatalf("script: %d", resp.StatusCode)
		}
		put := func() *http.Response {
			return mustSend(t, http.MethodPut, base+"/crm/leads/li_ref1", leadBody, "Idempotency-Key", "li_ref1")
		}
		if resp := put(); resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "2" {
			t.Fatalf("first PUT: %d, want the scripted 503", resp.StatusCode)
		}
		if resp := put(); resp.StatusCode != http.StatusCreated {
			t.Fatalf("second PUT: %d, want 201", resp.StatusCode)
		}
		st := getState(t, base)
		if st.CRM["li_ref1"].Writes != 1 || st.Requests["crm_upsert"] != 2 || st.Totals.CRMRecords != 1 {
			t.Errorf("state %+v", st)
		}

		if resp := mustSend(t, http.MethodPost, base+"/_fake/chaos", `{"target":"all","fail_rate":1,"retry_after":"1"}`); resp.StatusCode != http.StatusNoContent {
			t.Fatalf("chaos: %d", resp.StatusCode)
		}
		if resp := mustSend(t, http.MethodPost, base+"/enrichment", `{"email":"ada@example.com"}`); resp.StatusCode != 503 {
			t.Errorf("enrichment under chaos: %d, want 503", resp.StatusCode)
		}
		if resp := mustSend(t, http.MethodPost, base+"/_fake/reset", ""); resp.StatusCode != http.StatusNoContent {
			t.Fatalf("reset: %d", resp.StatusCode)
		}
		if st := getState(t, base); len(st.CRM) != 0 || len(st.Requests) != 0 {
			t.Errorf("state after reset %+v", st)
		}

		// A hung request must not hold the graceful stop.
		if resp := mustSend(t, http.MethodPost, base+"/_fake/script", `{"target":"notify","faults":[{"hang":true}]}`); resp.StatusCode != http.StatusNoContent {
			t.Fatalf("script: %d", resp.StatusCode)
		}
		hung := make(chan error, 1)
		go func() {
			_, err := send(t, http.MethodPost, base+"/notify", `{"external_ref":"li_ref1","email":"ada@example.com"}`, "Idempotency-Key", "li_ref1:notify")
			hung <- err
		}()
		deadline := time.Now().Add(20 * time.Second)
		for getState(t, base).Requests["notify"] != 1 {
			if time.Now().After(deadline) {
				t.Fatal("the notification never arrived")
			}
			time.Sleep(10 * time.Millisecond)
		}
		if err := stop(); err != nil {
			t.Fatalf("run: %v", err)
		}
		if err := <-hung; err == nil {
			t.Error("the hung request got an answer")
		}

		out := logs.String()
		for _, personal := range []string{"ada@example.com", "Ada Lovelace", "7946"} {
			if strings.Contains(out, personal) {
				t.Errorf("the logs contain %q:\n%s", personal, out)
			}
		}
		if !strings.Contains(out, `"external_ref":"li_ref1"`) || !strings.Contains(out, `"path":"/crm/leads/{ref}"`) {
			t.Errorf("the logs lack the request lines:\n%s", out)
		}
	})

	t.Run("ChaosAndTokensFromFlags", func(t *testing.T) {
		t.Parallel()
		base, _, stop := start(t, "-chaos", "fail=1,status=502", "-crm-token", "secret")
		if resp := mustSend(t, http.MethodGet, base+"/crm/leads?external_ref=x", ""); resp.StatusCode != 502 {
			t.Errorf("under fail=1: %d, want 502", resp.StatusCode)
		}
		if resp := mustSend(t, http.MethodPost, base+"/_fake/chaos", `{"target":"all"}`); resp.StatusCode != http.StatusNoContent {
			t.Fatalf("chaos off: %d", resp.StatusCode)
		}
		if resp := mustSend(t, http.MethodGet, base+"/crm/leads?external_ref=x", ""); resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("without the token: %d, want 401", resp.StatusCode)
		}
		if resp := mustSend(t, http.MethodGet, base+"/crm/leads?external_ref=x", "", "Authorization", "Bearer secret"); resp.StatusCode != http.StatusNotFound {
			t.Errorf("with the token: %d, want 404", resp.StatusCode)
		}
		if err := stop(); err != nil {
			t.Fatalf("run: %v", err)
		}
	})

	t.Run("CallbackSecret", func(t *testing.T) {
		t.Parallel()
		for name, c := range map[string]struct {
			env   map[string]string
			flags []string
		}{
			"FromEnv":  {env: map[string]string{"FAKE_CALLBACK_SECRET": callbackSecret}},
			"FromFlag": {flags: []string{"-callback-secret", callbackSecret}},
			// The flag wins over the environment, as every flag does.
			"FlagOverEnv": {env: map[string]string{"FAKE_CALLBACK_SECRET": otherSecret}, flags: []string{"-callback-secret", callbackSecret}},
		} {
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				base, logs, stop := startEnv(t, c.env, c.flags...)
				if resp := postCallback(t, base, "msg_1", callbackSecret); resp.StatusCode != http.StatusOK {
					t.Errorf("signed with the secret: %d, want 200", resp.StatusCode)
				}
				if resp := postCallback(t, base, "msg_2", otherSecret); resp.StatusCode != http.StatusUnauthorized {
					t.Errorf("signed with another secret: %d, want 401", resp.StatusCode)
				}
				st := getState(t, base)
				if cb := st.Callbacks["msg_1"]; cb.Deliveries != 1 || !cb.Verified || cb.Client != "acme" {
					t.Errorf("state.callbacks[msg_1] = %+v", cb)
				}
				if cb := st.Callbacks["msg_2"]; cb.Deliveries != 1 || cb.Verified {
					t.Errorf("state.callbacks[msg_2] = %+v", cb)
				}
				if err := stop(); err != nil {
					t.Fatalf("run: %v", err)
				}
				out := logs.String()
				if !strings.Contains(out, `"webhook_id":"msg_1"`) || !strings.Contains(out, `"path":"/callbacks/{client}"`) || !strings.Contains(out, `"callback_signatures_checked":true`) {
					t.Errorf("the logs lack the callback lines:\n%s", out)
				}
				for _, secret := range []string{callbackSecret, otherSecret} {
					if strings.Contains(out, strings.TrimPrefix(secret, "whsec_")[:12]) {
						t.Errorf("the logs contain a secret:\n%s", out)
					}
				}
			})
		}

		t.Run("Unset", func(t *testing.T) {
			t.Parallel()
			base, _, stop := start(t)
			if resp := postCallback(t, base, "msg_1", otherSecret); resp.StatusCode != http.StatusOK {
				t.Errorf("without a secret: %d, want 200", resp.StatusCode)
			}
			if cb := getState(t, base).Callbacks["msg_1"]; cb.Deliveries != 1 || cb.Verified {
				t.Errorf("state.callbacks[msg_1] = %+v, want recorded unverified", cb)
			}
			if err := stop(); err != nil {
				t.Fatalf("run: %v", err)
			}
		})
	})

	t.Run("BadConfiguration", func(t *testing.T) {
		t.Parallel()
		for _, args := range [][]string{
			{"fakedownstream", "-chaos", "fail=2"},
			{"fakedownstream", "-addr", "127.0.0.1:notaport"},
			{"fakedownstream", "-nope"},
			{"fakedownstream", "extra"},
		} {
			if err := run(t.Context(), args, mapEnv(nil), io.Discard, io.Discard); err == nil {
				t.Errorf("run(%q) = nil, want an error", args)
			}
		}
		if err := run(t.Context(), []string{"fakedownstream", "-h"}, mapEnv(nil), io.Discard, io.Discard); err != nil {
			t.Errorf("-h: %v", err)
		}

		// A bad secret stops the command, without quoting it.
		const bad = "whsec_c2hvcnQtYnV0LXNlY3JldA=="
		for name, c := range map[string]struct {
			env  map[string]string
			args []string
		}{
			"Env":      {map[string]string{"FAKE_CALLBACK_SECRET": bad}, []string{"fakedownstream"}},
			"Flag":     {nil, []string{"fakedownstream", "-callback-secret", bad}},
			"NoPrefix": {map[string]string{"FAKE_CALLBACK_SECRET": strings.TrimPrefix(callbackSecret, "whsec_")}, []string{"fakedownstream"}},
		} {
			err := run(t.Context(), c.args, mapEnv(c.env), io.Discard, io.Discard)
			if err == nil || !strings.Contains(err.Error(), "FAKE_CALLBACK_SECRET") {
				t.Errorf("%s: run = %v, want an error naming FAKE_CALLBACK_SECRET", name, err)
			} else if strings.Contains(err.Error(), "c2hvcnQt") || strings.Contains(err.Error(), callbackSecret[6:18]) {
				t.Errorf("%s: the error quotes the secret: %v", name, err)
			}
		}

		// -h lists the flags with their defaults: never the secret.
		var usage bytes.Buffer
		if err := run(t.Context(), []string{"fakedownstream", "-h"}, mapEnv(map[string]string{"FAKE_CALLBACK_SECRET": callbackSecret}), io.Discard, &usage); err != nil {
			t.Fatalf("-h: %v", err)
		}
		if !strings.Contains(usage.String(), "FAKE_CALLBACK_SECRET") || strings.Contains(usage.String(), callbackSecret[6:18]) {
			t.Errorf("-h with the secret in the environment:\n%s", usage.String())
		}
	})
}

func TestMain(m *testing.M) { testkit.Main(m) }
