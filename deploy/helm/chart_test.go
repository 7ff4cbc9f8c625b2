package helm

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"
)

// `helm lint --strict` passes with the default and the production-like
// values.
func TestLint(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{nil, {"-f", prodValues}} {
		out, err := helm(append([]string{"lint", "--strict", chartDir}, args...)...)
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		if !strings.Contains(out, "1 chart(s) linted, 0 chart(s) failed") {
			t.Errorf("helm lint %v:\n%s", args, out)
		}
		t.Logf("helm lint --strict %s %s:\n%s", chartDir, strings.Join(args, " "), out)
	}
}

// The strict decoder refuses what the API server would: an unknown field, a
// field in the wrong case, a duplicate key, a value of the wrong type, and
// a kind it does not know. (Every other test relies on it.)
func TestStrictDecoderRefuses(t *testing.T) {
	t.Parallel()
	const ok = "apiVersion: v1\nkind: Service\nmetadata:\n  name: a\nspec:\n  ports:\n    - port: 80\n"
	if _, err := decode([]byte(ok)); err != nil {
		t.Fatalf("a sound Service: %v", err)
	}
	for name, doc := range map[string]string{
		"unknown field":   strings.Replace(ok, "    - port: 80", "    - port: 80\n      targetPorts: 8080", 1),
		"wrong case":      strings.Replace(ok, "- port: 80", "- Port: 80", 1),
		"duplicate key":   strings.Replace(ok, "  name: a\n", "  name: a\n  name: b\n", 1),
		"wrong type":      strings.Replace(ok, "port: 80", "port: eighty", 1),
		"unknown kind":    strings.Replace(ok, "kind: Service", "kind: Servic", 1),
		"unknown version": strings.Replace(ok, "apiVersion: v1", "apiVersion: v2", 1),
	} {
		if _, err := decode([]byte(doc)); err == nil {
			t.Errorf("%s: decoded, want an error", name)
		}
	}
}

// Every case renders the chart's objects, and nothing else: no Secret, no
// ConfigMap, no ServiceAccount.
func TestRenders(t *testing.T) {
	t.Parallel()
	forEachCase(t, func(t *testing.T, c valuesCase, o *objects) {
		if len(o.other) > 0 {
			t.Errorf("unexpected objects: %v", o.other)
		}
		if o.deployments["api"] == nil || o.deployments["worker"] == nil || len(o.deployments) != 2 {
			t.Fatalf("Deployments: %v, want api and worker", keys(o.deployments))
		}
		var names []string
		for _, s := range o.services {
			names = append(names, s.Name)
		}
		slices.Sort(names)
		if want := []string{"leadintake-api", "leadintake-api-admin", "leadintake-worker-admin"}; !slices.Equal(names, want) {
			t.Errorf("Services %v, want %v", names, want)
		}
		t.Logf("%s: %d objects", c.name, len(o.all))
	})
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// podOf returns a Deployment's pod template.
func podOf(d *appsv1.Deployment) *corev1.PodTemplateSpec { return &d.Spec.Template }

// container returns the pod's container named name.
func container(t *testing.T, pod *corev1.PodSpec, name string) *corev1.Container {
	t.Helper()
	for i := range pod.Containers {
		if pod.Containers[i].Name == name {
			return &pod.Containers[i]
		}
	}
	t.Fatalf("no container %q", name)
	return nil
}

// envOf returns a container's variable name, or nil.
func envOf(c *corev1.Container, name string) *corev1.EnvVar {
	for i := range c.Env {
		if c.Env[i].Name == name {
			return &c.Env[i]
		}
	}
	return nil
}

// portNamed returns the container port named name.
func portNamed(c *corev1.Container, name string) (corev1.ContainerPort, bool) {
	for _, p := range c.Ports {
		if p.Name == name {
			return p, true
		}
	}
	return corev1.ContainerPort{}, false
}

// listenPort is the port of an address as API_ADDR and ADMIN_ADDR take it
// (":8080").
func listenPort(t *testing.T, addr string) int32 {
	t.Helper()
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("address %q: %v", addr, err)
	}
	n, err := strconv.Atoi(port)
	if err != nil {
		t.Fatalf("address %q: %v", addr, err)
	}
	return int32(n)
}

