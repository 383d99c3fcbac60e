package translate

import (
	"slices"
	"strings"
	"testing"

	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/kvxds/kvxds/fleet"
)

// TestMeshWeightChange checks that a weight change reaches a mesh's
// assignment as an EDS update only, and that the fast path gives what a
// full translation gives.
func TestMeshWeightChange(t *testing.T) {
	base := loadFleet(t, "testdata/in/mesh.yaml")
	changed := loadFleet(t, "testdata/in/mesh.yaml")
	changed.Pools[0].Endpoints[0].Weight = 5
	for _, kind := range Kinds {
		prev := mustTranslate(t, base, kind)
		full := mustTranslate(t, changed, kind)
		fast, err := retranslateFleet(prev, changed, kind)
		if err != nil {
			t.Fatal(err)
		}
		if typ := differingType(t, fast, full); typ != "" {
			t.Fatalf("%v: Retranslate differs from Translate in its %s", kind, typ)
		}
		before, after := versions(mustSnapshot(t, prev)), versions(mustSnapshot(t, fast))
		// gRPC clusters carry a ring size that follows the healthy
		// weight; Envoy's never change with weights.
		for typ, v := range before {
			moved := after[typ] != v
			switch {
			case typ == resource.EndpointType && !moved:
				t.Errorf("%v: EDS version unchanged", kind)
			case typ == resource.ListenerType, typ == resource.RouteType, typ == resource.ClusterType && kind == Envoy:
				if moved {
					t.Errorf("%v: %s version changed", kind, typ)
				}
			}
		}
		var found bool
		for _, cla := range fast.Endpoints {
			if cla.GetClusterName() != "outbound|8000||vllm.llm.svc.cluster.local" {
				continue
			}
			found = true
			if w := cla.GetEndpoints()[0].GetLbEndpoints()[0].GetLoadBalancingWeight().GetValue(); w != 5 {
				t.Errorf("%v: mesh endpoint weight %d, want 5", kind, w)
			}
		}
		if !found {
			t.Errorf("%v: no mesh assignment after the change", kind)
		}
	}
}

func TestMeshInvalid(t *testing.T) {
	pool := func(name, mesh string) fleet.Pool {
		return fleet.Pool{
			Name: name, Settings: fleet.Settings{
				Port: 10000 + uint32(len(name)),
				Hash: fleet.Hash{Keys: []fleet.HashKey{{Header: "x-session-id"}}},
				Mesh: &fleet.Mesh{ClusterName: mesh},
			},
		}
	}
	for _, tt := range []struct {
		name  string
		pools []fleet.Pool
		want  string
	}{
		{"empty", []fleet.Pool{pool("a", "")}, "empty mesh cluster name"},
		{"pool name", []fleet.Pool{pool("a", "bb"), pool("bb", "x")}, `mesh cluster name "bb" is a pool's name`},
		{"duplicate", []fleet.Pool{pool("a", "m"), pool("bb", "m")}, `already used by pool`},
		{"utf-8", []fleet.Pool{pool("a", "\xff")}, "invalid UTF-8"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := fleet.Prepare(fleet.Fleet{Pools: tt.pools})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Prepare: %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

// TestMeshResources checks what a mesh pool adds: one assignment per mesh
// cluster, sorted with the pools' own, valid, and accepted by Snapshot
// although no cluster of kvxds refers to it.
func TestMeshResources(t *testing.T) {
	f := loadFleet(t, "testdata/in/mesh.yaml")
	for _, kind := range Kinds {
		r := mustTranslate(t, f, kind)
		var names []string
		for _, cla := range r.Endpoints {
			validateDeep(t, cla)
			names = append(names, cla.GetClusterName())
		}
		want := []string{"chat", "gateway", "httproute/default/vllm/rule/0", "outbound|8000||vllm.llm.svc.cluster.local"}
		if !slices.Equal(names, want) {
			t.Errorf("%v: assignments %q, want %q", kind, names, want)
		}
		mustSnapshot(t, r)
		// Istio's tlsMode only where asked for.
		for _, cla := range r.Endpoints {
			for _, lle := range cla.GetEndpoints() {
				for _, e := range lle.GetLbEndpoints() {
					_, tls := e.GetMetadata().GetFilterMetadata()[TransportSocketMatchKey]
					if want := cla.GetClusterName() == want[3]; tls != want {
						t.Errorf("%v: %s: tlsMode metadata %v, want %v", kind, cla.GetClusterName(), tls, want)
					}
				}
			}
		}
	}
}
