package translate

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"

	"github.com/kvxds/kvxds/fleet"
)

// byName maps each resource of a kind's translation to its version.
func byName(t *testing.T, f fleet.Fleet, kind Kind) map[string]map[string]string {
	t.Helper()
	m, err := fleet.Prepare(f)
	if err != nil {
		t.Fatal(err)
	}
	r, err := Translate(m, kind)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]string{"cds": {}, "rds": {}, "eds": {}, "lds": {}}
	for _, c := range r.Clusters {
		out["cds"][c.GetName()] = Version([]proto.Message{c})
	}
	for _, c := range r.Routes {
		out["rds"][c.GetName()] = Version([]proto.Message{c})
	}
	for _, c := range r.Endpoints {
		out["eds"][c.GetClusterName()] = Version([]proto.Message{c})
	}
	for _, c := range r.Listeners {
		out["lds"][c.GetName()] = Version([]proto.Message{c})
	}
	return out
}

// updates counts, per type, the resources a change adds, removes or
// changes: what a delta client receives (a state-of-the-world client
// receives every resource of each changed type).
func updates(a, b map[string]map[string]string) map[string]int {
	out := map[string]int{}
	for typ, as := range a {
		for n, v := range as {
			if b[typ][n] != v {
				out[typ]++
			}
		}
		for n := range b[typ] {
			if _, ok := as[n]; !ok {
				out[typ]++
			}
		}
	}
	return out
}

// adapterFleet is a pool of n replicas placing adapters with free slots.
func adapterFleet(n int, adapters ...fleet.Adapter) fleet.Fleet {
	p := fleet.Pool{Name: "chat", Settings: fleet.Settings{Port: 10000,
		Hash: fleet.Hash{Keys: []fleet.HashKey{{Header: "x-session-id"}}},
		LoRA: &fleet.Adapters{MaxLoRA: 8}}, Adapters: adapters}
	for i := range n {
		p.Endpoints = append(p.Endpoints, fleet.Endpoint{Host: fmt.Sprintf("10.0.0.%d", i+1), Port: 8000, HashKey: fmt.Sprintf("r-%d", i)})
	}
	return fleet.Fleet{Pools: []fleet.Pool{p}}
}

