package e2e

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvxds/kvxds/status"
)

// stagesBlock scrapes the engines often and decides adapter placements
// every second, from what the engines report in flight, forgotten over a
// half-life of a second.
const stagesBlock = `  metrics {
    engine      = "vllm"
    interval    = "500ms"
    timeout     = "400ms"
    stale_after = "10s"
  }
  adapters {
    base_models = ["llama-3.1-8b"]
    max_lora    = 4
    interval    = "1s"
    half_life   = "1s"
  }
`

// adapterStatus is pool chat's placed adapters as kvxds reports them.
func adapterStatus(t *testing.T, adminAddr string) []status.Adapter {
	t.Helper()
	resp, err := http.Get("http://" + adminAddr + "/api/v1/status")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st status.Status
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	for _, p := range st.Pools {
		if p.Name == "chat" && p.Adapters != nil {
			return p.Adapters.Adapters
		}
	}
	return nil
}

// Adapters placed and removed while a grpc-go client keeps calling with
// them: no call fails. Each adapter's cluster is served before its route
// (named meanwhile only by a staged route, so that the client builds its
// balancer), and its route goes before its cluster. While routed, an
// adapter's calls land on its members.
func TestAdaptersMakeBeforeBreak(t *testing.T) {
	bs := startBackends(t, 6)
	var all []member
	for _, b := range bs {
		all = append(all, member{b, 1})
	}
	path, xdsAddr, adminAddr := policyFile(t)
	writeAtomic(t, path, policyTextWith(xdsAddr, adminAddr, all, stagesBlock))
	k := startInProcess(t, path, xdsAddr, adminAddr)
	defer k.stop()
	cl := newGoClient(t, xdsAddr)
	ss := sessions(100)
	// Served: engine metrics weigh the replicas, so only that calls work.
	routeEach(t, cl, sessionCalls(ss[:10]))

	names := []string{"lora-a", "lora-b", "lora-c", "lora-d"}
	var calls, failed atomic.Int64
	var mu sync.Mutex
	var errs []string
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := w; ; i += 4 {
				select {
				case <-stop:
					return
				default:
				}
				batch := make([][]string, 16)
				for j := range batch {
					n := i*16 + j
					batch[j] = []string{"x-session-id", ss[n%len(ss)], "x-kvxds-adapter", names[n%len(names)]}
				}
				_, es := cl.callMany(batch)
				for _, err := range es {
					calls.Add(1)
					if err != nil {
						failed.Add(1)
						mu.Lock()
						if len(errs) < 5 {
							errs = append(errs, err.Error())
						}
						mu.Unlock()
					}
				}
			}
		})
	}

	// report makes the first three engines report adapters in flight.
	report := func(adapters ...string) {
		for _, b := range bs[:3] {
			b.setAdapters(strings.Join(adapters, ","))
		}
	}
	// await waits until exactly the adapters want are placed and routed.
	stagesSeen := map[string]bool{}
	await := func(want ...string) []status.Adapter {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			as := adapterStatus(t, adminAddr)
			var routed []string
			for _, a := range as {
				stagesSeen[a.Stage] = true
				if a.Stage == "" {
					routed = append(routed, a.Name)
				}
			}
			if slices.Equal(routed, want) && len(as) == len(want) {
				return as
			}
			if time.Now().After(deadline) {
				t.Fatalf("placed %+v, want %v routed and nothing else", as, want)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	for _, phase := range [][]string{{"lora-a", "lora-b"}, {"lora-c"}, {"lora-a", "lora-d"}, {"lora-b"}} {
		report(phase...)
		placed := await(phase...)
		// Routed: the adapter's calls land on its members, once the
		// client has the route the status reports served.
		for _, a := range placed {
			var members []string
			for _, m := range a.Members {
				members = append(members, m.Identity)
			}
			var outside []string
			eventually(t, "adapter "+a.Name+"'s sessions on its members", func() bool {
				outside = outside[:0]
				for s, id := range routeEach(t, cl, withAdapter(sessionCalls(ss[:20]), a.Name)) {
					i := slices.IndexFunc(bs, func(b *backend) bool { return b.id == id })
					if i < 0 || !slices.Contains(members, bs[i].addr) {
						outside = append(outside, s+" on "+id)
					}
				}
				if len(outside) > 0 {
					t.Logf("adapter %s: %v outside its members %v", a.Name, outside, members)
				}
				return len(outside) == 0
			})
		}
	}
	close(stop)
	wg.Wait()
	t.Logf("%d calls during the placements, %d failed; stages seen %v", calls.Load(), failed.Load(), stagesSeen)
	if failed.Load() != 0 {
		t.Errorf("%d of %d calls failed while adapters were placed and removed: %s", failed.Load(), calls.Load(), strings.Join(errs, "; "))
	}
	if calls.Load() < 500 {
		t.Errorf("only %d calls ran during the placements", calls.Load())
	}
	if n := metricWhere(t, adminAddr, "kvxds_fleet_updates_total", `cause="adapters"`); n < 8 {
		t.Errorf("%v adapter pushes, want two per adapter placed or removed", n)
	}
}