// The objects are valid beyond their types, and refer to one another
// rightly: names and labels Kubernetes accepts, selectors that select the
// pods they are for, ports and volumes that exist, unique variables.
func TestObjectsConsistent(t *testing.T) {
	t.Parallel()
	forEachCase(t, func(t *testing.T, c valuesCase, o *objects) {
		for _, obj := range o.all {
			m, err := metaOf(obj)
			if err != nil {
				t.Fatal(err)
			}
			kind := reflect.TypeOf(obj).Elem().Name()
			check := validation.IsDNS1123Subdomain
			if kind == "Service" {
				check = validation.IsDNS1035Label
			}
			for _, msg := range check(m.GetName()) {
				t.Errorf("%s %q: %s", kind, m.GetName(), msg)
			}
			if m.GetNamespace() != "" {
				t.Errorf("%s %q: namespace %q set in the chart (helm sets it)", kind, m.GetName(), m.GetNamespace())
			}
			checkLabels(t, kind+" "+m.GetName(), m.GetLabels())
		}

		pods := map[string]*corev1.PodTemplateSpec{}
		for comp, d := range o.deployments {
			where := "Deployment " + d.Name
			sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
			if err != nil || sel.Empty() {
				t.Fatalf("%s: selector %v: %v", where, d.Spec.Selector, err)
			}
			if !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
				t.Errorf("%s: its selector does not select its own pods", where)
			}
			checkPod(t, where, &d.Spec.Template)
			pods[comp] = &d.Spec.Template
		}
		for _, j := range o.jobs {
			checkPod(t, "Job "+j.Name, &j.Spec.Template)
			for comp, d := range o.deployments {
				sel, _ := metav1.LabelSelectorAsSelector(d.Spec.Selector)
				if sel.Matches(labels.Set(j.Spec.Template.Labels)) {
					t.Errorf("Job %s: its pods are selected by the %s Deployment", j.Name, comp)
				}
			}
		}

		// selects returns the components whose pods sel selects.
		selects := func(sel labels.Selector) []string {
			var out []string
			for comp, p := range pods {
				if sel.Matches(labels.Set(p.Labels)) {
					out = append(out, comp)
				}
			}
			slices.Sort(out)
			return out
		}
		for _, s := range o.services {
			got := selects(labels.SelectorFromSet(s.Spec.Selector))
			if len(s.Spec.Selector) == 0 || len(got) != 1 {
				t.Errorf("Service %s selects %v, want one Deployment's pods", s.Name, got)
				continue
			}
			main := &pods[got[0]].Spec.Containers[0]
			for _, p := range s.Spec.Ports {
				if p.TargetPort.Type != intstr.String {
					t.Errorf("Service %s: port %s targets %s, want a named container port", s.Name, p.Name, p.TargetPort.String())
					continue
				}
				if _, ok := portNamed(main, p.TargetPort.StrVal); !ok {
					t.Errorf("Service %s: targetPort %q is no port of container %s", s.Name, p.TargetPort.StrVal, main.Name)
				}
			}
		}
		for _, p := range o.pdbs {
			sel, err := metav1.LabelSelectorAsSelector(p.Spec.Selector)
			if err != nil {
				t.Fatal(err)
			}
			if got := selects(sel); len(got) != 1 || p.Labels["app.kubernetes.io/component"] != got[0] {
				t.Errorf("PodDisruptionBudget %s selects %v, want its own component's pods", p.Name, got)
			}
		}
		for _, h := range o.hpas {
			ref := h.Spec.ScaleTargetRef
			var target *appsv1.Deployment
			for _, d := range o.deployments {
				if ref.Kind == "Deployment" && ref.APIVersion == "apps/v1" && ref.Name == d.Name {
					target = d
				}
			}
			if target == nil {
				t.Errorf("HorizontalPodAutoscaler %s: target %+v is no rendered Deployment", h.Name, ref)
			}
		}
	})
}

// metaOf returns an object's metadata.
func metaOf(obj any) (metav1.Object, error) {
	m, ok := obj.(metav1.Object)
	if !ok {
		return nil, fmt.Errorf("%T has no metadata", obj)
	}
	return m, nil
}

// checkLabels checks label keys and values as the API server does.
func checkLabels(t *testing.T, where string, l map[string]string) {
	t.Helper()
	for k, v := range l {
		for _, msg := range validation.IsQualifiedName(k) {
			t.Errorf("%s: label key %q: %s", where, k, msg)
		}
		for _, msg := range validation.IsValidLabelValue(v) {
			t.Errorf("%s: label %s=%q: %s", where, k, v, msg)
		}
	}
}

