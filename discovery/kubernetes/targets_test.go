package kubernetes

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	"github.com/kvxds/kvxds/discovery"
	"github.com/kvxds/kvxds/fleet"
)

func ptr[T any](v T) *T { return &v }

// port is an EndpointSlice port; an empty name is the unnamed port.
func port(name string, n int32) discoveryv1.EndpointPort {
	p := discoveryv1.EndpointPort{Port: &n, Protocol: ptr(corev1.ProtocolTCP)}
	if name != "" {
		p.Name = &name
	}
	return p
}

func eps(name string, family discoveryv1.AddressType, ports []discoveryv1.EndpointPort, endpoints ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: name, Namespace: "ns"},
		AddressType: family,
		Ports:       ports,
		Endpoints:   endpoints,
	}
}

// ep is a ready endpoint of pod (none if empty); opts adjust it.
func ep(addr, pod string, opts ...func(*discoveryv1.Endpoint)) discoveryv1.Endpoint {
	e := discoveryv1.Endpoint{Addresses: []string{addr}, Conditions: discoveryv1.EndpointConditions{Ready: ptr(true)}}
	if pod != "" {
		e.TargetRef = &corev1.ObjectReference{Kind: "Pod", Namespace: "ns", Name: pod}
	}
	for _, o := range opts {
		o(&e)
	}
	return e
}

func conditions(ready, serving, terminating *bool) func(*discoveryv1.Endpoint) {
	return func(e *discoveryv1.Endpoint) {
		e.Conditions = discoveryv1.EndpointConditions{Ready: ready, Serving: serving, Terminating: terminating}
	}
}

func uid(u string) func(*discoveryv1.Endpoint) {
	return func(e *discoveryv1.Endpoint) { e.TargetRef.UID = types.UID(u) }
}

