package server

import (
	"context"
	"fmt"
	"testing"

	"github.com/kvxds/kvxds/fleet"
)

// benchFleet is 10 pools × 100 endpoints; shift changes every weight.
func benchFleet(shift uint32) fleet.Fleet {
	var f fleet.Fleet
	for p := range 10 {
		pool := fleet.Pool{
			Name: fmt.Sprintf("pool-%02d", p), Settings: fleet.Settings{
				Port: 10000 + uint32(p),
				Hash: fleet.Hash{Algorithm: fleet.Maglev, BalanceFactor: 150, Keys: []fleet.HashKey{{Header: "x-session-id"}, {Header: "x-tenant-id"}}},
			},
		}
		for e := range 100 {
			pool.Endpoints = append(pool.Endpoints, fleet.Endpoint{
				Host: fmt.Sprintf("10.%d.%d.%d", p, e/250, e%250+1), Port: 8000,
				Weight: 1 + (uint32(e)+shift)%7, HashKey: fmt.Sprintf("pool-%02d-replica-%03d", p, e),
			})
		}
		f.Pools = append(f.Pools, pool)
	}
	return f
}

// BenchmarkUpdateFull is a policy change: every resource of both client
// kinds rebuilt, versioned and set in the cache.
func BenchmarkUpdateFull(b *testing.B) {
	s := New(Options{})
	f1 := benchFleet(0)
	f1.Pools[0].Hash.BalanceFactor = 200
	fleets := [2]fleet.Model{prepared(b, benchFleet(0)), prepared(b, f1)}
	ctx := context.Background()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		if err := s.Update(ctx, fleets[i%2]); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkUpdateWeightsOnly is a weight change on every endpoint: only
// endpoint assignments are rebuilt.
func BenchmarkUpdateWeightsOnly(b *testing.B) {
	s := New(Options{})
	fleets := [2]fleet.Model{prepared(b, benchFleet(0)), prepared(b, benchFleet(1))}
	ctx := context.Background()
	if err := s.Update(ctx, fleets[0]); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		if err := s.Update(ctx, fleets[i%2]); err != nil {
			b.Fatal(err)
		}
	}
}

func prepared(b *testing.B, f fleet.Fleet) fleet.Model {
	m, err := fleet.Prepare(f)
	if err != nil {
		b.Fatal(err)
	}
	return m
}