// checkPod checks a pod template: container names, ports and variables
// unique and valid; probes on ports the container has; mounts of volumes
// the pod has; Secret names valid.
func checkPod(t *testing.T, where string, tpl *corev1.PodTemplateSpec) {
	t.Helper()
	checkLabels(t, where+" pod", tpl.Labels)
	pod := &tpl.Spec
	volumes := map[string]bool{}
	for _, v := range pod.Volumes {
		volumes[v.Name] = true
		if v.Secret != nil {
			checkSecretName(t, where, v.Secret.SecretName)
		}
	}
	names := map[string]bool{}
	for i := range pod.Containers {
		c := &pod.Containers[i]
		cw := where + " container " + c.Name
		for _, msg := range validation.IsDNS1123Label(c.Name) {
			t.Errorf("%s: name: %s", cw, msg)
		}
		if names[c.Name] {
			t.Errorf("%s: two containers of that name", cw)
		}
		names[c.Name] = true
		if c.Image == "" {
			t.Errorf("%s: no image", cw)
		}
		ports := map[string]bool{}
		for _, p := range c.Ports {
			for _, msg := range validation.IsValidPortName(p.Name) {
				t.Errorf("%s: port name %q: %s", cw, p.Name, msg)
			}
			if ports[p.Name] {
				t.Errorf("%s: two ports named %q", cw, p.Name)
			}
			ports[p.Name] = true
		}
		env := map[string]bool{}
		for _, e := range c.Env {
			for _, msg := range validation.IsEnvVarName(e.Name) {
				t.Errorf("%s: variable %q: %s", cw, e.Name, msg)
			}
			if env[e.Name] {
				t.Errorf("%s: variable %s set twice", cw, e.Name)
			}
			env[e.Name] = true
			if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
				checkSecretName(t, cw, e.ValueFrom.SecretKeyRef.Name)
			}
		}
		for _, pr := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe, c.StartupProbe} {
			if pr == nil {
				continue
			}
			var port intstr.IntOrString
			switch {
			case pr.HTTPGet != nil:
				port = pr.HTTPGet.Port
			case pr.TCPSocket != nil:
				port = pr.TCPSocket.Port
			default:
				t.Errorf("%s: a probe that is neither httpGet nor tcpSocket", cw)
				continue
			}
			if port.Type != intstr.String || !ports[port.StrVal] {
				t.Errorf("%s: a probe on port %s, which the container does not name", cw, port.String())
			}
		}
		for _, m := range c.VolumeMounts {
			if !volumes[m.Name] {
				t.Errorf("%s: mounts volume %q, which the pod does not have", cw, m.Name)
			}
		}
	}
}

func checkSecretName(t *testing.T, where, name string) {
	t.Helper()
	for _, msg := range validation.IsDNS1123Subdomain(name) {
		t.Errorf("%s: Secret name %q: %s", where, name, msg)
	}
}

// secretRef is a key of a Secret that a pod reads.
type secretRef struct{ name, key string }

// secretEnv are the variables that hold secrets: each must come from a
// Secret, never from a value.
var secretEnv = []string{
	"DATABASE_URL", "PII_HASH_KEY", "ADMIN_USER", "ADMIN_PASSWORD", "METRICS_USER", "METRICS_PASSWORD", "API_CLIENTS",
	"ENRICHMENT_TOKEN", "CRM_TOKEN", "NOTIFY_TOKEN",
}

// podTemplates returns every pod template of a rendering, by where it is.
func podTemplates(o *objects) map[string]*corev1.PodTemplateSpec {
	out := map[string]*corev1.PodTemplateSpec{}
	for _, d := range o.deployments {
		out["Deployment "+d.Name] = podOf(d)
	}
	for _, j := range o.jobs {
		out["Job "+j.Name] = &j.Spec.Template
	}
	return out
}

// requiredSecretRefs returns the Secret keys that the pods cannot start
// without (optional references left out).
func requiredSecretRefs(o *objects) map[secretRef]bool {
	refs := map[secretRef]bool{}
	for _, tpl := range podTemplates(o) {
		for _, v := range tpl.Spec.Volumes {
			if v.Secret == nil || (v.Secret.Optional != nil && *v.Secret.Optional) {
				continue
			}
			for _, it := range v.Secret.Items {
				refs[secretRef{v.Secret.SecretName, it.Key}] = true
			}
		}
		for _, c := range tpl.Spec.Containers {
			for _, e := range c.Env {
				if e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
					continue
				}
				r := e.ValueFrom.SecretKeyRef
				if r.Optional == nil || !*r.Optional {
					refs[secretRef{r.Name, r.Key}] = true
				}
			}
		}
	}
	return refs
}

