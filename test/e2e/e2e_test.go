// Package e2e runs kvxds against real data planes: the xDS clients of
// grpc-go and grpc-js (proxyless gRPC) in every run, and Envoy when it is
// installed. Backends are real gRPC servers on loopback; kvxds runs
// in-process and as the built binary.
package e2e

import (
	"bufio"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/kvxds/kvxds/fleet"
)

const numSessions = 2000

// shareTolerance bounds how far a replica's share of sessions may stray
// from its share p of the total weight. gRPC clients place hosts on a
// ring of 64 entries per unit of weight (fleet.GRPCRingSize) at points
// hashed from their addresses, which are new ports in every run: a host's
// arc is then Beta-distributed with variance p(1-p)/(size+1), and sampling
// numSessions keys adds p(1-p)/numSessions. Five standard deviations keep
// a correct ring from failing by chance while a weight that is ignored
// (0.25 for 0.5) still fails. Where each session goes is checked exactly
// against the ring model instead.
func shareTolerance(p float64, ringSize uint64) float64 {
	return 5 * math.Sqrt(p*(1-p)*(1/float64(ringSize+1)+1.0/numSessions))
}

func TestAffinityAndWeights(t *testing.T) {
	for _, m := range modes {
		for _, dp := range dataPlanes {
			t.Run(m.name+"/"+dp.name, func(t *testing.T) {
				bs := startBackends(t, 4)
				members := []member{{bs[0], 1}, {bs[1], 1}, {bs[2], 2}, {bs[3], 4}}
				path, xdsAddr, adminAddr := policyFile(t)
				writeAtomic(t, path, policyText(xdsAddr, adminAddr, members))
				k := m.start(t, path, xdsAddr, adminAddr)
				defer k.stop()

				ss := sessions(numSessions)
				cl := dp.new(t, xdsAddr)
				// Every session lands where the ring kvxds sized puts it.
				first := settle(t, cl, ss, predict(members, ss), "the initial policy")
				// Two more passes, and a second, independent client: a
				// session never splits across replicas.
				for pass := range 2 {
					if n, _, _ := moved(first, route(t, cl, ss)); n != 0 {
						t.Fatalf("pass %d: %d sessions changed replica with no change in the fleet", pass+2, n)
					}
				}
				other := dp.new(t, xdsAddr)
				if n, _, _ := moved(first, route(t, other, ss)); n != 0 {
					t.Fatalf("a second client routed %d sessions differently: clients disagree on the hash table", n)
				}

				if n := metric(t, adminAddr, "kvxds_xds_nacks_total"); n != 0 {
					t.Errorf("gRPC clients rejected %v responses", n)
				}

				got := shares(first)
				total := totalWeight(members)
				for _, mb := range members {
					want := float64(mb.weight) / float64(total)
					share := float64(got[mb.b.id]) / numSessions
					t.Logf("%s weight %d: %.3f of sessions (weight share %.3f)", mb.b.id, mb.weight, share, want)
					if tol := shareTolerance(want, fleet.GRPCRingSize(uint64(total), 0)); math.Abs(share-want) > tol {
						t.Errorf("%s: share %.3f, want %.3f ± %.3f", mb.b.id, share, want, tol)
					}
				}
			})
		}
	}
}

// TestMembershipChanges edits the policy under a running kvxds, in process
// and as the binary; TestRingMembership covers more sizes and weights.
func TestMembershipChanges(t *testing.T) {
	for _, m := range modes {
		for _, dp := range dataPlanes {
			t.Run(m.name+"/"+dp.name, func(t *testing.T) {
				const n = 4
				bs := startBackends(t, n+1)
				var members []member
				for _, b := range bs[:n] {
					members = append(members, member{b, 1})
				}
				path, xdsAddr, adminAddr := policyFile(t)
				writeAtomic(t, path, policyText(xdsAddr, adminAddr, members))
				k := m.start(t, path, xdsAddr, adminAddr)
				defer k.stop()

				ss := sessions(numSessions)
				cl := dp.new(t, xdsAddr)
				want := predict(members, ss)
				before := settle(t, cl, ss, want, "the initial policy")

				// Add one replica to N: about 1/(N+1) of sessions move,
				// all of them to it.
				added := bs[n]
				grown := append(slices.Clone(members), member{added, 1})
				writeAtomic(t, path, policyText(xdsAddr, adminAddr, grown))
				wantGrown := predict(grown, ss)
				after := settle(t, cl, ss, wantGrown, "after adding a replica")
				own, between := movement(before, after, added.id, want, wantGrown)
				t.Logf("adding 1 replica to %d moved %d of %d sessions to it (ideal %d) and %d between the others",
					n, own, numSessions, numSessions/(n+1), between)
				if own == 0 || between > numSessions/100 {
					t.Errorf("adding a replica: %d sessions to it, %d between the others (limit 1%%)", own, between)
				}

				// Remove one: only its sessions move.
				removed := bs[1]
				var rest []member
				for _, mb := range grown {
					if mb.b != removed {
						rest = append(rest, mb)
					}
				}
				writeAtomic(t, path, policyText(xdsAddr, adminAddr, rest))
				wantRest := predict(rest, ss)
				final := settle(t, cl, ss, wantRest, "after removing a replica")
				own, between = movement(after, final, removed.id, wantGrown, wantRest)
				t.Logf("removing %s moved its own %d sessions and %d between the others", removed.id, own, between)
				if own != shares(after)[removed.id] || between > numSessions/100 {
					t.Errorf("removing a replica: %d of its %d sessions moved, %d between the others (limit 1%%)",
						own, shares(after)[removed.id], between)
				}
			})
		}
	}
}

