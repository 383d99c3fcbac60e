package kubernetes

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/go-hclog"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kvxds/kvxds/discovery"
	"github.com/kvxds/kvxds/fleet"
	"github.com/kvxds/kvxds/test/kube"
)

// The Service every integration test discovers, in a namespace of its own.
const (
	service  = "llm"
	portName = "http"
	portNum  = 8000
)

// waitFor bounds each wait for the source to report a change.
const waitFor = 20 * time.Second

// fixture is one test's namespace, holding the Service.
type fixture struct {
	t      testing.TB
	client kubernetes.Interface
	ns     string
}

// newFixture creates namespace ns and the Service in it.
func newFixture(t testing.TB, c *kube.Cluster, ns string) *fixture {
	t.Helper()
	f := &fixture{t: t, client: c.Client(), ns: ns}
	ctx := f.ctx()
	if _, err := f.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating namespace %s: %v", ns, err)
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: service},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": service},
			Ports:    []corev1.ServicePort{{Name: portName, Port: portNum}},
		},
	}
	if _, err := f.client.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating service %s/%s: %v", ns, service, err)
	}
	return f
}

func (f *fixture) ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	f.t.Cleanup(cancel)
	return ctx
}

func (f *fixture) config() Config {
	return Config{Namespace: f.ns, Service: service, Port: portName}
}

// slice is an EndpointSlice of the Service; its address family is the
// first endpoint's.
func (f *fixture) slice(name string, endpoints ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	family := discoveryv1.AddressTypeIPv4
	if len(endpoints) > 0 && strings.Contains(endpoints[0].Addresses[0], ":") {
		family = discoveryv1.AddressTypeIPv6
	}
	s := eps(name, family, []discoveryv1.EndpointPort{port(portName, portNum)}, endpoints...)
	s.Namespace = f.ns
	s.Labels = map[string]string{discoveryv1.LabelServiceName: service}
	for i := range s.Endpoints {
		if r := s.Endpoints[i].TargetRef; r != nil {
			r.Namespace = f.ns
		}
	}
	return s
}

// apply creates the slice, or replaces it if it exists.
func (f *fixture) apply(s *discoveryv1.EndpointSlice) {
	f.t.Helper()
	api := f.client.DiscoveryV1().EndpointSlices(f.ns)
	_, err := api.Update(f.ctx(), s, metav1.UpdateOptions{})
	if err != nil {
		_, err = api.Create(f.ctx(), s, metav1.CreateOptions{})
	}
	if err != nil {
		f.t.Fatalf("applying endpointslice %s: %v", s.Name, err)
	}
}

func (f *fixture) delete(name string) {
	f.t.Helper()
	if err := f.client.DiscoveryV1().EndpointSlices(f.ns).Delete(f.ctx(), name, metav1.DeleteOptions{}); err != nil {
		f.t.Fatalf("deleting endpointslice %s: %v", name, err)
	}
}

// podEndpoints are ready endpoints of pods pod-<net>-<i>, i in [from, to),
// at 10.213.<net>.<i+1>.
func podEndpoints(net, from, to int) []discoveryv1.Endpoint {
	var out []discoveryv1.Endpoint
	for i := from; i < to; i++ {
		out = append(out, ep(fmt.Sprintf("10.213.%d.%d", net, i+1), fmt.Sprintf("pod-%d-%d", net, i)))
	}
	return out
}

// podTargets are the targets podEndpoints(net, from, to) map to.
func podTargets(net, from, to int) []fleet.Endpoint {
	var out []fleet.Endpoint
	for i := from; i < to; i++ {
		out = append(out, fleet.Endpoint{Host: fmt.Sprintf("10.213.%d.%d", net, i+1), Port: portNum, HashKey: fmt.Sprintf("pod-%d-%d", net, i)})
	}
	return out
}

func sorted(ts ...[]fleet.Endpoint) []fleet.Endpoint {
	out := slices.Concat(ts...)
	discovery.SortTargets(out)
	return out
}

// running is a source running until the test ends, and what it sends.
type running struct {
	t  testing.TB
	up chan discovery.Update
}

func start(t testing.TB, src *Source) *running {
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{t: t, up: make(chan discovery.Update)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		src.Run(ctx, r.up)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return r
}

// newSource is a source for cfg authenticating as the admin.
func newSource(t testing.TB, c *kube.Cluster, cfg Config) *Source {
	t.Helper()
	src, err := NewForConfig(cfg, c.Config(), testLogger(t))
	if err != nil {
		t.Fatalf("NewForConfig: %v", err)
	}
	return src
}

func testLogger(t testing.TB) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Name: t.Name(), Output: t.Output(), Level: hclog.Debug})
}

// next is the next update, or fails the test after timeout.
func (r *running) next(timeout time.Duration) discovery.Update {
	r.t.Helper()
	select {
	case u := <-r.up:
		return u
	case <-time.After(timeout):
		r.t.Fatalf("no update in %s", timeout)
		return discovery.Update{}
	}
}

// waitTargets reads updates until one has exactly want, failing the test
// if none does in timeout. Updates on the way (a change made in several
// writes) are fine; errors are not.
func (r *running) waitTargets(want []fleet.Endpoint, timeout time.Duration) {
	r.t.Helper()
	if want == nil {
		want = []fleet.Endpoint{}
	}
	deadline := time.After(timeout)
	var last discovery.Update
	for {
		select {
		case u := <-r.up:
			if u.Err != nil {
				r.t.Fatalf("unexpected error update: %v", u.Err)
			}
			if cmp.Equal(want, u.Targets) {
				return
			}
			last = u
		case <-deadline:
			r.t.Fatalf("targets not reported in %s (-want +last):\n%s", timeout, cmp.Diff(want, last.Targets))
		}
	}
}
