package clients_test

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/kvxds/kvxds/fleet"
	"github.com/kvxds/kvxds/xds/clients"
	"github.com/kvxds/kvxds/xds/ringhash"
	"github.com/kvxds/kvxds/xds/translate"
)

// pool is one hash pool of n replicas of weights 1..4 over two zones,
// placed by a hash_key that is not their address, one of them draining.
func pool(t *testing.T, n int, h fleet.Hash) fleet.Model {
	t.Helper()
	h.Keys = []fleet.HashKey{{Header: "x-session-id"}}
	p := fleet.Pool{Name: "chat", Settings: fleet.Settings{Port: 10000, Hash: h,
		Groups: []fleet.Group{{Name: "acme", Header: "x-tenant", Values: []string{"acme"}, Replicas: 3}}}}
	for i := range n {
		// Addresses sort in the reverse of the hash keys.
		p.Endpoints = append(p.Endpoints, fleet.Endpoint{
			Host: fmt.Sprintf("10.0.0.%d", 200-i), Port: 8000, Weight: uint32(1 + i%4),
			HashKey: fmt.Sprintf("vllm-%02d", i), Locality: fleet.Locality{Zone: string(rune('a' + i%2))},
		})
	}
	p.Endpoints[3].Health = fleet.Draining
	m, err := fleet.Prepare(fleet.Fleet{Pools: []fleet.Pool{p}})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func served(t *testing.T, m fleet.Model, kind translate.Kind) *clients.Served {
	t.Helper()
	r, err := translate.Translate(m, kind)
	if err != nil {
		t.Fatal(err)
	}
	return clients.NewServed(r.Clusters, r.Endpoints)
}

// Envoy's table is envoylb's balancer over the served cluster and
// assignment, hosts by hash_key in the assignment's order (localities
// sorted).
func TestEnvoy(t *testing.T) {
	for _, h := range []fleet.Hash{{}, {Algorithm: fleet.RingHash, EntriesPerWeight: 64}} {
		m := pool(t, 12, h)
		tb, err := served(t, m, translate.Envoy).Table(clients.Envoy, "chat", 0)
		if err != nil {
			t.Fatal(err)
		}
		if tb.Maglev != (h.Algorithm != fleet.RingHash) || tb.Empty() {
			t.Fatalf("%s: maglev %v, empty %v", h.Algorithm, tb.Maglev, tb.Empty())
		}
		// Zone a first, then b, each in hash-key order.
		var want []string
		for z := range 2 {
			for i := z; i < 12; i += 2 {
				want = append(want, fmt.Sprintf("vllm-%02d", i))
			}
		}
		if !slices.Equal(tb.Hosts, want) {
			t.Errorf("hosts %v, want %v", tb.Hosts, want)
		}
		shares := tb.Shares()
		var sum float64
		for i, s := range shares {
			sum += s
			if (tb.Hosts[i] == "vllm-03") != (s == 0) {
				t.Errorf("%s: share %g", tb.Hosts[i], s)
			}
		}
		if math.Abs(sum-1) > 1e-9 {
			t.Errorf("shares sum to %g", sum)
		}
		if !tb.Maglev {
			// entries_per_weight: 64 entries per unit of healthy weight,
			// one less in all.
			if w := fleet.RingWeight(m.Fleet().Pools[0].Endpoints); uint64(len(tb.Hashes)) != 64*w-1 {
				t.Errorf("%d entries for healthy weight %d", len(tb.Hashes), w)
			}
		}
	}
}

// gRPC's ring is ringhash's over the healthy endpoints by hash_key;
// grpc-js's by address, counted in the assignment's order; and grpc-js
// has no group tables.
func TestGRPC(t *testing.T) {
	m := pool(t, 12, fleet.Hash{})
	p := m.Fleet().Pools[0]
	var byKey, byAddr []ringhash.Endpoint
	var weight uint64
	for _, e := range p.Endpoints {
		if e.Health == fleet.Healthy {
			byKey = append(byKey, ringhash.Endpoint{HashKey: e.HashKey, Weight: uint64(e.Weight)})
			byAddr = append(byAddr, ringhash.Endpoint{HashKey: e.Address(), Weight: uint64(e.Weight)})
			weight += uint64(e.Weight)
		}
	}
	size := fleet.GRPCRingSize(weight, 0)
	for _, tc := range []struct {
		client clients.Client
		kind   translate.Kind
		ring   *ringhash.Ring
		eps    []ringhash.Endpoint
	}{
		{clients.GRPC, translate.GRPC, ringhash.Build(byKey, size, size), byKey},
		{clients.GRPCJS, translate.GRPCJS, ringhash.BuildOrdered(byAddr, size, size), byAddr},
	} {
		s := served(t, m, tc.kind)
		tb, err := s.Table(tc.client, "chat", 0)
		if err != nil {
			t.Fatal(err)
		}
		if tb.Maglev || len(tb.Hashes) != len(tc.ring.Entries) {
			t.Fatalf("%v: %d entries, want %d", tc.client, len(tb.Hashes), len(tc.ring.Entries))
		}
		for i, e := range tc.ring.Entries {
			if tb.Hashes[i] != e.Hash || tb.Hosts[tb.Owners[i]] != byKey[e.Endpoint].HashKey {
				t.Fatalf("%v: entry %d differs", tc.client, i)
			}
		}
		_, err = s.Table(tc.client, "chat/keyless", 0)
		if tc.client == clients.GRPC && !errors.Is(err, clients.ErrNotHashing) {
			t.Errorf("%v: keyless cluster: %v", tc.client, err)
		}
		_, err = s.Table(tc.client, "chat/group/acme", 0)
		if (err == nil) != (tc.client == clients.GRPC) {
			t.Errorf("%v: group cluster: %v", tc.client, err)
		}
	}
	// A cap below the cluster's size clamps the ring.
	tb, err := served(t, m, translate.GRPC).Table(clients.GRPC, "chat", 100)
	if err != nil || len(tb.Hashes) != 100 {
		t.Errorf("capped at 100: %d entries, %v", len(tb.Hashes), err)
	}
	// A client served without a ring hash has no table.
	if _, err := served(t, m, translate.GRPCNoHash).Table(clients.GRPC, "chat", 0); !errors.Is(err, clients.ErrNotHashing) {
		t.Errorf("no hash: %v", err)
	}
}

// A cluster of load_balancing_policy [Maglev, RingHash] (Envoy's): gRPC
// skips Maglev and takes the typed RingHash.
func TestGRPCTypedRingHash(t *testing.T) {
	m := pool(t, 6, fleet.Hash{})
	s := served(t, m, translate.Envoy)
	tb, err := s.Table(clients.GRPC, "chat", 0)
	if err != nil {
		t.Fatal(err)
	}
	// No sizes: gRPC's defaults, 1,024 at least, within the cap.
	if len(tb.Hashes) < 1024 || len(tb.Hashes) > ringhash.DefaultCap {
		t.Errorf("%d entries", len(tb.Hashes))
	}
}