// What each kind of placement change costs each kind of client, in
// resources changed per type: an adapter appearing or leaving is one
// cluster, one route configuration and one assignment (grpc-js: one
// route configuration); a member leaving or draining changes the
// assignments of the pool and of the adapters that had it (for gRPC also
// the pool's cluster, whose ring follows the pool's healthy weight; an
// adapter's ring keeps its size, since a filler takes the member's
// place); an adapter's replicas decided anew change its assignment (and
// its gRPC cluster's ring size).
func TestAdapterUpdateCost(t *testing.T) {
	base := []fleet.Adapter{{Name: "a", Replicas: 2, Share: 0.3}, {Name: "b", Replicas: 3, Share: 0.2}, {Name: "c", Replicas: 1, Share: 0.1}}
	before := adapterFleet(8, base...)
	// The members of each adapter, to find one that only "a" holds.
	m, _ := fleet.Prepare(before)
	var onlyA int
	for i := range 8 {
		id := fmt.Sprintf("r-%d", i)
		holders := 0
		inA := false
		for _, ap := range m.Plan("chat").Adapters {
			if slices.ContainsFunc(ap.Members, func(e fleet.Endpoint) bool { return e.HashKey == id }) {
				holders++
				inA = inA || ap.Name == "a"
			}
		}
		if holders == 1 && inA {
			onlyA = i
			break
		}
	}
	leave := adapterFleet(8, base...)
	leave.Pools[0].Endpoints = slices.Delete(leave.Pools[0].Endpoints, onlyA, onlyA+1)
	drain := adapterFleet(8, base...)
	drain.Pools[0].Endpoints[onlyA].Health = fleet.Draining
	nonMember := adapterFleet(9, base...)
	for _, tc := range []struct {
		name  string
		after fleet.Fleet
		want  map[Kind]map[string]int
	}{
		// Placed and removed in two steps each (fleet.StageAdding): the
		// cluster first, then its route; the route first, then its
		// cluster.
		{"adapter placed", adapterFleet(8, append(slices.Clone(base), fleet.Adapter{Name: "d", Replicas: 2, Share: 0.05, Stage: fleet.StageAdding})...), map[Kind]map[string]int{
			Envoy: {"cds": 1, "eds": 1}, GRPC: {"cds": 1, "rds": 1, "eds": 1}, GRPCJS: {}}},
		{"adapter leaving", adapterFleet(8, base[0], base[1], fleet.Adapter{Name: "c", Replicas: 1, Share: 0.1, Stage: fleet.StageLeaving}), map[Kind]map[string]int{
			Envoy: {"rds": 1}, GRPC: {"rds": 1}, GRPCJS: {"rds": 1}}},
		{"replicas decided anew", adapterFleet(8, fleet.Adapter{Name: "a", Replicas: 3, Share: 0.3}, base[1], base[2]), map[Kind]map[string]int{
			Envoy: {"eds": 1}, GRPC: {"cds": 1, "eds": 1}, GRPCJS: {}}},
		{"a member of one adapter leaves", leave, map[Kind]map[string]int{
			Envoy: {"eds": 2}, GRPC: {"cds": 1, "eds": 2}, GRPCJS: {"cds": 1, "eds": 1}}},
		{"a member of one adapter drains", drain, map[Kind]map[string]int{
			Envoy: {"eds": 2}, GRPC: {"cds": 1, "eds": 2}, GRPCJS: {"cds": 1, "eds": 1}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, kind := range []Kind{Envoy, GRPC, GRPCJS} {
				got := updates(byName(t, before, kind), byName(t, tc.after, kind))
				t.Logf("%s: %v", kind, got)
				want := tc.want[kind]
				for _, typ := range []string{"lds", "rds", "cds", "eds"} {
					if got[typ] != want[typ] {
						t.Errorf("%s: %d %s updates, want %d (all: %v)", kind, got[typ], typ, want[typ], got)
					}
				}
			}
		})
	}
	// The second steps: a route added to a served cluster, a cluster
	// removed after its route (for gRPC with the staged route that named
	// it meanwhile).
	placed := adapterFleet(8, append(slices.Clone(base), fleet.Adapter{Name: "d", Replicas: 2, Share: 0.05, Stage: fleet.StageAdding})...)
	routed := adapterFleet(8, append(slices.Clone(base), fleet.Adapter{Name: "d", Replicas: 2, Share: 0.05})...)
	leaving := adapterFleet(8, base[0], base[1], fleet.Adapter{Name: "c", Replicas: 1, Share: 0.1, Stage: fleet.StageLeaving})
	for _, kind := range []Kind{Envoy, GRPC} {
		if got := updates(byName(t, placed, kind), byName(t, routed, kind)); got["rds"] != 1 || got["cds"]+got["eds"]+got["lds"] != 0 {
			t.Errorf("%s: routing a placed adapter: %v, want 1 rds", kind, got)
		}
		wantRDS := map[Kind]int{Envoy: 0, GRPC: 1}[kind]
		if got := updates(byName(t, leaving, kind), byName(t, adapterFleet(8, base[:2]...), kind)); got["cds"] != 1 || got["eds"] != 1 || got["rds"] != wantRDS || got["lds"] != 0 {
			t.Errorf("%s: removing a leaving adapter: %v, want 1 cds, 1 eds, %d rds", kind, got, wantRDS)
		}
	}
	// A replica joining that no adapter ranks among its members changes
	// only the pool's own resources.
	got := updates(byName(t, before, Envoy), byName(t, nonMember, Envoy))
	if got["eds"] > 1+len(base) || got["cds"] != 0 || got["rds"] != 0 {
		t.Errorf("a joiner: %v", got)
	}
	t.Logf("a replica joins (envoy): %v", got)
}

