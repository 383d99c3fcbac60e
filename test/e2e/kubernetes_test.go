package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"reflect"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kvxds/kvxds/fleet"
	"github.com/kvxds/kvxds/test/kube"
)

// servedFleet is kvxds's /debug/fleet.
func servedFleet(t testing.TB, adminAddr string) fleet.Fleet {
	t.Helper()
	resp, err := http.Get("http://" + adminAddr + "/debug/fleet")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var f fleet.Fleet
	if err := json.NewDecoder(resp.Body).Decode(&f); err != nil {
		t.Fatal(err)
	}
	return f
}

// pod is an EndpointSlice endpoint of a pod.
func pod(name, ip string, ready, serving, terminating bool) discoveryv1.Endpoint {
	return discoveryv1.Endpoint{
		Addresses: []string{ip},
		Conditions: discoveryv1.EndpointConditions{
			Ready: &ready, Serving: &serving, Terminating: &terminating,
		},
		TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: "llm", Name: name},
		Zone:      ptr("zone-a"),
	}
}

func ptr[T any](v T) *T { return &v }

// A pool discovered from a real API server's EndpointSlices: kvxds pushes
// its pods by name, a terminating pod as DRAINING, and follows scaling.
func TestKubernetesDiscovery(t *testing.T) {
	cluster := kube.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client := cluster.Client()
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "llm"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "vllm-abc", Namespace: "llm", Labels: map[string]string{discoveryv1.LabelServiceName: "vllm"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr("http"), Port: ptr(int32(8000))}},
		Endpoints: []discoveryv1.Endpoint{
			pod("vllm-0", "10.213.0.10", true, true, false),
			pod("vllm-1", "10.213.0.11", true, true, false),
			pod("vllm-2", "10.213.0.12", false, true, true), // terminating, still serving
			pod("vllm-3", "10.213.0.13", false, false, false),
		},
	}
	if _, err := client.DiscoveryV1().EndpointSlices("llm").Create(ctx, slice, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	path, xdsAddr, adminAddr := policyFile(t)
	text := policyTextWith(xdsAddr, adminAddr, nil, fmt.Sprintf(`  kubernetes {
    namespace  = "llm"
    service    = "vllm"
    port       = "http"
    kubeconfig = %q
  }
`, cluster.Kubeconfig(t)))
	writeAtomic(t, path, text)
	k := startInProcess(t, path, xdsAddr, adminAddr)
	defer k.stop()

	want := func(eps ...fleet.Endpoint) {
		t.Helper()
		var got []fleet.Endpoint
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			got = servedFleet(t, adminAddr).Pools[0].Endpoints
			if reflect.DeepEqual(got, eps) {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Fatalf("served endpoints %+v, want %+v", got, eps)
	}
	ep := func(name, ip string, h fleet.Health) fleet.Endpoint {
		return fleet.Endpoint{Host: ip, Port: 8000, Weight: 1, Health: h, HashKey: name, Locality: fleet.Locality{Zone: "zone-a"}}
	}
	want(ep("vllm-0", "10.213.0.10", fleet.Healthy), ep("vllm-1", "10.213.0.11", fleet.Healthy), ep("vllm-2", "10.213.0.12", fleet.Draining))

	// vllm-2 is gone, vllm-1 is re-created with a new address under the
	// same name, and vllm-4 joins.
	slice.Endpoints = []discoveryv1.Endpoint{
		pod("vllm-0", "10.213.0.10", true, true, false),
		pod("vllm-1", "10.213.0.21", true, true, false),
		pod("vllm-4", "10.213.0.14", true, true, false),
	}
	if _, err := client.DiscoveryV1().EndpointSlices("llm").Update(ctx, slice, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	want(ep("vllm-0", "10.213.0.10", fleet.Healthy), ep("vllm-1", "10.213.0.21", fleet.Healthy), ep("vllm-4", "10.213.0.14", fleet.Healthy))
	if n := metric(t, adminAddr, "kvxds_discovery_errors_total"); n != 0 {
		t.Errorf("%v discovery errors", n)
	}
}

// pods is a Service's pods, each a replica in the pod network, as the
// test lists them in one EndpointSlice.
type pods struct {
	t      *testing.T
	ctx    context.Context
	client kubernetes.Interface
	net    *podNet
	slice  *discoveryv1.EndpointSlice
	byName map[string]*backend
}

// newPods serves n pods vllm-0, vllm-1, ... of Service service
// (namespace llm) in pod network subnet, which keeps two more addresses
// for pods re-created elsewhere; publish lists them.
func newPods(t *testing.T, ctx context.Context, client kubernetes.Interface, service string, subnet, n int) (*pods, []string) {
	t.Helper()
	p := &pods{t: t, ctx: ctx, client: client, net: newPodNet(t, subnet, n+2), byName: map[string]*backend{},
		slice: &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Name: service + "-x1", Namespace: "llm", Labels: map[string]string{discoveryv1.LabelServiceName: service}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: ptr("http"), Port: ptr(int32(8000))}},
		}}
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("vllm-%d", i)
		p.start(names[i], i)
	}
	return p, names
}

