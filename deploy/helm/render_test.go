package helm

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

const (
	// chartDir is the chart, and prodValues the production-like values
	// file docs/deployment.md points to.
	chartDir   = "leadintake"
	prodValues = "values-production.yaml"
	// release and namespace are those docs/deployment.md's install uses.
	release   = "leadintake"
	namespace = "leadintake"
)

// helm runs Helm's own command (`go tool helm`, the version go.mod pins)
// in this directory, and returns its standard output; its error holds the
// standard error.
func helm(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", append([]string{"tool", "helm"}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("helm %s: %w\n%s", strings.Join(args, " "), err, helmStderr(stderr.String()))
	}
	return stdout.String(), nil
}

// helmStderr drops Helm's notice that the chart's files/alerts.yml is a
// link (it is, on purpose).
func helmStderr(s string) string {
	var keep []string
	for line := range strings.Lines(s) {
		if !strings.Contains(line, "found symbolic link in path") {
			keep = append(keep, line)
		}
	}
	return strings.Join(keep, "")
}

// scheme knows every kind the chart may render; an object of any other kind
// fails to decode.
var scheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		appsv1.AddToScheme, corev1.AddToScheme, batchv1.AddToScheme, policyv1.AddToScheme,
		autoscalingv2.AddToScheme, monitoringv1.AddToScheme, networkingv1.AddToScheme,
	} {
		if err := add(s); err != nil {
			panic(err)
		}
	}
	return s
}()

// strict decodes YAML into the Go type of its apiVersion and kind, refusing
// unknown fields, fields in the wrong case and duplicate keys, as the API
// server's strict field validation does.
var strict = serializer.NewCodecFactory(scheme, serializer.EnableStrict).UniversalDeserializer()

// decode decodes one rendered document strictly.
func decode(doc []byte) (runtime.Object, error) {
	obj, gvk, err := strict.Decode(doc, nil, nil)
	if err != nil {
		return nil, err
	}
	if gvk.Version == "" || gvk.Kind == "" {
		return nil, errors.New("no apiVersion or kind")
	}
	return obj, nil
}

// objects is one rendering of the chart, decoded.
type objects struct {
	all             []runtime.Object
	deployments     map[string]*appsv1.Deployment // by component
	services        []*corev1.Service
	jobs            []*batchv1.Job
	pdbs            []*policyv1.PodDisruptionBudget
	hpas            []*autoscalingv2.HorizontalPodAutoscaler
	serviceMonitors []*monitoringv1.ServiceMonitor
	rules           []*monitoringv1.PrometheusRule
	networkPolicies []*networkingv1.NetworkPolicy
	other           []runtime.Object
}

// parseManifests splits `helm template` output into documents and decodes
// each strictly.
func parseManifests(out string) (*objects, error) {
	o := &objects{deployments: map[string]*appsv1.Deployment{}}
	r := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(out)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		var probe map[string]any
		if err := yaml.Unmarshal(doc, &probe); err != nil {
			return nil, fmt.Errorf("%w\n%s", err, doc)
		}
		if len(probe) == 0 { // comments only
			continue
		}
		obj, err := decode(doc)
		if err != nil {
			return nil, fmt.Errorf("%w\n%s", err, doc)
		}
		o.all = append(o.all, obj)
		switch v := obj.(type) {
		case *appsv1.Deployment:
			c := v.Labels["app.kubernetes.io/component"]
			if o.deployments[c] != nil {
				return nil, fmt.Errorf("two Deployments of component %q", c)
			}
			o.deployments[c] = v
		case *corev1.Service:
			o.services = append(o.services, v)
		case *batchv1.Job:
			o.jobs = append(o.jobs, v)
		case *policyv1.PodDisruptionBudget:
			o.pdbs = append(o.pdbs, v)
		case *autoscalingv2.HorizontalPodAutoscaler:
			o.hpas = append(o.hpas, v)
		case *monitoringv1.ServiceMonitor:
			o.serviceMonitors = append(o.serviceMonitors, v)
		case *monitoringv1.PrometheusRule:
			o.rules = append(o.rules, v)
		case *networkingv1.NetworkPolicy:
			o.networkPolicies = append(o.networkPolicies, v)
		default:
			o.other = append(o.other, obj)
		}
	}
	return o, nil
}

// renderArgs are the arguments of `helm template` for a values case.
func renderArgs(args ...string) []string {
	return append([]string{"template", release, chartDir, "--namespace", namespace}, args...)
}

// render renders the chart with args (values files, --set) and decodes it.
func render(t *testing.T, args ...string) *objects {
	t.Helper()
	out, err := helm(renderArgs(args...)...)
	if err != nil {
		t.Fatal(err)
	}
	o, err := parseManifests(out)
	if err != nil {
		t.Fatalf("helm template %s: %v", strings.Join(args, " "), err)
	}
	return o
}

// renderFails renders the chart with args and returns Helm's error, failing
// the test when it renders.
func renderFails(t *testing.T, args ...string) error {
	t.Helper()
	_, err := helm(renderArgs(args...)...)
	if err == nil {
		t.Fatalf("helm template %s: rendered, want an error", strings.Join(args, " "))
	}
	return err
}

// valuesCase is one set of values the chart is rendered with.
type valuesCase struct {
	name string
	args []string
}

// cases are the default values, the production-like file, and variants
// that switch the optional parts off or on.
var cases = []valuesCase{
	{"default", nil},
	{"production", []string{"-f", prodValues}},
	{"bare", []string{"--set", "api.autoscaling.enabled=false,worker.autoscaling.enabled=false," +
		"api.pdb.enabled=false,worker.pdb.enabled=false,secrets.admin.name=,migrations.enabled=false," +
		"api.preStopSleepSeconds=0,api.spreadAcrossNodes=false,worker.spreadAcrossNodes=false,networkPolicy.enabled=false"}},
	{"env-clients", []string{"--set", "clientsFile.secretName=,secrets.apiClients.name=leadintake-api-clients," +
		"metrics.serviceMonitor.enabled=true,metrics.prometheusRule.enabled=true,secrets.downstreamTokens.name=leadintake-downstream," +
		"secrets.metrics.name=leadintake-metrics,networkPolicy.admin.namespaceSelector.matchLabels.team=observability"}},
}

var (
	renderMu sync.Mutex
	rendered = map[string]*objects{}
)

// renderCase renders c once for all the tests that read it.
func renderCase(t *testing.T, c valuesCase) *objects {
	t.Helper()
	renderMu.Lock()
	defer renderMu.Unlock()
	if o, ok := rendered[c.name]; ok {
		return o
	}
	o := render(t, c.args...)
	rendered[c.name] = o
	return o
}

// forEachCase runs fn on every values case, rendered, as a subtest.
func forEachCase(t *testing.T, fn func(t *testing.T, c valuesCase, o *objects)) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { fn(t, c, renderCase(t, c)) })
	}
}

// readmeSection returns the "Kubernetes" section of docs/deployment.md,
// the page that says what the chart does.
func readmeSection(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "deployment.md"))
	if err != nil {
		t.Fatal(err)
	}
	const heading = "\n## Kubernetes\n"
	_, rest, ok := strings.Cut(string(b), heading)
	if !ok {
		t.Fatal("docs/deployment.md has no section \"Kubernetes\"")
	}
	if i := strings.Index(rest, "\n## "); i >= 0 {
		rest = rest[:i]
	}
	return rest
}