// The secrets are references to existing Secrets: every variable holding a
// secret comes from a secretKeyRef, the clients file from a Secret volume
// (no subPath: a subPath mount is never updated), and values that would put
// a secret in the chart are refused by the schema.
func TestSecretsAreReferences(t *testing.T) {
	t.Parallel()
	forEachCase(t, func(t *testing.T, c valuesCase, o *objects) {
		for where, tpl := range podTemplates(o) {
			for _, ctr := range tpl.Spec.Containers {
				for _, e := range ctr.Env {
					if !slices.Contains(secretEnv, e.Name) {
						continue
					}
					if e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
						t.Errorf("%s container %s: %s is not read from a Secret", where, ctr.Name, e.Name)
					}
				}
			}
		}
		for _, comp := range []string{"api", "worker"} {
			d := o.deployments[comp]
			main := container(t, &podOf(d).Spec, comp)
			for _, name := range []string{"DATABASE_URL", "PII_HASH_KEY"} {
				if envOf(main, name) == nil {
					t.Errorf("%s: no %s", comp, name)
				}
			}
			cf := envOf(main, "CLIENTS_FILE")
			if cf == nil {
				continue
			}
			var mount *corev1.VolumeMount
			for i := range main.VolumeMounts {
				if strings.HasPrefix(cf.Value, main.VolumeMounts[i].MountPath+"/") {
					mount = &main.VolumeMounts[i]
				}
			}
			if mount == nil {
				t.Fatalf("%s: CLIENTS_FILE %s is on no mounted volume", comp, cf.Value)
			}
			if mount.SubPath != "" || mount.SubPathExpr != "" || !mount.ReadOnly {
				t.Errorf("%s: the clients file's mount %+v: want read-only, without subPath (a subPath mount is never updated)", comp, mount)
			}
			var vol *corev1.Volume
			for i := range podOf(d).Spec.Volumes {
				if podOf(d).Spec.Volumes[i].Name == mount.Name {
					vol = &podOf(d).Spec.Volumes[i]
				}
			}
			if vol == nil || vol.Secret == nil {
				t.Fatalf("%s: the clients file's volume %v is not a Secret", comp, vol)
			}
			file := strings.TrimPrefix(cf.Value, mount.MountPath+"/")
			if len(vol.Secret.Items) != 1 || vol.Secret.Items[0].Path != file {
				t.Errorf("%s: the Secret volume's items %+v do not put CLIENTS_FILE's %s there", comp, vol.Secret.Items, file)
			}
		}
	})

	for _, set := range []string{
		"api.env.DATABASE_URL=postgres://u:p@h/db", "config.PII_HASH_KEY=0123456789abcdef0123456789abcdef",
		"worker.env.CRM_TOKEN=x", "api.env.ADMIN_PASSWORD=x", "config.API_CLIENTS=a=b", "api.env.METRICS_PASSWORD=x",
		"worker.env.SHUTDOWN_TIMEOUT=5s", "api.env.CLIENTS_FILE=/x",
	} {
		name, _, _ := strings.Cut(set, "=")
		err := renderFails(t, "--set", set)
		if !strings.Contains(err.Error(), "schema") {
			t.Errorf("--set %s: %v, want the schema's refusal", name, err)
		}
	}
}

// kubectlSecret matches docs/deployment.md's `kubectl create secret generic NAME`
// commands; fromKey their --from-literal and --from-file keys.
var (
	kubectlSecret = regexp.MustCompile(`kubectl (?:-n \S+ |--namespace \S+ )?create secret generic (\S+)((?: +--from-(?:literal|file)=\S+)+)`)
	fromKey       = regexp.MustCompile(`--from-(?:literal|file)=([-._a-zA-Z0-9]+)=`)
)

// docs/deployment.md's `kubectl create secret` commands create exactly the Secret
// keys the chart needs with its default values.
func TestReadmeSecrets(t *testing.T) {
	t.Parallel()
	section := readmeSection(t)
	// Join continued lines.
	section = strings.ReplaceAll(section, "\\\n", " ")
	section = regexp.MustCompile(` {2,}`).ReplaceAllString(section, " ")
	created := map[secretRef]bool{}
	for _, m := range kubectlSecret.FindAllStringSubmatch(section, -1) {
		for _, k := range fromKey.FindAllStringSubmatch(m[2], -1) {
			created[secretRef{m[1], k[1]}] = true
		}
	}
	if len(created) == 0 {
		t.Fatal("docs/deployment.md: no `kubectl create secret generic` command in \"Kubernetes\"")
	}
	needed := requiredSecretRefs(renderCase(t, cases[0]))
	for r := range needed {
		if !created[r] {
			t.Errorf("the chart reads key %s of Secret %s; docs/deployment.md does not create it", r.key, r.name)
		}
	}
	for r := range created {
		if !needed[r] {
			t.Errorf("docs/deployment.md creates key %s of Secret %s; the chart's defaults do not read it", r.key, r.name)
		}
	}
}