// start serves a replica called name on the pod network's address i.
func (p *pods) start(name string, i int) *backend {
	b := serveBackend(p.t, p.net.listen(p.t, p.net.addr(i)+":8000"), name)
	p.byName[name] = b
	return b
}

// publish replaces the slice's endpoints: ready pods, then terminating
// (still serving) ones.
func (p *pods) publish(ready []string, terminating ...string) {
	p.t.Helper()
	p.slice.Endpoints = nil
	for _, name := range ready {
		host, _, _ := net.SplitHostPort(p.byName[name].addr)
		p.slice.Endpoints = append(p.slice.Endpoints, pod(name, host, true, true, false))
	}
	for _, name := range terminating {
		host, _, _ := net.SplitHostPort(p.byName[name].addr)
		p.slice.Endpoints = append(p.slice.Endpoints, pod(name, host, false, true, true))
	}
	var err error
	if p.slice.ResourceVersion == "" {
		p.slice, err = p.client.DiscoveryV1().EndpointSlices("llm").Create(p.ctx, p.slice, metav1.CreateOptions{})
	} else {
		p.slice, err = p.client.DiscoveryV1().EndpointSlices("llm").Update(p.ctx, p.slice, metav1.UpdateOptions{})
	}
	if err != nil {
		p.t.Fatal(err)
	}
}

// members are the named pods as the ring sees them.
func (p *pods) members(names ...string) []member {
	out := make([]member, len(names))
	for i, n := range names {
		out[i] = member{p.byName[n], 1}
	}
	return out
}

// Pods discovered from a real API server, serving in a network namespace,
// with each gRPC client: scaling 4 → 8 → 3 moves only the sessions of the
// pods that come or go, a pod re-created under its name with a new address
// keeps its sessions (grpc-go, which places pods by name), and a
// terminating pod drains.
func TestKubernetesRouting(t *testing.T) {
	cluster := kube.Start(t)
	for i, dp := range dataPlanes {
		t.Run(dp.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			client := cluster.Client()
			ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "llm"}}
			if _, err := client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				t.Fatal(err)
			}
			p, names := newPods(t, ctx, client, "vllm-"+dp.name, 10+i, 8)
			p.publish(names[:4])

			path, xdsAddr, adminAddr := policyFile(t)
			writeAtomic(t, path, kubernetesPolicyFor(xdsAddr, adminAddr, "vllm-"+dp.name, cluster.Kubeconfig(t)))
			k := startInProcess(t, path, xdsAddr, adminAddr)
			defer k.stop()
			// grpc-go places pods by name (hash_key), grpc-js by address.
			key := func(m member) string { return m.b.id }
			if dp.byAddress {
				key = func(m member) string { return m.b.addr }
			}
			expect := func(names ...string) expectation {
				return predictKeyed(p.members(names...), sessions(numSessions), 0, key)
			}
			cl := dp.new(t, xdsAddr)
			ss := sessions(numSessions)
			prevWant := expect(names[:4]...)
			prev := settle(t, cl, ss, prevWant, "4 pods")

			step := func(what string, changed []string, ready []string, terminating ...string) {
				t.Helper()
				p.publish(ready, terminating...)
				want := expect(ready...)
				next := settle(t, cl, ss, want, what)
				// Sessions on an arc that depends on a client's rounding
				// (see movement) are not counted between the others.
				own, between := 0, 0
				for s, a := range prev {
					switch b := next[s]; {
					case a == b:
					case slices.Contains(changed, a) || slices.Contains(changed, b):
						own++
					case prevWant[s][0] == prevWant[s][1] && want[s][0] == want[s][1]:
						between++
					}
				}
				t.Logf("%s: %d sessions moved to or from %v, %d between the others", what, own, changed, between)
				if between > numSessions/100 {
					t.Errorf("%s moved %d sessions between pods that stayed", what, between)
				}
				prev, prevWant = next, want
			}
			step("scale 4 → 8", names[4:8], names[:8])
			step("scale 8 → 3", []string{names[3], names[4], names[5], names[6], names[7]}, names[:3])
			// vllm-1 terminates: it drains (DRAINING: out of the table).
			beforeRestart := prev
			step("vllm-1 terminating", names[1:2], []string{names[0], names[2]}, names[1])
			// vllm-1 comes back under its name at a new address: with
			// grpc-go every session is back where it was.
			p.start(names[1], 8)
			step("vllm-1 re-created at a new address", names[1:2], names[:3])
			if n, _, _ := moved(beforeRestart, prev); !dp.byAddress && n != 0 {
				t.Errorf("after vllm-1 came back under its name, %d sessions are not where they were", n)
			}
			if n := metric(t, adminAddr, "kvxds_xds_nacks_total"); n != 0 {
				t.Errorf("clients rejected %v responses", n)
			}
		})
	}
}