func TestTargets(t *testing.T) {
	v4, v6 := discoveryv1.AddressTypeIPv4, discoveryv1.AddressTypeIPv6
	http := []discoveryv1.EndpointPort{port("http", 8000), port("metrics", 9000)}
	yes, no := ptr(true), ptr(false)
	cfg := Config{Namespace: "ns", Service: "svc", Port: "http"}
	tests := []struct {
		name   string
		cfg    Config
		slices []*discoveryv1.EndpointSlice
		want   []fleet.Endpoint
	}{
		{
			name:   "no slices",
			cfg:    cfg,
			slices: nil,
			want:   []fleet.Endpoint{},
		},
		{
			name: "port by name, identity from the pod, sorted by address",
			cfg:  cfg,
			slices: []*discoveryv1.EndpointSlice{eps("a", v4, http,
				ep("10.0.0.2", "p-2"), ep("10.0.0.1", "p-1"), ep("10.0.0.3", ""))},
			want: []fleet.Endpoint{
				{Host: "10.0.0.1", Port: 8000, HashKey: "p-1"},
				{Host: "10.0.0.2", Port: 8000, HashKey: "p-2"},
				{Host: "10.0.0.3", Port: 8000},
			},
		},
		{
			name:   "port by number",
			cfg:    Config{Port: "9000"},
			slices: []*discoveryv1.EndpointSlice{eps("a", v4, http, ep("10.0.0.1", "p-1"))},
			want:   []fleet.Endpoint{{Host: "10.0.0.1", Port: 9000, HashKey: "p-1"}},
		},
		{
			name: "the unnamed port of a single-port service",
			cfg:  Config{},
			slices: []*discoveryv1.EndpointSlice{
				eps("a", v4, []discoveryv1.EndpointPort{port("", 8080)}, ep("10.0.0.1", "p-1")),
			},
			want: []fleet.Endpoint{{Host: "10.0.0.1", Port: 8080, HashKey: "p-1"}},
		},
		{
			name: "slices without the port, or with an unusable one, are skipped",
			cfg:  cfg,
			slices: []*discoveryv1.EndpointSlice{
				eps("a", v4, []discoveryv1.EndpointPort{port("metrics", 9000)}, ep("10.0.0.1", "p-1")),
				eps("b", v4, nil, ep("10.0.0.2", "p-2")),
				eps("c", v4, []discoveryv1.EndpointPort{{Name: ptr("http")}}, ep("10.0.0.3", "p-3")),
				eps("d", v4, []discoveryv1.EndpointPort{{Name: ptr("http"), Port: ptr(int32(53)), Protocol: ptr(corev1.ProtocolUDP)}}, ep("10.0.0.4", "p-4")),
				eps("e", v4, http, ep("10.0.0.5", "p-5")),
			},
			want: []fleet.Endpoint{{Host: "10.0.0.5", Port: 8000, HashKey: "p-5"}},
		},
		{
			name: "conditions",
			cfg:  cfg,
			slices: []*discoveryv1.EndpointSlice{eps("a", v4, http,
				ep("10.0.0.1", "nil-ready-is-ready", conditions(nil, nil, nil)),
				ep("10.0.0.2", "ready", conditions(yes, yes, no)),
				ep("10.0.0.3", "terminating-serving", conditions(no, yes, yes)),
				ep("10.0.0.4", "terminating-not-serving", conditions(no, no, yes)),
				ep("10.0.0.5", "not-ready", conditions(no, no, no)),
				ep("10.0.0.6", "not-ready-nil-serving", conditions(no, nil, nil)),
				ep("10.0.0.7", "serving-not-ready-not-terminating", conditions(no, yes, no)),
				ep("10.0.0.8", "ready-terminating-published", conditions(yes, yes, yes)),
			)},
			want: []fleet.Endpoint{
				{Host: "10.0.0.1", Port: 8000, HashKey: "nil-ready-is-ready"},
				{Host: "10.0.0.2", Port: 8000, HashKey: "ready"},
				{Host: "10.0.0.3", Port: 8000, HashKey: "terminating-serving", Health: fleet.Draining},
				{Host: "10.0.0.8", Port: 8000, HashKey: "ready-terminating-published", Health: fleet.Draining},
			},
		},
		{
			name: "zone always, node only with node locality",
			cfg:  cfg,
			slices: []*discoveryv1.EndpointSlice{eps("a", v4, http,
				ep("10.0.0.1", "p-1", func(e *discoveryv1.Endpoint) { e.Zone, e.NodeName = ptr("z1"), ptr("node-1") }))},
			want: []fleet.Endpoint{{Host: "10.0.0.1", Port: 8000, HashKey: "p-1", Locality: fleet.Locality{Zone: "z1"}}},
		},
		{
			name: "node locality",
			cfg:  Config{Port: "http", NodeLocality: true},
			slices: []*discoveryv1.EndpointSlice{eps("a", v4, http,
				ep("10.0.0.1", "p-1", func(e *discoveryv1.Endpoint) { e.Zone, e.NodeName = ptr("z1"), ptr("node-1") }))},
			want: []fleet.Endpoint{{Host: "10.0.0.1", Port: 8000, HashKey: "p-1", Locality: fleet.Locality{Zone: "z1", SubZone: "node-1"}}},
		},
		{
			name: "a targetRef that is not a pod gives no identity",
			cfg:  cfg,
			slices: []*discoveryv1.EndpointSlice{eps("a", v4, http,
				ep("10.0.0.1", "", func(e *discoveryv1.Endpoint) {
					e.TargetRef = &corev1.ObjectReference{Kind: "Node", Name: "node-1"}
				}))},
			want: []fleet.Endpoint{{Host: "10.0.0.1", Port: 8000}},
		},
		{
			name: "slices merged; a duplicate address is reported once, from the first slice by name",
			cfg:  cfg,
			slices: []*discoveryv1.EndpointSlice{
				eps("b", v4, http, ep("10.0.0.2", "p-2"), ep("10.0.0.3", "p-3-stale", conditions(no, yes, yes))),
				eps("a", v4, http, ep("10.0.0.1", "p-1"), ep("10.0.0.3", "p-3")),
			},
			want: []fleet.Endpoint{
				{Host: "10.0.0.1", Port: 8000, HashKey: "p-1"},
				{Host: "10.0.0.2", Port: 8000, HashKey: "p-2"},
				{Host: "10.0.0.3", Port: 8000, HashKey: "p-3"},
			},
		},
		{
			name: "IPv6; a dual-stack pod once, by its IPv4 address",
			cfg:  cfg,
			slices: []*discoveryv1.EndpointSlice{
				eps("a-v6", v6, http, ep("fd00::1", "dual", uid("u1")), ep("fd00::2", "v6-only", uid("u2"))),
				eps("b-v4", v4, http, ep("10.0.0.1", "dual", uid("u1"))),
			},
			want: []fleet.Endpoint{
				{Host: "10.0.0.1", Port: 8000, HashKey: "dual"},
				{Host: "fd00::2", Port: 8000, HashKey: "v6-only"},
			},
		},
		{
			name: "a pod re-created under its name is another pod",
			cfg:  cfg,
			slices: []*discoveryv1.EndpointSlice{eps("a", v4, http,
				ep("10.0.0.1", "p-0", uid("old"), conditions(no, yes, yes)),
				ep("10.0.0.9", "p-0", uid("new")))},
			want: []fleet.Endpoint{
				{Host: "10.0.0.1", Port: 8000, HashKey: "p-0", Health: fleet.Draining},
				{Host: "10.0.0.9", Port: 8000, HashKey: "p-0"},
			},
		},
		{
			name: "without UIDs, pods of one name are not merged",
			cfg:  cfg,
			slices: []*discoveryv1.EndpointSlice{
				eps("a", v4, http, ep("10.0.0.1", "p-0", conditions(no, yes, yes))),
				eps("b", v4, http, ep("10.0.0.9", "p-0")),
			},
			want: []fleet.Endpoint{
				{Host: "10.0.0.1", Port: 8000, HashKey: "p-0", Health: fleet.Draining},
				{Host: "10.0.0.9", Port: 8000, HashKey: "p-0"},
			},
		},
		{
			name: "FQDN slices and endpoints without addresses are skipped",
			cfg:  cfg,
			slices: []*discoveryv1.EndpointSlice{
				eps("a", discoveryv1.AddressTypeFQDN, http, ep("replica.example", "p-1")),
				eps("b", v4, http, discoveryv1.Endpoint{}, ep("10.0.0.2", "p-2")),
			},
			want: []fleet.Endpoint{{Host: "10.0.0.2", Port: 8000, HashKey: "p-2"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := targets(tt.slices, tt.cfg)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("targets (-want +got):\n%s", diff)
			}
		})
	}
}

