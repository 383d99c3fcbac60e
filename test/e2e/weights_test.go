package e2e

import (
	"fmt"
	"testing"
	"time"
)

// scrapeInterval is the metrics interval of the pools in these tests.
const scrapeInterval = 500 * time.Millisecond

// shedLimit bounds the time from a replica saturating to new sessions
// avoiding it: a sanity bound, ten scrape intervals, since the test also
// counts the time its clients take to route probes on a busy machine. The
// time itself is logged; it is usually under two intervals.
const shedLimit = 10 * scrapeInterval

func dynamicPolicy(xdsAddr, adminAddr string, members []member, weightsBlock string) string {
	return policyTextWith(xdsAddr, adminAddr, members, fmt.Sprintf(`
  metrics {
    engine      = "vllm"
    interval    = %q
    timeout     = "400ms"
    stale_after = "3s"
  }
  escape {
    max_queue_depth     = 8
    max_kv_occupancy    = 0.9
    resume_queue_depth  = 2
    resume_kv_occupancy = 0.8
    hold                = "1s"
    sustain             = "0s" # at once, though the pool has a balance_factor
  }
%s`, scrapeInterval.String(), weightsBlock))
}

// fixedWeights keeps every weight at 1 so only health changes move keys.
const fixedWeights = `
  weights {
    min = 1
    max = 1
  }
`

// newSessions returns n session ids never used before in the test.
func newSessions(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%05d", prefix, i)
	}
	return out
}

// A saturated replica leaves the ring (DRAINING): its sessions move, the
// others' stay (gRPC clients' ring size follows the healthy weight), and
// it gets its sessions back when it recovers.
func TestSaturatedReplicaShedsNewSessions(t *testing.T) {
	for _, dp := range dataPlanes {
		t.Run(dp.name, func(t *testing.T) {
			bs := startBackends(t, 4)
			members := []member{{bs[0], 1}, {bs[1], 1}, {bs[2], 1}, {bs[3], 1}}
			path, xdsAddr, adminAddr := policyFile(t)
			writeAtomic(t, path, dynamicPolicy(xdsAddr, adminAddr, members, fixedWeights))
			k := startInProcess(t, path, xdsAddr, adminAddr)
			defer k.stop()

			cl := dp.new(t, xdsAddr)
			ss := sessions(1000)
			// Let the first scrapes settle before taking the reference routing.
			eventually(t, "the first scrape", func() bool {
				return metric(t, adminAddr, "kvxds_scrapes_total") >= 4
			})
			want := predict(members, ss)
			before := settle(t, cl, ss, want, "every replica healthy")
			hot := bs[2]
			if shares(before)[hot.id] == 0 {
				t.Fatal("the replica under test serves no session")
			}

			// Saturate one replica: its queue passes max_queue_depth.
			start := time.Now()
			hot.setLoad(20, 0.5)
			// The prober is a second client: it must not hold this one up.
			p := startProber(dp.new(t, xdsAddr), ss[:200])
			probe := 0
			eventually(t, "new sessions to stop landing on the saturated replica", func() bool {
				probe++
				return shares(route(t, cl, newSessions(fmt.Sprintf("probe-%d", probe), 200)))[hot.id] == 0
			})
			shed := time.Since(start)
			t.Logf("saturated replica stopped receiving new sessions after %v (scrape interval %v)", shed, scrapeInterval)
			if shed > shedLimit {
				t.Errorf("took %v to shed new sessions, more than %v", shed, shedLimit)
			}
			rest := []member{members[0], members[1], members[3]}
			wantRest := predict(rest, ss)
			during := settle(t, cl, ss, wantRest, "with the saturated replica out")
			stray, probes, window := p.transient(ss[:200], before, during)
			own, between := movement(before, during, hot.id, want, wantRest)
			t.Logf("taking %s out moved its own %d sessions and %d of the others; transient: %d of %d probes strayed over %v",
				hot.id, own, between, stray, probes, window)
			if own != shares(before)[hot.id] {
				t.Errorf("%d of the saturated replica's %d sessions moved, want all", own, shares(before)[hot.id])
			}
			if between > len(ss)/100 {
				t.Errorf("%d other sessions moved, more than 1%%", between)
			}

			// Recovery: below the resume thresholds for the hold time, it is
			// back and its sessions return.
			hot.setLoad(0, 0.1)
			settle(t, cl, ss, exactly(before), "the recovered replica back")
		})
	}
}

func TestWeightsFollowFreeCapacity(t *testing.T) {
	bs := startBackends(t, 3)
	members := []member{{bs[0], 1}, {bs[1], 1}, {bs[2], 1}}
	path, xdsAddr, adminAddr := policyFile(t)
	writeAtomic(t, path, dynamicPolicy(xdsAddr, adminAddr, members, `
  weights {
    min          = 1
    max          = 4
    levels       = 4
    smoothing    = 1
    hysteresis   = 0.2
    min_interval = "0s"
  }
`))
	k := startInProcess(t, path, xdsAddr, adminAddr)
	defer k.stop()

	cl := newGoClient(t, xdsAddr)
	ss := sessions(1500)
	eventually(t, "the first scrape", func() bool {
		return metric(t, adminAddr, "kvxds_scrapes_total") >= 3
	})
	before := shares(route(t, cl, ss))
	// Busy but not saturated: little free capacity left.
	busy := bs[0]
	busy.setLoad(6, 0.85)
	var after map[string]int
	eventually(t, "the busy replica's share to fall", func() bool {
		after = shares(route(t, cl, ss))
		return after[busy.id] < before[busy.id]*2/3
	})
	t.Logf("shares before %v, with %s busy %v", before, busy.id, after)
	for _, b := range bs[1:] {
		if after[b.id] < before[b.id] {
			t.Errorf("%s lost sessions (%d → %d) when another replica got busy", b.id, before[b.id], after[b.id])
		}
	}
}

func TestReplicaWithoutMetricsKeepsTraffic(t *testing.T) {
	bs := startBackends(t, 3)
	members := []member{{bs[0], 1}, {bs[1], 1}, {bs[2], 1}}
	path, xdsAddr, adminAddr := policyFile(t)
	writeAtomic(t, path, dynamicPolicy(xdsAddr, adminAddr, members, fixedWeights))
	k := startInProcess(t, path, xdsAddr, adminAddr)
	defer k.stop()

	cl := newGoClient(t, xdsAddr)
	ss := sessions(600)
	eventually(t, "the first scrape", func() bool {
		return metric(t, adminAddr, "kvxds_scrapes_total") >= 3
	})
	before := route(t, cl, ss)
	bs[1].setMetricsDown(true)
	// Through the staleness window and well beyond it.
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if n, _, _ := moved(before, route(t, cl, ss)); n != 0 {
			t.Fatalf("%d sessions moved while a replica's metrics were down", n)
		}
		time.Sleep(250 * time.Millisecond)
	}
	if got := metricWhere(t, adminAddr, "kvxds_scrapes_total", `result="http_status"`); got == 0 {
		t.Error("failed scrapes of the replica without metrics were not counted")
	}
}
