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
	"github.com/leadintake/leadintake/web"
)

// The test binary is also the demo site, for the tests that run it as a
// process with an environment of its own.
func TestMain(m *testing.M) { testkit.MainOrProgram(m, main) }

const testKey = "pk_demo_0123456789abcdef"

// start runs the command in-process on port 0 with env as the process's
// whole environment (so t is not parallel), and returns its base URL and a
// function that stops it and returns run's error.
func start(t *testing.T, env map[string]string) (string, func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	logs := &testkit.LockedBuffer{}
	env["DEMO_ADDR"] = "127.0.0.1:0"
	testkit.Environment(t, env)
	var runErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		runErr = run(ctx, []string{"demosite"}, logs, io.Discard)
	}()
	t.Cleanup(func() { cancel(); <-done })
	stop := func() error { cancel(); <-done; return runErr }

	deadline := time.Now().Add(testkit.Patience)
	for time.Now().Before(deadline) {
		sc := bufio.NewScanner(strings.NewReader(logs.String()))
		for sc.Scan() {
			var line struct {
				Msg  string `json:"msg"`
				Addr string `json:"addr"`
			}
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "demo site listening" {
				return "http://" + line.Addr, stop
			}
		}
		select {
		case <-done:
			t.Fatalf("run returned before listening: %v\nlogs:\n%s", runErr, logs)
		case <-time.After(10 * time.Millisecond):
		}
	}
	t.Fatalf("no listening line in the logs:\n%s", logs)
	return "", nil
}

func TestServesTheDemo(t *testing.T) {
	base, stop := start(t, map[string]string{"DEMO_PUBLISHABLE_KEY": testKey, "DEMO_API_URL": "http://127.0.0.1:18080"})
	res, err := http.Get(base + "/")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK || !bytes.Contains(page, []byte(`"publishableKey":"`+testKey+`"`)) ||
		!bytes.Contains(page, []byte(`"api":"http://127.0.0.1:18080"`)) || !bytes.Contains(page, []byte(`"snippet":"/leadintake.js"`)) {
		t.Fatalf("GET /: %d\n%s", res.StatusCode, page)
	}
	// The site's own copy of the snippet: it loads while the api is down.
	res, err = http.Get(base + "/leadintake.js")
	if err != nil {
		t.Fatal(err)
	}
	snippet, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK || !bytes.Equal(snippet, web.SnippetSource()) {
		t.Errorf("GET /leadintake.js: %d with %d bytes, want the snippet", res.StatusCode, len(snippet))
	}
	res, err = http.Post(base+"/not-sent", "application/x-www-form-urlencoded", strings.NewReader("email=ada%40example.com"))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusUnsupportedMediaType {
		t.Errorf("the plain form POST: %d, want 415 and the page saying nothing was sent", res.StatusCode)
	}
	if err := stop(); err != nil {
		t.Errorf("run after SIGTERM: %v, want nil", err)
	}
}

// Bad configuration: the demo site, run as a process with an environment of
// its own, exits 1 with one line naming what is wrong.
func TestConfiguration(t *testing.T) {
	t.Parallel()
	for name, tt := range map[string]struct {
		env  []string
		want string
	}{
		"no key":      {nil, "DEMO_PUBLISHABLE_KEY is required"},
		"not a key":   {[]string{"DEMO_PUBLISHABLE_KEY=demo-token"}, "publishable key must start with pk_"},
		"bad api":     {[]string{"DEMO_PUBLISHABLE_KEY=" + testKey, "DEMO_API_URL=127.0.0.1:8080"}, "absolute http or https URL"},
		"bad timeout": {[]string{"DEMO_PUBLISHABLE_KEY=" + testKey, "DEMO_TIMEOUT=soon"}, "DEMO_TIMEOUT"},
		"bad address": {[]string{"DEMO_PUBLISHABLE_KEY=" + testKey, "DEMO_ADDR=nowhere:-1"}, "DEMO_ADDR"},
		"an argument": {nil, `unknown argument "serve"`},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var args []string
			if name == "an argument" {
				args = []string{"serve"}
			}
			r := testkit.RunProgram(t, tt.env, args...)
			line := strings.TrimSuffix(r.Stderr, "\n")
			if r.Code != 1 || strings.Contains(line, "\n") || !strings.Contains(line, tt.want) {
				t.Fatalf("exit %d, stderr %q; want exit 1 and one line with %q", r.Code, r.Stderr, tt.want)
			}
		})
	}
	var usage bytes.Buffer
	if err := run(t.Context(), []string{"demosite", "-h"}, &usage, io.Discard); err != nil ||
		!strings.Contains(usage.String(), "DEMO_PUBLISHABLE_KEY") {
		t.Errorf("-h: %v\n%s", err, usage.String())
	}
}
