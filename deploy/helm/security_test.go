package helm

import (
	"net/netip"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// reachable returns the ports of pod's main container that rule opens, by
// name, and whether it opens them to everyone (no from).
func reachable(rule networkingv1.NetworkPolicyIngressRule, main *corev1.Container) (ports []string, anyone bool) {
	if len(rule.Ports) == 0 {
		for _, p := range main.Ports {
			ports = append(ports, p.Name)
		}
	}
	for _, p := range rule.Ports {
		if p.Port == nil {
			for _, cp := range main.Ports {
				ports = append(ports, cp.Name)
			}
			continue
		}
		for _, cp := range main.Ports {
			if (p.Port.Type == intstr.String && p.Port.StrVal == cp.Name) || (p.Port.Type == intstr.Int && p.Port.IntVal == cp.ContainerPort) {
				ports = append(ports, cp.Name)
			}
		}
	}
	return ports, len(rule.From) == 0
}

// The admin ports (/metrics, River UI, erasures, redrives; the worker's
// probes) take connections only from the monitoring namespaces the values
// name and from the release's own pods; the api's public port from anyone.
// Every pod of the api and the worker is under one NetworkPolicy of its
// own. Switched off, there is none.
func TestNetworkPolicy(t *testing.T) {
	t.Parallel()
	forEachCase(t, func(t *testing.T, c valuesCase, o *objects) {
		if c.name == "bare" {
			if len(o.networkPolicies) != 0 {
				t.Errorf("networkPolicy.enabled=false: %d NetworkPolicies", len(o.networkPolicies))
			}
			return
		}
		wantNamespaces := map[string]string{"kubernetes.io/metadata.name": "monitoring"}
		if c.name == "env-clients" {
			wantNamespaces["team"] = "observability"
		}
		releasePods := labels.SelectorFromSet(map[string]string{"app.kubernetes.io/name": "leadintake", "app.kubernetes.io/instance": release})
		for _, comp := range []string{"api", "worker"} {
			pod := podOf(o.deployments[comp])
			main := container(t, &pod.Spec, comp)
			var policies []*networkingv1.NetworkPolicy
			for _, np := range o.networkPolicies {
				sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
				if err != nil {
					t.Fatal(err)
				}
				if !sel.Empty() && sel.Matches(labels.Set(pod.Labels)) {
					policies = append(policies, np)
				}
			}
			if len(policies) != 1 {
				t.Fatalf("%s: %d NetworkPolicies select its pods, want one", comp, len(policies))
			}
			np := policies[0]
			if !slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}) {
				t.Errorf("%s: policy types %v, want Ingress", comp, np.Spec.PolicyTypes)
			}
			open := map[string]bool{} // port -> open to anyone
			adminFrom := 0
			for _, rule := range np.Spec.Ingress {
				ports, anyone := reachable(rule, main)
				for _, p := range ports {
					open[p] = open[p] || anyone
				}
				if !slices.Contains(ports, "admin") {
					continue
				}
				for _, peer := range rule.From {
					adminFrom++
					switch {
					case peer.IPBlock != nil:
						t.Errorf("%s: the admin port is open to the addresses %s", comp, peer.IPBlock.CIDR)
					case peer.NamespaceSelector != nil:
						if !reflect.DeepEqual(peer.NamespaceSelector.MatchLabels, wantNamespaces) || len(peer.NamespaceSelector.MatchExpressions) > 0 {
							t.Errorf("%s: the admin port is open to the namespaces %v, want %v", comp, peer.NamespaceSelector, wantNamespaces)
						}
						if c.name == "production" && (peer.PodSelector == nil || peer.PodSelector.MatchLabels["app.kubernetes.io/name"] != "prometheus") {
							t.Errorf("%s: the production values narrow the admin port to Prometheus' pods; the rule has %v", comp, peer.PodSelector)
						}
					case peer.PodSelector != nil:
						sel, err := metav1.LabelSelectorAsSelector(peer.PodSelector)
						if err != nil {
							t.Fatal(err)
						}
						if sel.Empty() || !reflect.DeepEqual(sel, releasePods) {
							t.Errorf("%s: the admin port is open to the pods %v of its namespace, want the release's own (%v)", comp, sel, releasePods)
						}
					}
				}
			}
			if open["admin"] || adminFrom != 2 {
				t.Errorf("%s: the admin port is open to anyone (%v) or to %d peers, want the monitoring namespaces and the release's pods", comp, open["admin"], adminFrom)
			}
			if comp == "api" && !open["http"] {
				t.Errorf("api: the public port is not open to everyone")
			}
			for _, p := range main.Ports {
				if _, ok := open[p.Name]; !ok {
					t.Errorf("%s: port %s is closed to everyone", comp, p.Name)
				}
			}
		}
	})
}

