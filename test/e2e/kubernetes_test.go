package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kvxds/kvxds/test/kube"
	"github.com/kvxds/kvxds/xds/fleet"
)

// servedFleet is kvxds's /debug/fleet.
func servedFleet(t *testing.T, adminAddr string) fleet.Fleet {
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