func TestBrokenEditKeepsServing(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			bs := startBackends(t, 3)
			members := []member{{bs[0], 1}, {bs[1], 1}, {bs[2], 1}}
			path, xdsAddr, adminAddr := policyFile(t)
			good := policyText(xdsAddr, adminAddr, members)
			writeAtomic(t, path, good)
			k := m.start(t, path, xdsAddr, adminAddr)
			defer k.stop()

			ss := sessions(500)
			cl := newGoClient(t, xdsAddr)
			before := route(t, cl, ss)

			// A typo, and a semantically invalid value.
			for i, broken := range []string{
				strings.Replace(good, "static {", "static {{", 1),
				strings.Replace(good, "table_size     = 65537", "table_size     = 65536", 1),
			} {
				writeAtomic(t, path, broken)
				eventually(t, "the reload error to be counted", func() bool {
					return metric(t, adminAddr, "kvxds_policy_reload_errors_total") >= float64(i+1)
				})
				if n, _, _ := moved(before, route(t, cl, ss)); n != 0 {
					t.Fatalf("broken edit %d moved %d sessions", i+1, n)
				}
			}

			// A good edit after the broken ones takes effect.
			writeAtomic(t, path, policyText(xdsAddr, adminAddr, members[:2]))
			eventually(t, "the fixed policy to take effect", func() bool {
				return shares(route(t, cl, ss))[bs[2].id] == 0
			})
		})
	}
}

func TestClientsSurviveRestart(t *testing.T) {
	for _, m := range modes {
		for _, dp := range dataPlanes {
			t.Run(m.name+"/"+dp.name, func(t *testing.T) {
				bs := startBackends(t, 4)
				members := []member{{bs[0], 1}, {bs[1], 2}, {bs[2], 1}, {bs[3], 3}}
				path, xdsAddr, adminAddr := policyFile(t)
				writeAtomic(t, path, policyText(xdsAddr, adminAddr, members))
				k := m.start(t, path, xdsAddr, adminAddr)

				ss := sessions(1000)
				cl := dp.new(t, xdsAddr)
				before := settle(t, cl, ss, predict(members, ss), "the initial policy")

				k.stop()
				if n, _, _ := moved(before, route(t, cl, ss)); n != 0 {
					t.Fatalf("with kvxds stopped, %d sessions moved", n)
				}

				k = m.start(t, path, xdsAddr, adminAddr)
				defer k.stop()
				eventually(t, "the client to reconnect", func() bool {
					return metric(t, adminAddr, "kvxds_xds_streams") >= 1
				})
				if n, _, _ := moved(before, route(t, cl, ss)); n != 0 {
					t.Fatalf("after restart, %d sessions moved", n)
				}
				// A new client after the restart agrees with the old one.
				if n, _, _ := moved(before, route(t, dp.new(t, xdsAddr), ss)); n != 0 {
					t.Fatalf("a client connected after the restart routes %d sessions differently", n)
				}
			})
		}
	}
}

// metric sums the samples of one metric, whatever their labels, from
// kvxds's /metrics; NaN if kvxds does not answer.
func metric(t *testing.T, adminAddr, name string) float64 {
	t.Helper()
	return metricWhere(t, adminAddr, name, "")
}

// metricWhere is metric restricted to samples whose labels contain match.
func metricWhere(t *testing.T, adminAddr, name, match string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + adminAddr + "/metrics")
	if err != nil {
		return math.NaN()
	}
	defer resp.Body.Close()
	sum := 0.0
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, name)
		if !ok || (rest[0] != ' ' && rest[0] != '{') {
			continue
		}
		labels := rest[:strings.LastIndexByte(rest, '}')+1]
		if !strings.Contains(labels, match) {
			continue
		}
		fields := strings.Fields(rest[len(labels):])
		if len(fields) == 0 {
			continue
		}
		if v, err := strconv.ParseFloat(fields[0], 64); err == nil {
			sum += v
		}
	}
	return sum
}

// The baseline balancers, used to measure what affinity gains, must be
// accepted by gRPC clients and ignore the session key.
func TestBaselineBalancers(t *testing.T) {
	for _, lb := range []string{"round_robin", "least_request"} {
		for _, dp := range dataPlanes {
			t.Run(lb+"/"+dp.name, func(t *testing.T) {
				bs := startBackends(t, 4)
				members := []member{{bs[0], 1}, {bs[1], 1}, {bs[2], 1}, {bs[3], 1}}
				path, xdsAddr, adminAddr := policyFile(t)
				writeAtomic(t, path, policyTextWith(xdsAddr, adminAddr, members, "  load_balancing = \""+lb+"\"\n"))
				k := startInProcess(t, path, xdsAddr, adminAddr)
				defer k.stop()

				cl := dp.new(t, xdsAddr)
				ids, errs := cl.callMany(slices.Repeat([][]string{{"x-session-id", "one-session"}}, 200))
				seen := map[string]int{}
				for i, id := range ids {
					if errs[i] != nil {
						t.Fatal(errs[i])
					}
					seen[id]++
				}
				t.Logf("one session over %s: %v", lb, seen)
				if len(seen) < 2 {
					t.Errorf("%s sent every request of a session to one replica: %v", lb, seen)
				}
				if n := metric(t, adminAddr, "kvxds_xds_nacks_total"); n != 0 {
					t.Errorf("gRPC clients rejected %v responses", n)
				}
			})
		}
	}
}