func TestIsNews(t *testing.T) {
	a := []fleet.Endpoint{{Host: "10.0.0.1", Port: 1}}
	b := []fleet.Endpoint{{Host: "10.0.0.2", Port: 1}}
	errU := discovery.Update{Err: errNoWatch}
	tests := []struct {
		name string
		sent *discovery.Update
		u    discovery.Update
		want bool
	}{
		{"first targets", nil, discovery.Update{Targets: a}, true},
		{"first error", nil, errU, true},
		{"same targets", &discovery.Update{Targets: a}, discovery.Update{Targets: a}, false},
		{"other targets", &discovery.Update{Targets: a}, discovery.Update{Targets: b}, true},
		{"error after targets", &discovery.Update{Targets: a}, errU, true},
		{"error while failing", &errU, discovery.Update{Err: errNoWatch}, false},
		{"same targets after an error", &errU, discovery.Update{Targets: a}, true},
	}
	for _, tt := range tests {
		if got := isNews(tt.sent, tt.u); got != tt.want {
			t.Errorf("%s: isNews = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestConfigCheck(t *testing.T) {
	for _, c := range []Config{{Service: "s"}, {Namespace: "n"}, {Namespace: "n", Service: "s", Port: "0"}, {Namespace: "n", Service: "s", Port: "70000"}} {
		if _, err := NewForConfig(c, &rest.Config{Host: "https://127.0.0.1:1"}, nil); err == nil {
			t.Errorf("NewForConfig(%+v) succeeded", c)
		}
	}
}