// Where Envoy picks the replica (balance_on = "prompt_bytes"), Envoy
// gets no adapter routes or clusters: every route carries the pool's
// pick table with each adapter's replicas and ranking, and the pick
// filter reads the adapter header. gRPC clients keep the adapters'
// routes and clusters.
func TestAdapterPickRoutes(t *testing.T) {
	f := adapterFleet(4, fleet.Adapter{Name: "sql", Replicas: 1, Share: 0.2}, fleet.Adapter{Name: "chat-v2", Replicas: 2, Share: 0.1})
	p := &f.Pools[0]
	p.Hash.BalanceFactor, p.Hash.BalanceOn, p.Hash.LoadInterval = 200, fleet.BalanceOnPromptBytes, fleet.DefaultLoadInterval
	// The load logs saw adapters in flight on two replicas (more than
	// its slots on one: the table lists twice its slots), and the
	// engine of another reports its own slots.
	p.LoadAt = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	p.Endpoints[0].InFlightAdapters = "chat-v2 sql"
	p.Endpoints[2].InFlightAdapters = "a b c d e f g h i j k l m n o p q r"
	p.Endpoints[3].MaxLoRA = 2
	m, err := fleet.Prepare(f)
	if err != nil {
		t.Fatal(err)
	}
	for _, kind := range Kinds {
		r, err := Translate(m, kind)
		if err != nil {
			t.Fatal(err)
		}
		routes := r.Routes[0].GetVirtualHosts()[0].GetRoutes()
		adapterRoutes := 0
		for _, rt := range routes {
			for _, h := range rt.GetMatch().GetHeaders() {
				if h.GetName() == "x-kvxds-adapter" {
					adapterRoutes++
				}
			}
		}
		adapterClusters := 0
		for _, c := range r.Clusters {
			if strings.Contains(c.GetName(), fleet.AdapterInfix) {
				adapterClusters++
			}
		}
		want := map[Kind]int{GRPC: 2, GRPCNoHash: 2, GRPCJS: 0}[kind]
		if adapterClusters != want || (adapterRoutes == 2) != (kind != Envoy) {
			t.Errorf("%v: %d adapter routes, %d adapter clusters; want %d clusters and routes but on Envoy", kind, adapterRoutes, adapterClusters, want)
		}
		if kind != Envoy {
			continue
		}
		for _, rt := range routes {
			md := rt.GetMetadata().GetFilterMetadata()[PickFilterName].GetFields()
			ads := md["adapters"].GetStructValue().GetFields()
			for name, members := range map[string]int{"sql": 1, "chat-v2": 2} {
				e := ads[name].GetStringValue()
				bar := strings.IndexByte(e, '|')
				if bar != 3*members || len(e)-bar-1 != 3*(4-members) {
					t.Errorf("envoy: adapter %s's entry %q: want %d members, then the other %d replicas", name, e, members, 4-members)
				}
			}
			// Hosts in address order, as the endpoints are.
			if got, want := md["adapter_slots"].GetStringValue(), "008008008002"; got != want {
				t.Errorf("envoy: adapter_slots %q, want %q", got, want)
			}
			if got, want := md["running"].GetStringValue(), "chat-v2 sql\t\ta b c d e f g h i j k l m n o p\t"; got != want {
				t.Errorf("envoy: running %q, want %q", got, want)
			}
		}
		l, err := buildListener(&m.Fleet().Pools[0], kind)
		if err != nil {
			t.Fatal(err)
		}
		text := prototext.Format(l)
		if !strings.Contains(text, `ADAPTER_HEADER = \"x-kvxds-adapter\"`) {
			t.Error("envoy: the pick filter does not read the adapter header")
		}
		// The load log's config, up to the next logger's.
		logCfg, _, _ := strings.Cut(text[strings.Index(text, `"kvxds-load/chat"`)+1:], "log_name:")
		if !regexp.MustCompile(`additional_request_headers_to_log:\s+"x-kvxds-adapter"`).MatchString(logCfg) {
			t.Errorf("envoy: the load log does not carry the adapter header:\n%s", logCfg)
		}
	}
}