// A change to the clients file reaches the processes by a rollout: every
// pod carries a checksum annotation that changes with clientsFile.revision
// (and, at install and upgrade, with the Secret's data). No pod shares its
// process namespace, and no container runs beside the process (a reloader
// in the pod's process namespace could read the process's environment).
func TestClientsFileRollout(t *testing.T) {
	t.Parallel()
	const annotation = "checksum/clients-file"
	forEachCase(t, func(t *testing.T, c valuesCase, o *objects) {
		for where, tpl := range podTemplates(o) {
			if s := tpl.Spec.ShareProcessNamespace; s != nil && *s {
				t.Errorf("%s: its containers share their process namespace", where)
			}
			if n := len(tpl.Spec.Containers) + len(tpl.Spec.InitContainers); n != 1 {
				t.Errorf("%s: %d containers, want the process alone", where, n)
			}
		}
		sums := map[string]bool{}
		for _, comp := range []string{"api", "worker"} {
			sum, ok := podOf(o.deployments[comp]).Annotations[annotation]
			if clients := envOf(container(t, &podOf(o.deployments[comp]).Spec, comp), "CLIENTS_FILE") != nil; ok != clients {
				t.Errorf("%s: annotation %s %q, clients file %v", comp, annotation, sum, clients)
			}
			if ok {
				sums[sum] = true
			}
		}
		if len(sums) > 1 {
			t.Errorf("the api and the worker carry different checksums %v", sums)
		}
	})
	sum := func(revision string) string {
		o := render(t, "--set", "clientsFile.revision="+revision)
		api, worker := podOf(o.deployments["api"]).Annotations[annotation], podOf(o.deployments["worker"]).Annotations[annotation]
		if api == "" || api != worker {
			t.Fatalf("revision %q: checksums %q (api) and %q (worker)", revision, api, worker)
		}
		return api
	}
	if a, b := sum("2026-01-01"), sum("2026-01-02"); a == b {
		t.Errorf("another clientsFile.revision leaves the checksum %s: the pods would not roll", a)
	}
	if a, b := sum("same"), sum("same"); a != b {
		t.Errorf("the same values give the checksums %s and %s: every upgrade would roll the pods", a, b)
	}
}

// The production values trust no whole private range's X-Forwarded-For
// (any pod in 10.0.0.0/8 could then claim any client IP, and get around the
// public rate limit): TRUSTED_PROXIES is set explicitly, empty or to narrow
// CIDRs (a /16 at most for IPv4, a /48 for IPv6), and says why.
func TestProductionTrustedProxies(t *testing.T) {
	t.Parallel()
	o := renderCase(t, cases[1])
	tp := envOf(container(t, &podOf(o.deployments["api"]).Spec, "api"), "TRUSTED_PROXIES")
	if tp == nil {
		t.Fatal("the production values do not set TRUSTED_PROXIES: say explicitly which proxies are trusted")
	}
	raw, err := os.ReadFile(prodValues)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(raw), "\n")
	for i, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), "TRUSTED_PROXIES:") {
			comment := ""
			for j := i - 1; j >= 0 && strings.HasPrefix(strings.TrimSpace(lines[j]), "#"); j-- {
				comment = lines[j] + comment
			}
			if !strings.Contains(comment, "load balancer") {
				t.Errorf("%s: TRUSTED_PROXIES has no comment telling operators to list their load balancer's CIDRs", prodValues)
			}
		}
	}
	for cidr := range strings.SplitSeq(tp.Value, ",") {
		if cidr = strings.TrimSpace(cidr); cidr == "" {
			continue
		}
		p, err := netip.ParsePrefix(cidr)
		if err != nil {
			t.Errorf("TRUSTED_PROXIES %q: %v", cidr, err)
			continue
		}
		if (p.Addr().Is4() && p.Bits() < 16) || (p.Addr().Is6() && p.Bits() < 48) {
			t.Errorf("TRUSTED_PROXIES trusts %s: list the load balancer's CIDRs, not a whole range", p)
		}
	}
}
