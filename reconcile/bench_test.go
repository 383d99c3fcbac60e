package reconcile

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/kvxds/kvxds/discovery"
	"github.com/kvxds/kvxds/fleet"
	"github.com/kvxds/kvxds/hotkeys"
	"github.com/kvxds/kvxds/weights"
	"github.com/kvxds/kvxds/xds/server"
	"github.com/kvxds/kvxds/xds/translate"
)

// BenchmarkPush is one push of a 100- or 1,000-replica pool after one
// replica changed: a pod replaced (a new address, the same identity, as
// in a rolling deploy) or one weight step, or, in a pool keyed on
// prompt_prefix (which bounds prompt bytes by default), after its
// Envoys' bytes in flight moved (a load push, once per load interval
// while the pool's load moves): join, prepare once, translate
// for every kind of client and swap the snapshots in, then hand the model
// to the goroutine that counts its cost, which runs meanwhile.
// BenchmarkPushCounted counts each push's cost before the next (every
// client's tables built and compared with the last push's): what counting
// takes. BenchmarkPushUncounted counts nothing.
func BenchmarkPush(b *testing.B) { benchPush(b, countBackground) }

func BenchmarkPushCounted(b *testing.B) { benchPush(b, countInline) }

func BenchmarkPushUncounted(b *testing.B) { benchPush(b, countNone) }

const (
	countBackground = iota
	countInline
	countNone
)

func benchPush(b *testing.B, count int) {
	for _, change := range []string{"replaced", "weight", "load"} {
		for _, n := range []int{100, 1000} {
			b.Run(fmt.Sprintf("%s/%d", change, n), func(b *testing.B) {
				key := `header = "x-session-id"`
				if change == "load" {
					key = `prompt_prefix = 2048`
				}
				p := mustParse(b, `
pool "chat" {
  port = 10000
  hash {
    key { `+key+` }
  }
}
`)
				loads := [2]Loads{}
				discovered := [2][]discovery.PoolTargets{}
				decisions := [2]map[string]map[string]weights.Decision{}
				for v := range discovered {
					var ts []fleet.Endpoint
					for i := range n {
						second := 1
						if v == 1 && i == 0 && change == "replaced" {
							second = 2 // the replaced pod's new address
						}
						host := fmt.Sprintf("10.%d.%d.%d", second, i/250, i%250)
						ts = append(ts, fleet.Endpoint{Host: host, Port: 8000, HashKey: fmt.Sprintf("vllm-%d", i), Locality: fleet.Locality{Zone: "a"}})
					}
					if change == "load" {
						l := PoolLoad{At: time.Date(2026, 12, 3, 10, 0, v, 0, time.UTC), Bytes: map[string]uint64{}}
						for i, e := range ts {
							l.Bytes[e.Address()] = uint64(100_000 + 7_919*((i+v)%97))
						}
						loads[v] = Loads{"chat": l}
					}
					discovered[v] = []discovery.PoolTargets{{Pool: "chat", Targets: ts}}
					decisions[v] = map[string]map[string]weights.Decision{"chat": {}}
					for i := range n {
						w := uint32(1 + i%4)
						if v == 1 && i == 0 && change == "weight" {
							w++
						}
						decisions[v]["chat"][fmt.Sprintf("vllm-%d", i)] = weights.Decision{Weight: w}
					}
				}
				s := server.New(server.Options{})
				ctx := context.Background()
				r := New(Options{})
				defer r.Close()
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					i++
					m, err := fleet.Prepare(WithLoad(Join(p, discovered[i%2], decisions[i%2]), loads[i%2]))
					if err != nil {
						b.Fatal(err)
					}
					if err := s.Update(ctx, m); err != nil {
						b.Fatal(err)
					}
					// As a push does: the tables are built from the
					// resources the server serves.
					switch count {
					case countBackground:
						r.countServed(m, servedBy(s), time.Time{})
					case countInline:
						r.recordServed(m, servedBy(s), time.Time{})
					}
				}
			})
		}
	}
}

// BenchmarkServedShares is a push's table shares at 1,000 replicas, from
// the resources the push serves (BenchmarkStatus/table_shares translates
// them first).
func BenchmarkServedShares(b *testing.B) {
	in := benchStatusInput(b, 1000)
	m, err := fleet.Prepare(in.fleet)
	if err != nil {
		b.Fatal(err)
	}
	s := server.New(server.Options{})
	if err := s.Update(context.Background(), m); err != nil {
		b.Fatal(err)
	}
	sv := servedBy(s).of(translate.GRPC)
	b.ReportAllocs()
	for b.Loop() {
		servedShares(m, sv)
	}
}

// BenchmarkHotKeyHomes is what pools with hot keys on (the default for
// hashing pools) spend to tell requests sent away from their key's first
// replica, at 100 and 1,000 replicas: "push" is a push's share when the
// pool's cluster and replicas did not change (the balancer is kept),
// "changed" when they did (the balancer left for later), "first" the
// first logged request after a change (the balancer built: the pool's
// Maglev table with every replica in it).
func BenchmarkHotKeyHomes(b *testing.B) {
	for _, n := range []int{100, 1000} {
		in := benchStatusInput(b, n)
		m, err := fleet.Prepare(in.fleet)
		if err != nil {
			b.Fatal(err)
		}
		if m.Fleet().Pools[0].Hash.Hot == nil {
			b.Fatal("hot keys are off")
		}
		res, err := translate.Translate(m, translate.Envoy)
		if err != nil {
			b.Fatal(err)
		}
		names := []string{"chat"}
		// 1,024 keys under Zipf, a fifth of the requests on one.
		set := fleet.DefaultHotKeys()
		now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
		sk := hotkeys.NewSketch(time.Minute)
		for i := range 20000 {
			v := fmt.Sprintf("key-%d", int(1024*math.Pow(float64(i%997+1)/997, 3)))
			if i%5 == 0 {
				v = "acme"
			}
			sk.Observe(0, v, now)
		}
		built := (&hotPool{homes: homeTables(res, names, nil)}).home("chat")
		kept := homeTables(res, names, nil)
		kept["chat"].first("acme")
		again, err := translate.Translate(m, translate.Envoy)
		if err != nil {
			b.Fatal(err)
		}
		for _, bc := range []struct {
			name string
			run  func() bool
		}{
			{"push", func() bool { return homeTables(again, names, kept)["chat"].bal == kept["chat"].bal }},
			{"changed", func() bool { return homeTables(res, names, nil)["chat"] != nil }},
			{"first", func() bool { return homeTables(res, names, nil)["chat"].first("acme") >= 0 }},
			// A decision with crowded replicas' keys spread, from a full
			// sketch: the served table is built once per push, at the
			// first decision after it.
			{"decide", func() bool {
				hp := &hotPool{homes: homeTables(res, names, nil)}
				sk.Observe(0, "acme", now)
				return len(sk.Decide(now, n, &set, nil, hp.home("chat"))) > 0
			}},
			{"decide, table built", func() bool {
				sk.Observe(0, "acme", now)
				return len(sk.Decide(now, n, &set, nil, built)) > 0
			}},
		} {
			b.Run(fmt.Sprintf("%s/%d", bc.name, n), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if !bc.run() {
						b.Fatal("no home table")
					}
				}
			})
		}
	}
}
