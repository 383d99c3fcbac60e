package e2e

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/peer"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kvxds/kvxds/test/kube"
	"github.com/kvxds/kvxds/test/netns"
)

// slicePods is how many endpoints the EndpointSlice controller puts in a
// slice at most (its default --max-endpoints-per-slice).
const slicePods = 100

// fleetServer is a fleet of pods larger than a network namespace's list
// of addresses: one gRPC server inside the namespace, on every address of
// a prefix made local there, answering as the pod whose address was
// dialled.
type fleetServer struct {
	testgrpc.UnimplementedTestServiceServer
	byAddr map[netip.Addr]string // pod name by address; read-only once serving
	pods   []*backend            // pod i at address i of the prefix
}

func (f *fleetServer) UnaryCall(ctx context.Context, _ *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	p, _ := peer.FromContext(ctx)
	ap, err := netip.ParseAddrPort(p.LocalAddr.String())
	if err != nil {
		return nil, err
	}
	return &testgrpc.SimpleResponse{ServerId: f.byAddr[ap.Addr()]}, nil
}

// newFleetServer serves n pods (see newFleet) from a network namespace of
// its own, number subnet.
func newFleetServer(t testing.TB, subnet int, prefix string, n int) *fleetServer {
	t.Helper()
	f := newFleet(t, prefix, n)
	pn, err := netns.NewNamed(fmt.Sprintf("kvxds-e2e-%d", subnet), subnet, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pn.Close)
	if err := pn.AddLocalRange(prefix); err != nil {
		t.Fatal(err)
	}
	lis, err := pn.Listen("0.0.0.0:8000")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	testgrpc.RegisterTestServiceServer(g, f)
	go g.Serve(lis)
	t.Cleanup(g.Stop)
	return f
}

// newFleet names n pods vllm-0000, vllm-0001, ... at port 8000 of the
// addresses of prefix (a /22 holds 1,000), skipping each /24's .0 and
// .255.
func newFleet(t testing.TB, prefix string, n int) *fleetServer {
	t.Helper()
	pfx := netip.MustParsePrefix(prefix)
	base := pfx.Masked().Addr().As4()
	f := &fleetServer{byAddr: map[netip.Addr]string{}}
	for i := range n {
		a := netip.AddrFrom4([4]byte{base[0], base[1], base[2] + byte(i/250), byte(i%250 + 1)})
		if !pfx.Contains(a) {
			t.Fatalf("%d pods do not fit in %s", n, prefix)
		}
		name := fmt.Sprintf("vllm-%04d", i)
		f.byAddr[a] = name
		f.pods = append(f.pods, &backend{id: name, addr: netip.AddrPortFrom(a, 8000).String()})
	}
	return f
}

// members are pods [from, to) as the ring sees them.
func (f *fleetServer) members(from, to int) []member {
	out := make([]member, 0, to-from)
	for _, b := range f.pods[from:to] {
		out = append(out, member{b, 1})
	}
	return out
}

// slices are the EndpointSlices of Service vllm listing pods [0, n), at
// most slicePods each, named vllm-s0, vllm-s1, ...
func (f *fleetServer) slices(n int) []*discoveryv1.EndpointSlice {
	var out []*discoveryv1.EndpointSlice
	for from := 0; from < n; from += slicePods {
		s := &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Name: fmt.Sprintf("vllm-s%d", from/slicePods), Namespace: "llm", Labels: map[string]string{discoveryv1.LabelServiceName: "vllm"}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: ptr("http"), Port: ptr(int32(8000))}},
		}
		for _, b := range f.pods[from:min(from+slicePods, n)] {
			host, _, _ := net.SplitHostPort(b.addr)
			s.Endpoints = append(s.Endpoints, pod(b.id, host, true, true, false))
		}
		out = append(out, s)
	}
	return out
}

// sessionPerMember finds, for each member, a session the ring gives to it
// alone (not on the arc that depends on a client's rounding), so routing
// them reaches every member.
func sessionPerMember(t testing.TB, members []member, key func(member) string) []string {
	t.Helper()
	const candidates = 200_000
	cand := make([]string, candidates)
	for i := range cand {
		cand[i] = fmt.Sprintf("probe-%06d", i)
	}
	want := predictKeyed(members, cand, 0, key)
	found := map[string]string{}
	for _, s := range cand {
		if owner := want[s]; owner[0] == owner[1] && found[owner[0]] == "" {
			found[owner[0]] = s
		}
	}
	out := make([]string, 0, len(members))
	for _, m := range members {
		s, ok := found[m.b.id]
		if !ok {
			t.Fatalf("none of %d sessions hashes to %s", candidates, m.b.id)
		}
		out = append(out, s)
	}
	return out
}

// newLargeCluster starts an API server with namespace llm and Service
// vllm.
func newLargeCluster(t testing.TB, ctx context.Context) (*kube.Cluster, kubernetes.Interface) {
	t.Helper()
	cluster := kube.Start(t)
	kc := cluster.Client()
	if _, err := kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "llm"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "vllm"},
		Spec:       corev1.ServiceSpec{Selector: map[string]string{"app": "vllm"}, Ports: []corev1.ServicePort{{Name: "http", Port: 8000}}},
	}
	if _, err := kc.CoreV1().Services("llm").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return cluster, kc
}

