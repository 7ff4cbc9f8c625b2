package e2e

// Helpers of the operations tests (admin listener, metrics, configuration,
// logs), kept apart from harness_test.go.

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/leadintake/leadintake/internal/system"
)

// adminURL returns the base URL of p's admin listener.
func adminURL(t *testing.T, p *system.Process) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	addr, err := p.Addr(ctx, "admin_addr")
	if err != nil {
		t.Fatal(err)
	}
	return "http://" + addr
}

// basicAuth is a user and password for the admin listener; the zero value
// sends none.
type basicAuth struct{ user, password string }

// get GETs url, with basic auth when auth is set.
func get(t *testing.T, url string, auth basicAuth) *response {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if auth != (basicAuth{}) {
		req.SetBasicAuth(auth.user, auth.password)
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return &response{status: resp.StatusCode, header: resp.Header, body: body}
}

// metrics is one scrape of a /metrics endpoint, parsed.
type metrics map[string]*dto.MetricFamily

// scrape GETs url (a /metrics endpoint) and parses it as the Prometheus text
// format, failing the test when it is not that.
func scrape(t *testing.T, url string, auth basicAuth) metrics {
	t.Helper()
	r := get(t, url, auth)
	if r.status != http.StatusOK {
		t.Fatalf("GET %s: %d %s", url, r.status, r.body)
	}
	if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Fatalf("GET %s: Content-Type %q, want the Prometheus text format (text/plain)", url, ct)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(r.body))
	if err != nil {
		t.Fatalf("GET %s: not the Prometheus text format: %v", url, err)
	}
	return fams
}

// value returns the value of the series of family name whose labels include
// labels (a counter, gauge or untyped value; a histogram's sample count), and
// whether there is one. Several matching series are summed.
func (m metrics) value(name string, labels map[string]string) (float64, bool) {
	fam, ok := m[name]
	if !ok {
		return 0, false
	}
	var sum float64
	found := false
	for _, s := range fam.GetMetric() {
		if !hasLabels(s, labels) {
			continue
		}
		found = true
		switch {
		case s.Counter != nil:
			sum += s.Counter.GetValue()
		case s.Gauge != nil:
			sum += s.Gauge.GetValue()
		case s.Histogram != nil:
			sum += float64(s.Histogram.GetSampleCount())
		case s.Untyped != nil:
			sum += s.Untyped.GetValue()
		}
	}
	return sum, found
}

func hasLabels(s *dto.Metric, want map[string]string) bool {
	for k, v := range want {
		ok := false
		for _, l := range s.GetLabel() {
			if l.GetName() == k && l.GetValue() == v {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	return true
}

// labelValues returns the values label takes across family name's series.
func (m metrics) labelValues(name, label string) map[string]bool {
	out := map[string]bool{}
	if fam, ok := m[name]; ok {
		for _, s := range fam.GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() == label {
					out[l.GetValue()] = true
				}
			}
		}
	}
	return out
}

// ran is how one run of a binary to completion went.
type ran struct {
	stdout, stderr string
	code           int
}

// runBinary runs one of the built binaries to completion with env (added to
// a minimal environment: PATH and HOME only, so that nothing of the test's
// own environment leaks in), stdout and stderr kept apart.
func runBinary(t *testing.T, name string, env []string, args ...string) ran {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bins.Path(name), args...)
	cmd.Env = append([]string{"PATH=/usr/bin:/bin", "HOME=" + t.TempDir()}, env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := ran{stdout: stdout.String(), stderr: stderr.String()}
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		r.code = exit.ExitCode()
	default:
		t.Fatalf("run %s %v: %v", name, args, err)
	}
	return r
}
