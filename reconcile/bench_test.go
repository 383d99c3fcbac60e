package reconcile

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/kvxds/kvxds/discovery"
	"github.com/kvxds/kvxds/weights"
	"github.com/kvxds/kvxds/xds/fleet"
	"github.com/kvxds/kvxds/xds/server"
)

// BenchmarkPush is one push of a 1,000-replica pool after one replica
// changed (a pod replaced, as in a rolling deploy): join, prepare once,
// translate for every kind of client and swap the snapshots in.
//
// BenchmarkPushCost is the same push followed by counting its cost
// (recordCosts: every client's tables built and compared with the last
// push's), as the reconciler does after handing the model to the server.
func BenchmarkPush(b *testing.B) { benchPush(b, false) }

func BenchmarkPushCost(b *testing.B) { benchPush(b, true) }

func benchPush(b *testing.B, cost bool) {
	for _, n := range []int{100, 1000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			p := mustParse(b, `
pool "chat" {
  port = 10000
  hash {
    key { header = "x-session-id" }
  }
}
`)
			discovered := [2][]discovery.PoolTargets{}
			for v := range discovered {
				var ts []fleet.Endpoint
				for i := range n {
					second := 1
					if v == 1 && i == 0 {
						second = 2 // the replaced pod's new address
					}
					host := fmt.Sprintf("10.%d.%d.%d", second, i/250, i%250)
					ts = append(ts, fleet.Endpoint{Host: host, Port: 8000, HashKey: fmt.Sprintf("vllm-%d", i), Locality: fleet.Locality{Zone: "a"}})
				}
				discovered[v] = []discovery.PoolTargets{{Pool: "chat", Targets: ts}}
			}
			decisions := map[string]map[string]weights.Decision{"chat": {}}
			for i := range n {
				decisions["chat"][fmt.Sprintf("vllm-%d", i)] = weights.Decision{Weight: uint32(1 + i%4)}
			}
			s := server.New(server.Options{})
			ctx := context.Background()
			r := New(Options{})
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				i++
				m, err := fleet.Prepare(Join(p, discovered[i%2], decisions))
				if err != nil {
					b.Fatal(err)
				}
				if err := s.Update(ctx, m); err != nil {
					b.Fatal(err)
				}
				if cost {
					r.recordCosts(m, time.Time{})
				}
			}
		})
	}
}