// kubernetesPolicy is pool "chat" discovering Service vllm in namespace
// llm.
func kubernetesPolicy(xdsAddr, adminAddr, kubeconfig string) string {
	return kubernetesPolicyFor(xdsAddr, adminAddr, "vllm", kubeconfig)
}

// kubernetesPolicyFor is pool "chat" discovering a Service of namespace
// llm.
func kubernetesPolicyFor(xdsAddr, adminAddr, service, kubeconfig string) string {
	return policyTextWith(xdsAddr, adminAddr, nil, fmt.Sprintf(`  kubernetes {
    namespace  = "llm"
    service    = %q
    port       = "http"
    kubeconfig = %q
  }
`, service, kubeconfig))
}

// A 1,000-pod Service over ten EndpointSlices: kvxds serves every pod to
// grpc-go, which sends sessions exactly where the ring model puts them
// (one session per pod, so each of the 1,000 is reached, and 1,000
// more), and scaling down by ten moves only those ten pods' sessions.
//
// Beyond 64 pods of weight 1 the ring is the clients' cap (4,096), shared
// as whole entries per pod: 4 each from 820 to 1,024 pods, so 1,000 → 990
// keeps every other pod's entries (see fleet.GRPCRingSize).
func TestKubernetes1000Pods(t *testing.T) {
	const n, down = 1000, 10
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cluster, kc := newLargeCluster(t, ctx)
	f := newFleetServer(t, 42, "10.214.0.0/22", n)
	slices1000 := f.slices(n)
	if len(slices1000) != n/slicePods {
		t.Fatalf("%d slices", len(slices1000))
	}
	for _, s := range slices1000 {
		if _, err := kc.DiscoveryV1().EndpointSlices("llm").Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	path, xdsAddr, adminAddr := policyFile(t)
	writeAtomic(t, path, kubernetesPolicy(xdsAddr, adminAddr, cluster.Kubeconfig(t)))
	k := startInProcess(t, path, xdsAddr, adminAddr)
	defer k.stop()
	eventuallyWithin(t, time.Minute, "kvxds to serve 1,000 pods", func() bool {
		return len(servedFleet(t, adminAddr).Pools[0].Endpoints) == n
	})

	// grpc-go places pods by name (hash_key).
	byName := func(m member) string { return m.b.id }
	all := f.members(0, n)
	ss := append(sessionPerMember(t, all, byName), sessions(1000)...)
	cl := newGoClient(t, xdsAddr)
	want := predictKeyed(all, ss, 0, byName)
	before := settle(t, cl, ss, want, "1,000 pods")
	if got := len(shares(before)); got != n {
		t.Fatalf("sessions reached %d pods, want %d", got, n)
	}

	// The last slice loses its last ten pods, as a scale-down would.
	last := slices1000[len(slices1000)-1]
	last.Endpoints = last.Endpoints[:len(last.Endpoints)-down]
	if _, err := kc.DiscoveryV1().EndpointSlices("llm").Update(ctx, last, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	rest := f.members(0, n-down)
	wantRest := predictKeyed(rest, ss, 0, byName)
	after := settle(t, cl, ss, wantRest, "scaled down by ten")
	gone := map[string]bool{}
	for _, m := range f.members(n-down, n) {
		gone[m.b.id] = true
	}
	own, between, theirs := 0, 0, 0
	for s, a := range before {
		if gone[a] {
			theirs++
		}
		switch b := after[s]; {
		case a == b:
		case gone[a]:
			own++
		case want[s][0] == want[s][1] && wantRest[s][0] == wantRest[s][1]:
			between++
		}
	}
	t.Logf("scaling 1,000 → 990 moved %d of the removed pods' %d sessions and %d of the %d others'", own, theirs, between, len(ss)-theirs)
	if own != theirs || between != 0 {
		t.Errorf("scaling down by ten moved %d of the removed pods' %d sessions and %d others", own, theirs, between)
	}
	if gotPods := len(shares(after)); gotPods != n-down {
		t.Errorf("after the scale-down sessions reach %d pods, want %d", gotPods, n-down)
	}
	if n := metric(t, adminAddr, "kvxds_xds_nacks_total"); n != 0 {
		t.Errorf("clients rejected %v responses", n)
	}
	// The removed pods are gone from the fleet, and nothing else changed.
	var served []string
	for _, e := range servedFleet(t, adminAddr).Pools[0].Endpoints {
		served = append(served, e.HashKey)
	}
	slices.Sort(served)
	var wantNames []string
	for _, m := range rest {
		wantNames = append(wantNames, m.b.id)
	}
	if !slices.Equal(served, wantNames) {
		t.Errorf("served %d pods, want vllm-0000 … vllm-%04d", len(served), n-down-1)
	}
}
