package translate

import (
	"fmt"
	"maps"
	"math"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
)

// TestWeightShares checks that Envoy and gRPC give every endpoint the same
// share of the hash space. Envoy's Maglev and ring hash (no
// locality_weighted_lb_config) use weight / total over the hosts.
// grpc-go v1.85 (gRFC A113, cdsbalancer/configbuilder.go) uses
// (weight / locality's endpoint total) × (locality weight / locality total).
func TestWeightShares(t *testing.T) {
	for name, f := range allFixtures(t) {
		r := mustTranslate(t, f, GRPC)
		for _, cla := range r.Endpoints {
			var total, locTotal float64
			for _, lle := range cla.GetEndpoints() {
				locTotal += float64(lle.GetLoadBalancingWeight().GetValue())
				for _, ep := range lle.GetLbEndpoints() {
					total += float64(ep.GetLoadBalancingWeight().GetValue())
				}
			}
			for _, lle := range cla.GetEndpoints() {
				var sum float64
				for _, ep := range lle.GetLbEndpoints() {
					sum += float64(ep.GetLoadBalancingWeight().GetValue())
				}
				for _, ep := range lle.GetLbEndpoints() {
					w := float64(ep.GetLoadBalancingWeight().GetValue())
					envoy := w / total
					grpc := (w / sum) * (float64(lle.GetLoadBalancingWeight().GetValue()) / locTotal)
					if math.Abs(envoy-grpc) > 1e-12 {
						t.Errorf("%s: %q: endpoint share Envoy %v, gRPC %v", name, cla.ClusterName, envoy, grpc)
					}
				}
			}
		}
	}
}

func TestManyLocalities(t *testing.T) {
	f := genFleet(1, 200)
	for j := range f.Pools[0].Endpoints {
		f.Pools[0].Endpoints[j].Locality.SubZone = fmt.Sprintf("rack-%02d", j%40)
	}
	cla := mustTranslate(t, f, GRPC).Endpoints[0]
	if len(cla.GetEndpoints()) != 3*40/gcd(3, 40) {
		t.Fatalf("got %d localities", len(cla.GetEndpoints()))
	}
	n := 0
	for i, lle := range cla.GetEndpoints() {
		n += len(lle.GetLbEndpoints())
		key := func(l *corev3.Locality) string { return l.GetRegion() + "\x00" + l.GetZone() + "\x00" + l.GetSubZone() }
		if i > 0 && key(lle.GetLocality()) <= key(cla.GetEndpoints()[i-1].GetLocality()) {
			t.Errorf("localities not sorted")
		}
		for _, ep := range lle.GetLbEndpoints() {
			hk := ep.GetMetadata().GetFilterMetadata()["envoy.lb"].GetFields()["hash_key"].GetStringValue()
			var j int
			fmt.Sscanf(hk, "pool-00-%d", &j)
			if want := fmt.Sprintf("rack-%02d", j%40); lle.GetLocality().GetSubZone() != want {
				t.Errorf("%s in %s, want %s", hk, lle.GetLocality().GetSubZone(), want)
			}
		}
	}
	if n != 200 {
		t.Errorf("got %d endpoints", n)
	}
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

func TestEndpointDetails(t *testing.T) {
	f := loadFleet(t, "testdata/in/ringhash.yaml")
	r := mustTranslate(t, f, Envoy)
	cla := r.Endpoints[0]
	want := map[string]corev3.HealthStatus{
		"embed-0": corev3.HealthStatus_HEALTHY, "embed-1": corev3.HealthStatus_DRAINING,
		"embed-2": corev3.HealthStatus_DEGRADED, "[fd00::12]:8000": corev3.HealthStatus_UNHEALTHY,
	}
	got := map[string]corev3.HealthStatus{}
	for _, lle := range cla.GetEndpoints() {
		for _, ep := range lle.GetLbEndpoints() {
			got[ep.GetMetadata().GetFilterMetadata()["envoy.lb"].GetFields()["hash_key"].GetStringValue()] = ep.GetHealthStatus()
		}
	}
	if !maps.Equal(got, want) {
		t.Errorf("health by hash key = %v, want %v", got, want)
	}
	if len(cla.GetEndpoints()) != 2 {
		t.Errorf("want 2 localities, got %d", len(cla.GetEndpoints()))
	}
	empty := mustTranslate(t, loadFleet(t, "testdata/in/empty.yaml"), GRPC).Endpoints
	if len(empty) != 1 || empty[0].GetClusterName() != "empty" || len(empty[0].GetEndpoints()) != 0 {
		t.Errorf("empty pool: want a CLA without endpoints, got %v", empty)
	}
}
