package translate

import (
	"testing"

	"github.com/kvxds/kvxds/fleet"
)

// named is what a translation serves: its clusters, the clusters its
// routes send requests to, and those only its staged routes name.
type named struct{ clusters, routed, staged map[string]bool }

func servedNames(t *testing.T, f fleet.Fleet, kind Kind) named {
	t.Helper()
	m, err := fleet.Prepare(f)
	if err != nil {
		t.Fatal(err)
	}
	r, err := Translate(m, kind)
	if err != nil {
		t.Fatal(err)
	}
	n := named{clusters: map[string]bool{}, routed: map[string]bool{}, staged: map[string]bool{}}
	for _, c := range r.Clusters {
		n.clusters[c.GetName()] = true
	}
	for _, rc := range r.Routes {
		for _, vh := range rc.GetVirtualHosts() {
			for _, rt := range vh.GetRoutes() {
				c := rt.GetRoute().GetCluster()
				if hs := rt.GetMatch().GetHeaders(); len(hs) == 1 && hs[0].GetName() == StagedHeader {
					n.staged[c] = true
					continue
				}
				n.routed[c] = true
			}
		}
	}
	return n
}

// A group or an adapter placed and removed in stages never has a route
// sending requests to a cluster that the previous push did not serve
// (for gRPC: that no route of the previous push named, since gRPC
// clients fetch only those), nor loses a cluster that the previous
// push's routes sent requests to; and each stage does what it says:
// adding and leaving serve the cluster without its route (for gRPC, named
// only by a staged route, after the catch-all).
func TestStagesMakeBeforeBreak(t *testing.T) {
	withGroup := func(stage string) fleet.Fleet {
		f := adapterFleet(6)
		f.Pools[0].Groups = []fleet.Group{{Name: "acme", Header: "x-tenant-id", Values: []string{"acme"}, Replicas: 2, Stage: stage}}
		return f
	}
	withAdapter := func(stage string) fleet.Fleet {
		return adapterFleet(6, fleet.Adapter{Name: "sql", Replicas: 2, Share: 0.2, Stage: stage})
	}
	for _, tc := range []struct {
		name    string
		cluster string
		staged  func(stage string) fleet.Fleet
	}{
		{"group", "chat/group/acme", withGroup},
		{"adapter", "chat/adapter/sql", withAdapter},
	} {
		t.Run(tc.name, func(t *testing.T) {
			steps := []struct {
				name            string
				f               fleet.Fleet
				cluster, routed bool
			}{
				{"absent", adapterFleet(6), false, false},
				{"adding", tc.staged(fleet.StageAdding), true, false},
				{"routed", tc.staged(""), true, true},
				{"leaving", tc.staged(fleet.StageLeaving), true, false},
				{"gone", adapterFleet(6), false, false},
			}
			for _, kind := range Kinds {
				var prev named
				for i, s := range steps {
					n := servedNames(t, s.f, kind)
					// grpc-js serves no group or adapter clusters: their
					// routes go to the pool's.
					wantCluster, wantRouted := s.cluster && kind != GRPCJS, s.routed && kind != GRPCJS
					wantStaged := wantCluster && !wantRouted && kind != Envoy
					if n.clusters[tc.cluster] != wantCluster || n.routed[tc.cluster] != wantRouted || n.staged[tc.cluster] != wantStaged {
						t.Errorf("%v %s: cluster served %v, routed %v, staged %v; want %v, %v, %v", kind, s.name,
							n.clusters[tc.cluster], n.routed[tc.cluster], n.staged[tc.cluster], wantCluster, wantRouted, wantStaged)
					}
					if i == 0 {
						prev = n
						continue
					}
					for c := range n.routed {
						if !prev.clusters[c] || kind != Envoy && !prev.routed[c] && !prev.staged[c] {
							t.Errorf("%v %s: a route sends requests to %q, which the previous push did not serve or name", kind, s.name, c)
						}
					}
					for c := range prev.routed {
						if !n.clusters[c] || kind != Envoy && !n.routed[c] && !n.staged[c] {
							t.Errorf("%v %s: cluster %q removed, or named by no route, while the previous push routed to it", kind, s.name, c)
						}
					}
					prev = n
				}
			}
		})
	}
	// Adding without staging is what the stages avoid: the check above
	// fails on it.
	a, b := servedNames(t, adapterFleet(6), Envoy), servedNames(t, withAdapter(""), Envoy)
	if !b.routed["chat/adapter/sql"] || a.clusters["chat/adapter/sql"] {
		t.Error("an unstaged adapter should be routed in the push that adds its cluster")
	}
}