// readmeTable returns the rows of the Kubernetes section's table whose header
// row starts with first, keyed by their first cell.
func readmeTable(t *testing.T, first string) map[string][]string {
	t.Helper()
	rows := map[string][]string{}
	in := false
	for line := range strings.Lines(readmeSection(t)) {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "|") {
			in = false
			continue
		}
		var cells []string
		for _, c := range strings.Split(strings.Trim(line, "|"), "|") {
			cells = append(cells, strings.TrimSpace(c))
		}
		switch {
		case cells[0] == first:
			in = true
		case in && !strings.HasPrefix(cells[0], "---"):
			rows[strings.Trim(cells[0], "`")] = cells[1:]
		}
	}
	if len(rows) == 0 {
		t.Fatalf("docs/deployment.md: no table headed %q in \"Kubernetes\"", first)
	}
	return rows
}

// codeSpans returns the `code` spans of a table cell.
func codeSpans(cell string) []string {
	var out []string
	for _, m := range regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(cell, -1) {
		out = append(out, m[1])
	}
	return out
}

// probeDoc is how docs/deployment.md's table writes a probe: `GET /path` on `port`,
// or TCP on `port`.
func probeDoc(p *corev1.Probe) string {
	switch {
	case p == nil:
		return "none"
	case p.HTTPGet != nil:
		return fmt.Sprintf("`GET %s` on `%s`", p.HTTPGet.Path, p.HTTPGet.Port.String())
	case p.TCPSocket != nil:
		return fmt.Sprintf("TCP on `%s`", p.TCPSocket.Port.String())
	}
	return "?"
}

// The probes and the grace periods are what docs/deployment.md's table says: the
// api's /healthz and /readyz on the port API_ADDR listens on, the worker's
// on ADMIN_ADDR's port, and a terminationGracePeriodSeconds
// longer than SHUTDOWN_TIMEOUT (and the api's preStop pause) in every case.
func TestProbesAndGracePeriod(t *testing.T) {
	t.Parallel()
	table := readmeTable(t, "process")
	defaults := renderCase(t, cases[0])
	for _, comp := range []string{"api", "worker"} {
		row, ok := table[comp]
		if !ok || len(row) < 3 {
			t.Fatalf("docs/deployment.md table: no row for %s (liveness, readiness, grace period)", comp)
		}
		main := container(t, &podOf(defaults.deployments[comp]).Spec, comp)
		if got := probeDoc(main.LivenessProbe); !strings.HasPrefix(row[0], got) {
			t.Errorf("%s: liveness probe %s; docs/deployment.md says %q", comp, got, row[0])
		}
		if got := probeDoc(main.ReadinessProbe); !strings.HasPrefix(row[1], got) {
			t.Errorf("%s: readiness probe %s; docs/deployment.md says %q", comp, got, row[1])
		}
		spans := codeSpans(row[2])
		if len(spans) == 0 {
			t.Fatalf("docs/deployment.md table: %s's grace period %q names no number", comp, row[2])
		}
		want := spans[len(spans)-1]
		if got := fmt.Sprint(*podOf(defaults.deployments[comp]).Spec.TerminationGracePeriodSeconds); got != want {
			t.Errorf("%s: terminationGracePeriodSeconds %s by default; docs/deployment.md says %s", comp, got, want)
		}
	}

	grace := append(slices.Clone(cases), valuesCase{"long-shutdown", []string{"--set", "shutdownTimeoutSeconds=300,api.preStopSleepSeconds=20"}})
	for _, c := range grace {
		t.Run(c.name, func(t *testing.T) {
			o := renderCase(t, c)
			for _, comp := range []string{"api", "worker"} {
				pod := &podOf(o.deployments[comp]).Spec
				main := container(t, pod, comp)
				st := envOf(main, "SHUTDOWN_TIMEOUT")
				if st == nil {
					t.Fatalf("%s: no SHUTDOWN_TIMEOUT", comp)
				}
				shutdown, err := time.ParseDuration(st.Value)
				if err != nil {
					t.Fatalf("%s: SHUTDOWN_TIMEOUT %q: %v", comp, st.Value, err)
				}
				budget := shutdown
				if l := main.Lifecycle; l != nil && l.PreStop != nil {
					if l.PreStop.Sleep == nil {
						t.Fatalf("%s: a preStop hook other than sleep (the image has no shell)", comp)
					}
					budget += time.Duration(l.PreStop.Sleep.Seconds) * time.Second
				}
				if pod.TerminationGracePeriodSeconds == nil {
					t.Fatalf("%s: no terminationGracePeriodSeconds", comp)
				}
				gp := time.Duration(*pod.TerminationGracePeriodSeconds) * time.Second
				if gp < budget+10*time.Second {
					t.Errorf("%s: terminationGracePeriodSeconds %s, want at least 10 s over SHUTDOWN_TIMEOUT and preStop (%s)", comp, gp, budget)
				}

				// The probes' ports are the listeners' ports.
				addrVar, portName := "ADMIN_ADDR", "admin"
				if comp == "api" {
					addrVar, portName = "API_ADDR", "http"
				}
				for _, p := range []*corev1.Probe{main.LivenessProbe, main.ReadinessProbe} {
					if p == nil || p.HTTPGet == nil || p.HTTPGet.Port.StrVal != portName {
						t.Fatalf("%s: probe %+v, want an HTTP GET on port %s", comp, p, portName)
					}
				}
				if main.LivenessProbe.HTTPGet.Path != "/healthz" || main.ReadinessProbe.HTTPGet.Path != "/readyz" {
					t.Errorf("%s: probes on %s and %s, want /healthz and /readyz", comp, main.LivenessProbe.HTTPGet.Path, main.ReadinessProbe.HTTPGet.Path)
				}
				addr := envOf(main, addrVar)
				if addr == nil {
					t.Fatalf("%s: no %s", comp, addrVar)
				}
				port, ok := portNamed(main, portName)
				if !ok || port.ContainerPort != listenPort(t, addr.Value) {
					t.Errorf("%s: port %s is %d, %s listens on %s", comp, portName, port.ContainerPort, addrVar, addr.Value)
				}
				if ip := strings.TrimSuffix(addr.Value, ":"+strconv.Itoa(int(port.ContainerPort))); ip != "" {
					t.Errorf("%s: %s=%s listens on %q only; the kubelet and the Services need every interface", comp, addrVar, addr.Value, ip)
				}
			}
		})
	}
}

