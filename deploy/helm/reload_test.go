package helm

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// syncBuffer is a process's output, read while it runs.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// eventually polls cond every 100 ms until it holds or timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// secretVolume lays out a Secret volume as the kubelet does: each version
// in a directory of its own, ..data a link to the current one, the file a
// link through ..data; an update links ..data to a new version atomically.
type secretVolume struct {
	dir, file string
	n         int
}

func (v *secretVolume) write(t *testing.T, content string) {
	t.Helper()
	v.n++
	version := fmt.Sprintf("..2026_01_01_00_00_%02d.%d", v.n, v.n)
	if err := os.Mkdir(filepath.Join(v.dir, version), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(v.dir, version, v.file), []byte(content), 0o440); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(v.dir, "..data_tmp")
	if err := os.Symlink(version, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(v.dir, "..data")); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(v.dir, v.file)
	if _, err := os.Lstat(link); os.IsNotExist(err) {
		if err := os.Symlink(filepath.Join("..data", v.file), link); err != nil {
			t.Fatal(err)
		}
	}
}

func clientsFile(token string) string {
	sum := sha256.Sum256([]byte(token))
	return "clients:\n  - id: reload\n    tokens_sha256: [" + hex.EncodeToString(sum[:]) + "]\n"
}

// The clients file's reloader, as the chart renders it, run against a real
// api: nothing is signalled while the file stays as it is; once the Secret's
// volume is updated as the kubelet updates it, the api reads the file again
// and the new token is in force, the old one refused. The reloader ends at
// once on SIGTERM.
//
// The api is built under a name of its own: the reloader signals processes
// by name, and no other process on this machine may receive its SIGHUP.
func TestClientsFileReload(t *testing.T) {
	t.Parallel()
	o := renderCase(t, cases[0])
	pod := &podOf(o.deployments["api"]).Spec
	if pod.ShareProcessNamespace == nil || !*pod.ShareProcessNamespace {
		t.Fatal("the api's pod does not share its process namespace: the reloader could not signal the api")
	}
	api := container(t, pod, "api")
	reloader := container(t, pod, "clients-reload")
	env := map[string]string{}
	for _, e := range reloader.Env {
		env[e.Name] = e.Value
	}
	if want := filepath.Base(api.Command[0]); env["RELOAD_TARGET"] != want {
		t.Errorf("RELOAD_TARGET %q, the api's command %q", env["RELOAD_TARGET"], want)
	}
	if cf := envOf(api, "CLIENTS_FILE"); cf == nil || env["CLIENTS_FILE"] != cf.Value {
		t.Errorf("the reloader watches %q, the api reads %v", env["CLIENTS_FILE"], cf)
	}
	if !reflect.DeepEqual(reloader.VolumeMounts, api.VolumeMounts) {
		t.Errorf("the reloader mounts %+v, the api %+v", reloader.VolumeMounts, api.VolumeMounts)
	}
	if pod.SecurityContext.RunAsUser == nil || reloader.SecurityContext.RunAsUser != nil || api.SecurityContext.RunAsUser != nil {
		t.Errorf("the pod's user %v, the containers' %v %v: both containers must run as the pod's user (a signal needs the same user)",
			pod.SecurityContext.RunAsUser, reloader.SecurityContext.RunAsUser, api.SecurityContext.RunAsUser)
	}
	wc := container(t, &podOf(o.deployments["worker"]).Spec, "clients-reload")
	if !slices.Equal(wc.Command, reloader.Command) || !slices.Equal(wc.Args, reloader.Args) {
		t.Error("the worker's reloader runs another script")
	}
	if target := envOf(wc, "RELOAD_TARGET"); target == nil || target.Value != "worker" {
		t.Errorf("the worker's RELOAD_TARGET %+v, want worker", target)
	}

	// The api, built under a name of its own.
	dir := t.TempDir()
	name := "api-" + rand.Text()[:8]
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	build := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(dir, name), "./cmd/api")
	build.Dir = filepath.Join("..", "..")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/api: %v\n%s", err, out)
	}

	vol := &secretVolume{dir: filepath.Join(dir, "clients"), file: filepath.Base(env["CLIENTS_FILE"])}
	if err := os.Mkdir(vol.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	vol.write(t, clientsFile("first-token-reload-0001"))
	path := filepath.Join(vol.dir, vol.file)

	apiOut := &syncBuffer{}
	apiCmd := exec.Command(filepath.Join(dir, name))
	apiCmd.Env = append(os.Environ(),
		// No database is needed: authentication comes first.
		"DATABASE_URL=postgres://leadintake@127.0.0.1:1/leadintake?connect_timeout=1",
		"API_ADDR=127.0.0.1:0", "ADMIN_ADDR=127.0.0.1:0", "CLIENTS_FILE="+path,
		"PII_HASH_KEY=reload-test-pii-hash-key-0123456789abcdef", "SHUTDOWN_TIMEOUT=5s", "LOG_FORMAT=json",
	)
	apiCmd.Stdout, apiCmd.Stderr = apiOut, apiOut
	if err := apiCmd.Start(); err != nil {
		t.Fatal(err)
	}
	apiDone := make(chan error, 1)
	go func() { apiDone <- apiCmd.Wait() }()
	t.Cleanup(func() {
		_ = apiCmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-apiDone:
		case <-time.After(time.Minute):
			_ = apiCmd.Process.Kill()
		}
		if t.Failed() {
			t.Logf("api output:\n%s", apiOut)
		}
	})
	var apiURL string
	eventually(t, time.Minute, "the api listening", func() bool {
		for line := range strings.Lines(apiOut.String()) {
			var entry struct {
				Msg  string `json:"msg"`
				Addr string `json:"addr"`
			}
			if json.Unmarshal([]byte(line), &entry) == nil && entry.Msg == "api listening" {
				apiURL = "http://" + entry.Addr
				return true
			}
		}
		return false
	})
	// authorized reports whether the api takes token (any answer but 401).
	client := &http.Client{Timeout: 30 * time.Second}
	authorized := func(token string) bool {
		req, err := http.NewRequest(http.MethodGet, apiURL+"/v1/operations/reload-key-0001", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode != http.StatusUnauthorized
	}
	if !authorized("first-token-reload-0001") || authorized("second-token-reload-0002") {
		t.Fatal("before the change: want the first token taken, the second refused")
	}

	// The reloader, as rendered, checking every second.
	relOut := &syncBuffer{}
	rel := exec.Command(reloader.Command[0], append(slices.Clone(reloader.Command[1:]), reloader.Args...)...)
	rel.Env = append(os.Environ(), "CLIENTS_FILE="+path, "RELOAD_TARGET="+name, "RELOAD_INTERVAL=1")
	rel.Stdout, rel.Stderr = relOut, relOut
	if err := rel.Start(); err != nil {
		t.Fatal(err)
	}
	relDone := make(chan error, 1)
	go func() { relDone <- rel.Wait() }()
	t.Cleanup(func() {
		_ = rel.Process.Kill()
		if t.Failed() {
			t.Logf("reloader output:\n%s", relOut)
		}
	})
	eventually(t, time.Minute, "the reloader watching", func() bool { return strings.Contains(relOut.String(), "watching "+path) })

	// Unchanged, nothing is sent (a few rounds of the reloader).
	time.Sleep(3 * time.Second)
	if strings.Contains(apiOut.String(), "clients file read again") || strings.Contains(relOut.String(), "SIGHUP") {
		t.Fatalf("the file is unchanged, yet a reload:\n%s", relOut)
	}

	vol.write(t, clientsFile("second-token-reload-0002"))
	eventually(t, time.Minute, "the api reading the file again", func() bool {
		return strings.Contains(apiOut.String(), "clients file read again")
	})
	if !strings.Contains(relOut.String(), "SIGHUP sent to "+name) {
		t.Errorf("the reloader's output:\n%s", relOut)
	}
	if !authorized("second-token-reload-0002") || authorized("first-token-reload-0001") {
		t.Error("after the change: want the second token taken, the first refused")
	}
	// One change, one reload.
	time.Sleep(3 * time.Second)
	if n := strings.Count(apiOut.String(), "clients file read again"); n != 1 {
		t.Errorf("%d reloads for one change", n)
	}

	if err := rel.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-relDone:
		if err != nil {
			t.Errorf("the reloader on SIGTERM: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Error("the reloader did not stop on SIGTERM")
	}
}
