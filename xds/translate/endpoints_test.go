package translate

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/kvxds/kvxds/xds/ringhash"
)

// TestWeightShares: every gRPC implementation, with its own arithmetic
// for locality and endpoint weights (xds/ringhash.Clients), reads each
// assignment kvxds serves it as the endpoints' own weights, the shares
// Envoy gives them (weight / total over the healthy hosts, no
// locality_weighted_lb_config), and builds the ring of those weights.
func TestWeightShares(t *testing.T) {
	for name, f := range allFixtures(t) {
		for _, kind := range []Kind{GRPC, GRPCJS} {
			for _, cla := range mustTranslate(t, f, kind).Endpoints {
				var locs []ringhash.Locality
				var plain []ringhash.Endpoint
				for _, lle := range cla.GetEndpoints() {
					l := ringhash.Locality{Weight: uint64(lle.GetLoadBalancingWeight().GetValue())}
					for _, ep := range lle.GetLbEndpoints() {
						e := ringhash.Endpoint{
							HashKey: ep.GetMetadata().GetFilterMetadata()["envoy.lb"].GetFields()["hash_key"].GetStringValue(),
							Weight:  uint64(ep.GetLoadBalancingWeight().GetValue()),
						}
						h := ep.GetHealthStatus() == corev3.HealthStatus_HEALTHY || ep.GetHealthStatus() == corev3.HealthStatus_UNKNOWN
						l.Endpoints = append(l.Endpoints, e)
						l.Healthy = append(l.Healthy, h)
						if h {
							plain = append(plain, e)
						}
					}
					locs = append(locs, l)
				}
				if len(plain) == 0 {
					continue
				}
				var total uint64
				for _, e := range plain {
					total += e.Weight
				}
				size := 64*total - 1
				want := ringhash.BuildExact(plain, size, size)
				ext := want.Extended(plain, ringhash.Last(plain))
				for _, c := range ringhash.Clients {
					eps := ringhash.Weigh(c.Arithmetic, locs)
					var sum float64
					for _, e := range eps {
						sum += float64(e.Weight)
					}
					for i, e := range eps {
						if got, want := float64(e.Weight)/sum, float64(plain[i].Weight)/float64(total); math.Abs(got-want) > 1e-6 {
							t.Errorf("%s: %v %q: %s gives %s a share of %v, Envoy %v", name, kind, cla.ClusterName, c.Name, e.HashKey, got, want)
						}
					}
					r := ringhash.Build(eps, size, size)
					if !slices.Equal(r.Entries, want.Entries) && !slices.Equal(r.Entries, ext.Entries) {
						t.Errorf("%s: %v %q: %s builds another ring (counts %v, want %v)", name, kind, cla.ClusterName, c.Name, r.Counts, want.Counts)
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
	cla := mustTranslate(t, f, Envoy).Endpoints[0]
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