// `api migrate` is a pre-install and pre-upgrade hook Job, as docs/deployment.md
// says: the same image and DATABASE_URL as the processes, never restarted
// in place, and using no object of the release (a hook runs before they
// exist). Without migrations.enabled there is none.
func TestMigrationHook(t *testing.T) {
	t.Parallel()
	section := readmeSection(t)
	forEachCase(t, func(t *testing.T, c valuesCase, o *objects) {
		if c.name == "bare" {
			if len(o.jobs) != 0 {
				t.Errorf("migrations.enabled=false: %d Jobs", len(o.jobs))
			}
			return
		}
		if len(o.jobs) != 1 {
			t.Fatalf("%d Jobs, want the migration hook", len(o.jobs))
		}
		j := o.jobs[0]
		hook := j.Annotations["helm.sh/hook"]
		events := strings.Split(hook, ",")
		if !slices.Contains(events, "pre-install") || !slices.Contains(events, "pre-upgrade") {
			t.Errorf("helm.sh/hook %q, want pre-install and pre-upgrade", hook)
		}
		if !strings.Contains(section, "`helm.sh/hook: "+hook+"`") {
			t.Errorf("docs/deployment.md does not say `helm.sh/hook: %s`", hook)
		}
		if j.Spec.Template.Spec.RestartPolicy != corev1.RestartPolicyNever {
			t.Errorf("restartPolicy %s, want Never (a failed run is a new pod, its logs kept)", j.Spec.Template.Spec.RestartPolicy)
		}
		if len(j.Spec.Template.Spec.Containers) != 1 {
			t.Fatalf("%d containers", len(j.Spec.Template.Spec.Containers))
		}
		m := &j.Spec.Template.Spec.Containers[0]
		if !slices.Equal(m.Command, []string{"api", "migrate"}) || len(m.Args) != 0 {
			t.Errorf("command %v %v, want [api migrate]", m.Command, m.Args)
		}
		api := container(t, &podOf(o.deployments["api"]).Spec, "api")
		if m.Image != api.Image {
			t.Errorf("image %s, the api's %s", m.Image, api.Image)
		}
		if !reflect.DeepEqual(envOf(m, "DATABASE_URL"), envOf(api, "DATABASE_URL")) {
			t.Errorf("DATABASE_URL %+v, the api's %+v", envOf(m, "DATABASE_URL"), envOf(api, "DATABASE_URL"))
		}
		if len(j.Spec.Template.Spec.Volumes) != 0 || len(m.EnvFrom) != 0 {
			t.Errorf("the hook reads volumes or envFrom: %+v %+v", j.Spec.Template.Spec.Volumes, m.EnvFrom)
		}
		for _, e := range m.Env {
			if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef == nil {
				t.Errorf("%s comes from %+v, which the release may not have created yet", e.Name, e.ValueFrom)
			}
		}
		// The Job is the only hook.
		for _, obj := range o.all {
			if mo, _ := metaOf(obj); mo.GetAnnotations()["helm.sh/hook"] != "" && mo.GetName() != j.Name {
				t.Errorf("%s is a hook too", mo.GetName())
			}
		}
	})
}

