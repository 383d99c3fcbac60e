package envoylb

import (
	"fmt"
	"slices"
	"testing"

	"github.com/kvxds/kvxds/fleet"
	"github.com/kvxds/kvxds/xds/translate"
)

// chatPool is a pool with the three key sources and replicas in every
// state kvxds serves.
func chatPool(alg fleet.Algorithm) fleet.Pool {
	p := fleet.Pool{
		Name: "chat", Settings: fleet.Settings{
			Port: 10000,
			Hash: fleet.Hash{
				Algorithm: alg,
				Keys:      []fleet.HashKey{{Header: "x-session-id"}, {Cookie: "sid"}, {QueryParameter: "session"}},
			},
		},
	}
	for i := range 8 {
		p.Endpoints = append(p.Endpoints, fleet.Endpoint{
			Host: fmt.Sprintf("10.0.0.%d", i+1), Port: 8000, Weight: uint32(1 + i%4),
			Locality: fleet.Locality{Zone: fmt.Sprintf("z%d", i%2)},
			HashKey:  fmt.Sprintf("replica-%d", i),
		})
	}
	return p
}

// router translates f for Envoy and routes with what would be served.
func router(t testing.TB, f fleet.Fleet) *Router {
	t.Helper()
	m, err := fleet.Prepare(f)
	if err != nil {
		t.Fatal(err)
	}
	res, err := translate.Translate(m, translate.Envoy)
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewRouter(res.Routes, res.Clusters, res.Endpoints)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestServedResources builds Envoy's table from the resources kvxds
// serves and checks it against one built from the fleet by hand, and
// routes requests through the served route.
func TestServedResources(t *testing.T) {
	for _, alg := range []fleet.Algorithm{fleet.Maglev, fleet.RingHash} {
		p := chatPool(alg)
		p.Endpoints[2].Health = fleet.Draining
		p.Endpoints[5].Health = fleet.Unhealthy
		r := router(t, fleet.Fleet{Pools: []fleet.Pool{p}})
		b := r.Balancer("chat")
		if b == nil {
			t.Fatalf("%s: no table for chat", alg)
		}
		wantAlg := Maglev
		if alg == fleet.RingHash {
			wantAlg = RingHash
		}
		if b.Config.Algorithm != wantAlg || b.Config.TableSize != DefaultTableSize || b.Config.MinRingSize != DefaultMinRingSize {
			t.Errorf("%s: config %+v", alg, b.Config)
		}
		if r.Balancer("chat/keyless") != nil {
			t.Errorf("%s: the keyless cluster hashes", alg)
		}

		// The same table from the fleet by hand, in the served host order
		// (localities sorted, then hash keys).
		var hosts []Host
		for _, z := range []int{0, 1} {
			for i, e := range p.Endpoints {
				if i%2 != z {
					continue
				}
				h := Host{Address: e.Host + ":8000", HashKey: e.HashKey, Weight: e.Weight, Locality: z}
				switch e.Health {
				case fleet.Draining:
					h.Health = Excluded
				case fleet.Unhealthy:
					h.Health = Unhealthy
				}
				hosts = append(hosts, h)
			}
		}
		if !slices.Equal(b.Hosts, hosts) {
			t.Fatalf("%s: hosts %+v, want %+v", alg, b.Hosts, hosts)
		}
		byHand := mustNew(t, hosts, Config{Algorithm: wantAlg})
		for i := range 5000 {
			h := uint64(i) * 0x9e3779b97f4a7c15
			if got, want := b.Owner(h), byHand.Owner(h); got != want {
				t.Fatalf("%s: hash %d → %d, by hand %d", alg, h, got, want)
			}
		}
		shares := b.Table.Shares()
		for i, h := range b.Hosts {
			if h.Health != Healthy && shares[i] != 0 {
				t.Errorf("%s: %s (%v) owns %.3f of the table", alg, h.HashKey, h.Health, shares[i])
			}
		}

		for _, tc := range []struct {
			name    string
			req     Request
			cluster string
			hash    uint64
		}{
			{"header", Request{Path: "/v1/chat", Headers: [][2]string{{"x-session-id", "s-1"}, {"cookie", "sid=c-1"}}}, "chat", seeded("s-1", 0)},
			{"cookie", Request{Path: "/v1/chat?session=q-1", Headers: [][2]string{{"cookie", "a=b; sid=c-1"}}}, "chat", seeded("c-1", 0)},
			{"query", Request{Path: "/v1/chat?x=1&session=q-1"}, "chat", seeded("q-1", 0)},
			{"no key", Request{Path: "/v1/chat", Headers: [][2]string{{"cookie", "other=1"}}}, "chat/keyless", 0},
		} {
			d, err := r.Pick("chat", &tc.req, nil)
			if err != nil {
				t.Fatalf("%s %s: %v", alg, tc.name, err)
			}
			if d.Cluster != tc.cluster || d.Hashed != (tc.hash != 0) || d.Hash != tc.hash {
				t.Errorf("%s %s: %+v, want cluster %s hash %d", alg, tc.name, d, tc.cluster, tc.hash)
			}
			if want := -1; tc.hash != 0 {
				want = b.Owner(tc.hash)
				if d.Host != want || b.Hosts[d.Host].Health != Healthy {
					t.Errorf("%s %s: host %d, want %d", alg, tc.name, d.Host, want)
				}
			} else if d.Host != want {
				t.Errorf("%s %s: host %d, want none", alg, tc.name, d.Host)
			}
		}
	}
}

// TestDrainIsRemoval checks that a draining replica leaves Envoy's table
// exactly as a removed one does: every hash lands on the same replica.
func TestDrainIsRemoval(t *testing.T) {
	for _, alg := range []fleet.Algorithm{fleet.Maglev, fleet.RingHash} {
		drained, removed := chatPool(alg), chatPool(alg)
		drained.Endpoints[3].Health = fleet.Draining
		removed.Endpoints = slices.Delete(removed.Endpoints, 3, 4)
		bd := router(t, fleet.Fleet{Pools: []fleet.Pool{drained}}).Balancer("chat")
		br := router(t, fleet.Fleet{Pools: []fleet.Pool{removed}}).Balancer("chat")
		for i := range 20000 {
			h := seeded(fmt.Sprint("session-", i), 0)
			if a, b := bd.Hosts[bd.Owner(h)].HashKey, br.Hosts[br.Owner(h)].HashKey; a != b {
				t.Fatalf("%s: session %d on %s when drained, %s when removed", alg, i, a, b)
			}
		}
	}
}

// TestServedGroupsAndBoundedLoad routes a tenant group's header values to
// the group's own table, and reads the pool's balance factor.
func TestServedGroupsAndBoundedLoad(t *testing.T) {
	p := chatPool(fleet.Maglev)
	p.Hash.BalanceFactor = 150
	p.Groups = []fleet.Group{{Name: "hot", Header: "x-tenant", Values: []string{"acme"}, Replicas: 2, Exclusive: true}}
	r := router(t, fleet.Fleet{Pools: []fleet.Pool{p}})
	b := r.Balancer("chat")
	if b.Config.HashBalanceFactor != 150 {
		t.Errorf("balance factor %d, want 150", b.Config.HashBalanceFactor)
	}
	group := p.Groups[0].ClusterName("chat")
	g := r.Balancer(group)
	if g == nil || len(g.Weights) != 2 {
		t.Fatalf("group table: %+v", g)
	}
	req := &Request{Path: "/", Headers: [][2]string{{"x-tenant", "acme"}, {"x-session-id", "s-1"}}}
	d, err := r.Pick("chat", req, nil)
	if err != nil || d.Cluster != group || d.Host != g.Owner(seeded("s-1", 0)) {
		t.Errorf("group request: %+v, %v", d, err)
	}
	req.Headers[0][1] = "other"
	if d, err := r.Pick("chat", req, nil); err != nil || d.Cluster != "chat" {
		t.Errorf("other tenant: %+v, %v", d, err)
	}

	// Bounded load spills a request off an owner with more than its slots
	// in flight, to a replica of the pool's table.
	owner := b.Owner(seeded("s-1", 0))
	load := &Load{Active: make([]uint32, len(b.Hosts))}
	load.Active[owner], load.Total = 10, 10
	d, err = r.Pick("chat", req, load)
	if err != nil || d.Host == owner || d.Host < 0 || b.Hosts[d.Host].Health != Healthy {
		t.Errorf("overloaded owner %d: %+v, %v", owner, d, err)
	}
}

// TestGRPCResources reads the cluster kvxds serves gRPC clients (legacy
// lb_policy RING_HASH, sized ring) as Envoy would.
func TestGRPCResources(t *testing.T) {
	p := chatPool(fleet.Maglev)
	m, err := fleet.Prepare(fleet.Fleet{Pools: []fleet.Pool{p}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := translate.Translate(m, translate.GRPC)
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewRouter(res.Routes, res.Clusters, res.Endpoints)
	if err != nil {
		t.Fatal(err)
	}
	b := r.Balancer("chat")
	var w uint64
	for _, e := range p.Endpoints {
		w += uint64(e.Weight)
	}
	if b.Config.Algorithm != RingHash || b.Config.MinRingSize != 64*w-1 || b.Config.MaxRingSize != 64*w-1 {
		t.Errorf("config %+v, want a ring of %d", b.Config, 64*w-1)
	}
	if n := len(b.Table.(*Ring).Hashes); uint64(n) < 64*w-1 || uint64(n) > 64*w {
		t.Errorf("ring of %d entries, want %d (or one more)", n, 64*w-1)
	}
}

// TestServedHotKeys routes through the routes kvxds serves for a hot-key
// table: the hot key's sub-keys land on several replicas, each sub-key
// always on one, and without a spread header on the key's home; a cold
// key and a request whose earlier key is present are not spread.
func TestServedHotKeys(t *testing.T) {
	p := chatPool(fleet.Maglev)
	p.Hash.Keys = []fleet.HashKey{{Header: "x-session-id"}, {Header: "x-tenant"}}
	hot := fleet.DefaultHotKeys()
	p.Hash.Hot = &hot
	p.HotKeys = []fleet.HotKey{{Key: 1, Value: "acme", Share: 0.5, Spread: 8}}
	r := router(t, fleet.Fleet{Pools: []fleet.Pool{p}})
	b := r.Balancer("chat")
	pick := func(headers ...[2]string) Decision {
		t.Helper()
		d, err := r.Pick("chat", &Request{Path: "/", Headers: headers}, nil)
		if err != nil || d.Cluster != "chat" || !d.Hashed {
			t.Fatalf("pick %v: %+v, %v", headers, d, err)
		}
		return d
	}
	home := b.Owner(seeded("acme", 0))
	if d := pick([2]string{"x-tenant", "acme"}); d.Host != home {
		t.Errorf("hot key without spread on %d, want its home %d", d.Host, home)
	}
	hosts := map[int]bool{}
	for v := range 256 {
		bits := fmt.Sprintf("%08b", v)
		d := pick([2]string{"x-tenant", "acme"}, [2]string{"x-kvxds-spread", bits})
		// Only the first log2(8) = 3 bits count.
		if again := pick([2]string{"x-tenant", "acme"}, [2]string{"x-kvxds-spread", bits[:3] + "11111"}); again.Host != d.Host {
			t.Errorf("spread %s on %d, %s11111 on %d", bits, d.Host, bits[:3], again.Host)
		}
		hosts[d.Host] = true
	}
	if len(hosts) < 3 {
		t.Errorf("hot key spread over %d replicas, want several", len(hosts))
	}
	cold := b.Owner(seeded("globex", 0))
	for v := range 8 {
		if d := pick([2]string{"x-tenant", "globex"}, [2]string{"x-kvxds-spread", fmt.Sprintf("%03b00000", v)}); d.Host != cold {
			t.Errorf("cold key on %d, want %d", d.Host, cold)
		}
	}
	// An earlier key wins the chain: no spread.
	s := b.Owner(seeded("s-1", 0))
	if d := pick([2]string{"x-session-id", "s-1"}, [2]string{"x-tenant", "acme"}, [2]string{"x-kvxds-spread", "10100000"}); d.Host != s {
		t.Errorf("session request on %d, want %d", d.Host, s)
	}
}

// TestRouterFrom keeps the table of a cluster whose Cluster and
// assignment are unchanged and builds anew one whose hosts changed.
func TestRouterFrom(t *testing.T) {
	p := chatPool(fleet.Maglev)
	p.Groups = []fleet.Group{{Name: "hot", Header: "x-tenant", Values: []string{"acme"}, Replicas: 2, Exclusive: true}}
	translated := func(p fleet.Pool) *translate.Resources {
		t.Helper()
		m, err := fleet.Prepare(fleet.Fleet{Pools: []fleet.Pool{p}})
		if err != nil {
			t.Fatal(err)
		}
		res, err := translate.Translate(m, translate.Envoy)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	res := translated(p)
	first, err := NewRouter(res.Routes, res.Clusters, res.Endpoints)
	if err != nil {
		t.Fatal(err)
	}
	group := p.Groups[0].ClusterName("chat")
	// The same resources translated again: every table kept.
	again := translated(p)
	same, err := NewRouterFrom(first, again.Routes, again.Clusters, again.Endpoints)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{"chat", group} {
		if same.Balancer(c) != first.Balancer(c) {
			t.Errorf("%s: an unchanged cluster's table was built again", c)
		}
	}
	// The replicas' weights changed: the pool's table is built anew and
	// equals one built from scratch.
	for i := range p.Endpoints {
		p.Endpoints[i].Weight++
	}
	changed := translated(p)
	next, err := NewRouterFrom(same, changed.Routes, changed.Clusters, changed.Endpoints)
	if err != nil {
		t.Fatal(err)
	}
	fresh, err := NewRouter(changed.Routes, changed.Clusters, changed.Endpoints)
	if err != nil {
		t.Fatal(err)
	}
	if next.Balancer("chat") == same.Balancer("chat") {
		t.Fatal("a changed cluster kept its old table")
	}
	for h := range uint64(2000) {
		if a, b := next.Balancer("chat").Owner(h*0x9e3779b97f4a7c15), fresh.Balancer("chat").Owner(h*0x9e3779b97f4a7c15); a != b {
			t.Fatalf("hash %d: owner %d, built from scratch %d", h, a, b)
		}
	}
}