// The autoscalers own the replicas (a Deployment under an HPA sets none, so
// that an upgrade does not reset them); the CPU target can be computed (every
// container asks for CPU); without autoscaling the replicas are the
// values'. The disruption budgets cover both components.
func TestScaling(t *testing.T) {
	t.Parallel()
	forEachCase(t, func(t *testing.T, c valuesCase, o *objects) {
		scaled := map[string]*autoscalingv2.HorizontalPodAutoscaler{}
		for _, h := range o.hpas {
			scaled[h.Spec.ScaleTargetRef.Name] = h
			if h.Spec.MinReplicas == nil || *h.Spec.MinReplicas < 1 || *h.Spec.MinReplicas > h.Spec.MaxReplicas {
				t.Errorf("HPA %s: replicas %v..%d", h.Name, h.Spec.MinReplicas, h.Spec.MaxReplicas)
			}
		}
		for comp, d := range o.deployments {
			h := scaled[d.Name]
			switch {
			case c.name == "bare":
				if h != nil || d.Spec.Replicas == nil || *d.Spec.Replicas != 2 {
					t.Errorf("%s without autoscaling: HPA %v, replicas %v, want none and 2", comp, h != nil, d.Spec.Replicas)
				}
				continue
			case h == nil:
				t.Errorf("%s: no HPA", comp)
				continue
			case d.Spec.Replicas != nil:
				t.Errorf("%s: replicas %d set under an HPA", comp, *d.Spec.Replicas)
			}
			for _, m := range h.Spec.Metrics {
				if m.Type != autoscalingv2.ResourceMetricSourceType || m.Resource == nil {
					continue
				}
				for _, ctr := range podOf(d).Spec.Containers {
					if _, ok := ctr.Resources.Requests[m.Resource.Name]; !ok {
						t.Errorf("%s: container %s requests no %s: the HPA cannot compute its utilization", comp, ctr.Name, m.Resource.Name)
					}
				}
			}
			if s := d.Spec.Strategy.RollingUpdate; s == nil || s.MaxUnavailable == nil || s.MaxUnavailable.IntValue() != 0 {
				t.Errorf("%s: rolling update %+v, want maxUnavailable 0", comp, s)
			}
		}
		var budgets []string
		for _, p := range o.pdbs {
			budgets = append(budgets, p.Labels["app.kubernetes.io/component"])
			if p.Spec.MaxUnavailable == nil || p.Spec.MaxUnavailable.IntValue() != 1 {
				t.Errorf("PDB %s: maxUnavailable %v, want 1", p.Name, p.Spec.MaxUnavailable)
			}
		}
		slices.Sort(budgets)
		if want := []string{"api", "worker"}; c.name != "bare" && !slices.Equal(budgets, want) {
			t.Errorf("PodDisruptionBudgets for %v, want %v", budgets, want)
		}
	})
}

// alertsFile is the alerting rules the PrometheusRule must hold.
var alertsFile = filepath.Join("..", "prometheus", "alerts.yml")

// The ServiceMonitor scrapes both admin listeners under the job names that
// deploy/prometheus/alerts.yml selects, with the scrape credential's basic
// auth (secrets.metrics: METRICS_USER and METRICS_PASSWORD, which open
// /metrics alone), never the admin one, and the PrometheusRule holds
// alerts.yml as it is (the chart's files/alerts.yml is a link to it).
func TestMetrics(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(alertsFile)
	if err != nil {
		t.Fatal(err)
	}
	var want monitoringv1.PrometheusRuleSpec
	if err := yaml.UnmarshalStrict(raw, &want); err != nil {
		t.Fatalf("%s as a PrometheusRule's spec: %v", alertsFile, err)
	}
	jobs := map[string]bool{}
	for _, m := range regexp.MustCompile(`job="([^"]+)"`).FindAllSubmatch(raw, -1) {
		jobs[string(m[1])] = true
	}
	if len(jobs) == 0 {
		t.Fatalf("%s selects no job", alertsFile)
	}

	link := filepath.Join(chartDir, "files", "alerts.yml")
	if target, err := os.Readlink(link); err != nil || filepath.Clean(filepath.Join(filepath.Dir(link), target)) != filepath.Clean(alertsFile) {
		t.Errorf("%s: link to %q (%v), want a link to %s", link, target, err, alertsFile)
	}

	forEachCase(t, func(t *testing.T, c valuesCase, o *objects) {
		if c.name == "default" || c.name == "bare" {
			if len(o.serviceMonitors)+len(o.rules) != 0 {
				t.Errorf("metrics are off by default: %d ServiceMonitors, %d PrometheusRules", len(o.serviceMonitors), len(o.rules))
			}
			return
		}
		if len(o.rules) != 1 || len(o.serviceMonitors) != 1 {
			t.Fatalf("%d PrometheusRules, %d ServiceMonitors, want one each", len(o.rules), len(o.serviceMonitors))
		}
		if !reflect.DeepEqual(o.rules[0].Spec, want) {
			got, _ := yaml.Marshal(o.rules[0].Spec)
			t.Errorf("the PrometheusRule is not %s:\n%s", alertsFile, got)
		}

		sm := o.serviceMonitors[0]
		sel, err := metav1.LabelSelectorAsSelector(&sm.Spec.Selector)
		if err != nil {
			t.Fatal(err)
		}
		scraped := map[string]bool{}
		for _, s := range o.services {
			if !sel.Matches(labels.Set(s.Labels)) {
				continue
			}
			job := s.Labels[sm.Spec.JobLabel]
			if job == "" {
				t.Errorf("Service %s has no %s label: its job would be its name", s.Name, sm.Spec.JobLabel)
			}
			scraped[job] = true
			for _, ep := range sm.Spec.Endpoints {
				if !slices.ContainsFunc(s.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == ep.Port }) {
					t.Errorf("Service %s has no port %q", s.Name, ep.Port)
				}
			}
		}
		if !reflect.DeepEqual(scraped, jobs) {
			t.Errorf("the ServiceMonitor scrapes the jobs %v; %s selects %v", keys(scraped), alertsFile, keys(jobs))
		}
		for _, comp := range []string{"api", "worker"} {
			main := container(t, &podOf(o.deployments[comp]).Spec, comp)
			user, pass := envOf(main, "METRICS_USER"), envOf(main, "METRICS_PASSWORD")
			adminUser := envOf(main, "ADMIN_USER")
			for _, ep := range sm.Spec.Endpoints {
				if ep.Path != "/metrics" {
					t.Errorf("endpoint path %q", ep.Path)
				}
				ba := ep.BasicAuth
				if user == nil {
					if adminUser != nil || ba != nil {
						t.Errorf("%s: basic auth %+v, admin user %v, without a scrape credential", comp, ba, adminUser)
					}
					continue
				}
				if ba == nil || ba.Username != *user.ValueFrom.SecretKeyRef || ba.Password != *pass.ValueFrom.SecretKeyRef {
					t.Errorf("%s: basic auth %+v, want the scrape Secret's keys %+v %+v", comp, ba, user.ValueFrom.SecretKeyRef, pass.ValueFrom.SecretKeyRef)
				}
				if adminUser != nil && ba != nil && ba.Username.Name == adminUser.ValueFrom.SecretKeyRef.Name && ba.Username.Key == adminUser.ValueFrom.SecretKeyRef.Key {
					t.Errorf("%s: the ServiceMonitor scrapes with the admin credential", comp)
				}
			}
		}
	})
}

// The chart refuses values it cannot run with: no clients at all, a
// ServiceMonitor that would scrape with the admin credential, a
// connection budget that the pools could exceed (to the connection), a
// Kubernetes older than the chart needs.
func TestRefusals(t *testing.T) {
	t.Parallel()
	if err := renderFails(t, "--set", "clientsFile.secretName="); !strings.Contains(err.Error(), "the api needs its clients") {
		t.Errorf("no clients: %v", err)
	}
	// Prometheus would hold the admin credential.
	if err := renderFails(t, "--set", "metrics.serviceMonitor.enabled=true"); !strings.Contains(err.Error(), "needs secrets.metrics") {
		t.Errorf("a ServiceMonitor without a scrape credential: %v", err)
	}
	// Defaults: (6 HPA maximum + 1 surge) x 17 + (6 + 1) x 20 + 4 = 263.
	render(t, "--set", "postgres.maxConnections=263")
	err := renderFails(t, "--set", "postgres.maxConnections=262")
	if !strings.Contains(err.Error(), "may open 263 connections") {
		t.Errorf("over the budget: %v", err)
	}
	// Without autoscaling, the replicas count: (3 + 1) x 17 + (1 + 1) x 20 = 108, no migrations.
	budget := "api.autoscaling.enabled=false,api.replicas=3,worker.autoscaling.enabled=false,worker.replicas=1,migrations.enabled=false,postgres.maxConnections="
	render(t, "--set", budget+"108")
	if err := renderFails(t, "--set", budget+"107"); !strings.Contains(err.Error(), "may open 108 connections") {
		t.Errorf("over the budget without autoscaling: %v", err)
	}
	render(t, "--kube-version", "1.30.0")
	if err := renderFails(t, "--kube-version", "1.29.9"); !strings.Contains(err.Error(), "kubeVersion") && !strings.Contains(err.Error(), "Kubernetes version") {
		t.Errorf("Kubernetes 1.29: %v", err)
	}
}
