package e2e

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/kvxds/kvxds/fleet"
	"github.com/kvxds/kvxds/xds/ringhash"
)

// expectation is, for each session, the replicas a gRPC client may send
// it to: the ring kvxds sized, in exact arithmetic (ringhash.BuildExact),
// and the same ring with one more entry for its last endpoint, which a
// client's floating point may add (see ringhash.Ring.Extended); most
// sessions have one.
type expectation map[string][2]string

// exactly expects every session where m has it.
func exactly(m map[string]string) expectation {
	out := make(expectation, len(m))
	for s, id := range m {
		out[s] = [2]string{id, id}
	}
	return out
}

func (e expectation) allows(s, id string) bool { return e[s][0] == id || e[s][1] == id }

// predict is where every gRPC client must send each session when members
// are the replicas on the ring: kvxds's ring size for their weight, and
// the clients' ring (xds/ringhash) over their identities (addresses).
func predict(members []member, ss []string) expectation {
	return predictWithCap(members, ss, 0)
}

// predictWithCap is predict for clients whose ring cap is raised to
// ringCap, told to kvxds by grpc_ring_cap.
func predictWithCap(members []member, ss []string, ringCap uint64) expectation {
	return predictKeyed(members, ss, ringCap, func(m member) string { return m.b.addr })
}

// predictKeyed is predict for members whose ring identity is key(m).
func predictKeyed(members []member, ss []string, ringCap uint64, key func(member) string) expectation {
	return predictRing(members, ss, ringCap, fleet.EntriesPerWeight(ringCap), key)
}

// predictRing is predictKeyed for a ring of perWeight entries per unit of
// weight (a tenant group's: fleet.GroupEntriesPerWeight).
func predictRing(members []member, ss []string, ringCap, perWeight uint64, key func(member) string) expectation {
	eps := make([]ringhash.Endpoint, len(members))
	var w uint64
	for i, m := range members {
		eps[i] = ringhash.Endpoint{HashKey: key(m), Weight: uint64(m.weight)}
		w += uint64(m.weight)
	}
	size := fleet.RingSize(w, perWeight, ringCap)
	r := ringhash.BuildExact(eps, size, size)
	ext := r.Extended(eps, ringhash.Last(eps))
	out := make(expectation, len(ss))
	for _, s := range ss {
		h := ringhash.HeaderHash(s)
		out[s] = [2]string{members[r.Owner(h)].b.id, members[ext.Owner(h)].b.id}
	}
	return out
}

// settle waits until cl routes every session where want allows, and
// fails the test if it never does.
func settle(t *testing.T, cl client, ss []string, want expectation, what string) map[string]string {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		got := route(t, cl, ss)
		var wrong []string
		for _, s := range ss {
			if !want.allows(s, got[s]) {
				wrong = append(wrong, s)
			}
		}
		if len(wrong) == 0 {
			return got
		}
		if time.Now().After(deadline) {
			var examples []string
			for _, s := range wrong[:min(3, len(wrong))] {
				examples = append(examples, fmt.Sprintf("%s (hash %d) on %s, want %v", s, ringhash.HeaderHash(s), got[s], want[s]))
			}
			t.Fatalf("%s: %s: %d of %d sessions never reached the replica the ring puts them on: %v", cl.name(), what, len(wrong), len(ss), examples)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// probe is one pass of a sample of sessions, routed while the fleet
// changes.
type probe struct {
	at  time.Time
	ids []string
}

// prober routes a sample of sessions again and again until stopped, to
// catch what clients do between receiving a new cluster (ring size) and
// new endpoints, which arrive as separate resources.
type prober struct {
	stopOnce sync.Once
	stop     chan struct{}
	done     chan []probe
}

func startProber(cl client, sample []string) *prober {
	p := &prober{stop: make(chan struct{}), done: make(chan []probe, 1)}
	calls := sessionCalls(sample)
	go func() {
		var out []probe
		for {
			select {
			case <-p.stop:
				p.done <- out
				return
			default:
			}
			ids, _ := cl.callMany(calls)
			out = append(out, probe{time.Now(), ids})
		}
	}()
	return p
}

// transient stops the prober and reports, for the sampled sessions, how
// many probes saw a session on a replica that is neither where it was
// before the change nor where it is after, and over how long.
func (p *prober) transient(sample []string, before, after map[string]string) (stray, probes int, window time.Duration) {
	p.stopOnce.Do(func() { close(p.stop) })
	var first, last time.Time
	for _, pr := range <-p.done {
		for i, s := range sample {
			probes++
			if id := pr.ids[i]; id != "" && id != before[s] && id != after[s] {
				stray++
				if first.IsZero() {
					first = pr.at
				}
				last = pr.at
			}
		}
	}
	if !first.IsZero() {
		window = last.Sub(first)
	}
	return stray, probes, window
}

// movement is what a change did to sessions: how many moved to or from
// the replica that joined or left, and how many between the others.
// Sessions on an arc whose owner depends on the client's rounding in any
// of exps (see expectation) are not counted between the others: the one
// entry in question is the last endpoint's, and it may come or go with
// any change of membership.
func movement(before, after map[string]string, changed string, exps ...expectation) (own, between int) {
	for s, a := range before {
		b := after[s]
		ambiguous := false
		for _, e := range exps {
			ambiguous = ambiguous || e[s][0] != e[s][1]
		}
		switch {
		case a == b:
		case a == changed || b == changed:
			own++
		case !ambiguous:
			between++
		}
	}
	return own, between
}

// TestRingMembership: with each gRPC client, removing (or draining) one
// of N replicas moves its own sessions and almost no others, and adding
// one moves about 1/(N+1) of sessions, all to it; clients settle on
// exactly the ring kvxds sized. Each client on three pool sizes, with
// weights 1 and 1..4 between them (the sessions' predicted replicas come
// from the ring model, xds/ringhash, whatever the size).
func TestRingMembership(t *testing.T) {
	ss := sessions(numSessions)
	sample := ss[:200]
	for _, dp := range dataPlanes {
		for _, c := range []struct {
			n        int
			weighted bool
		}{{4, true}, {8, false}, {16, true}} {
			n, weighted := c.n, c.weighted
			t.Run(fmt.Sprintf("%s/N=%d/weighted=%v", dp.name, n, weighted), func(t *testing.T) {
				bs := startBackends(t, n+1)
				var members []member
				for i, b := range bs[:n] {
					w := 1
					if weighted {
						w = 1 + i%4
					}
					members = append(members, member{b, w})
				}
				path, xdsAddr, adminAddr := policyFile(t)
				writeAtomic(t, path, policyText(xdsAddr, adminAddr, members))
				k := startInProcess(t, path, xdsAddr, adminAddr)
				defer k.stop()
				cl := dp.new(t, xdsAddr)
				want := predict(members, ss)
				before := settle(t, cl, ss, want, "start")
				// A second client probes during each change.
				pc := dp.new(t, xdsAddr)
				settle(t, pc, sample, predict(members, sample), "the probing client")

				// Remove one.
				gone := members[n/2]
				rest := slices.Delete(slices.Clone(members), n/2, n/2+1)
				p := startProber(pc, sample)
				writeAtomic(t, path, policyText(xdsAddr, adminAddr, rest))
				wantRest := predict(rest, ss)
				after := settle(t, cl, ss, wantRest, "after removing a replica")
				stray, probes, window := p.transient(sample, before, after)
				own, between := movement(before, after, gone.b.id, want, wantRest)
				t.Logf("removing 1 of %d: %d sessions moved from it (it had %d), %d between the others; transient: %d of %d probes strayed over %v",
					n, own, shares(before)[gone.b.id], between, stray, probes, window)
				if own != shares(before)[gone.b.id] {
					t.Errorf("%d of the removed replica's %d sessions moved", own, shares(before)[gone.b.id])
				}
				if between > numSessions/100 {
					t.Errorf("removing a replica moved %d sessions between the others, more than 1%%", between)
				}

				// Add a new one.
				added := member{bs[n], 1 + n%4}
				if !weighted {
					added.weight = 1
				}
				grown := append(slices.Clone(rest), added)
				p = startProber(pc, sample)
				writeAtomic(t, path, policyText(xdsAddr, adminAddr, grown))
				wantGrown := predict(grown, ss)
				final := settle(t, cl, ss, wantGrown, "after adding a replica")
				stray, probes, window = p.transient(sample, after, final)
				own, between = movement(after, final, added.b.id, wantRest, wantGrown)
				ideal := float64(added.weight) / float64(totalWeight(grown))
				t.Logf("adding 1 to %d: %d sessions moved to it (weight share %.3f: %d), %d between the others; transient: %d of %d probes strayed over %v",
					n-1, own, ideal, int(ideal*numSessions), between, stray, probes, window)
				if between > numSessions/100 {
					t.Errorf("adding a replica moved %d sessions between the others, more than 1%%", between)
				}
				if own == 0 {
					t.Error("the new replica received no session")
				}
				if n := metric(t, adminAddr, "kvxds_xds_nacks_total"); n != 0 {
					t.Errorf("clients rejected %v responses", n)
				}
			})
		}
	}
}

func totalWeight(ms []member) int {
	w := 0
	for _, m := range ms {
		w += m.weight
	}
	return w
}

// TestClientsAgree: grpc-go and grpc-js, on the default policy, send
// every session to the same replica: the one the ring model predicts,
// with the replicas in zones of unequal size.
func TestClientsAgree(t *testing.T) {
	bs := startBackends(t, 5)
	members := []member{{bs[0], 1}, {bs[1], 2}, {bs[2], 1}, {bs[3], 3}, {bs[4], 4}}
	path, xdsAddr, adminAddr := policyFile(t)
	writeAtomic(t, path, zonedPolicy(t, xdsAddr, adminAddr, members, []string{"a", "a", "a", "b", "c"}))
	k := startInProcess(t, path, xdsAddr, adminAddr)
	defer k.stop()
	ss := sessions(numSessions)
	want := predict(members, ss)
	var routes []map[string]string
	for _, dp := range dataPlanes {
		routes = append(routes, settle(t, dp.new(t, xdsAddr), ss, want, "the default policy"))
	}
	// They may differ only where rounding decides the last endpoint's
	// final entry.
	n, _, _ := moved(routes[0], routes[1])
	t.Logf("grpc-go and grpc-js disagree on %d of %d sessions", n, len(ss))
	if n > len(ss)/200 {
		t.Errorf("grpc-go and grpc-js disagree on %d sessions", n)
	}
}

// TestRaisedRingCap: with grpc_ring_cap raised on kvxds and on the clients
// (grpc-js's channel option; grpc-go reads its cap from the environment
// at start-up), each replica gets cap/64 entries per unit of weight, and
// a replica leaving still moves only its own sessions.
func TestRaisedRingCap(t *testing.T) {
	const ringCap = 16384
	// 8 replicas of weight 4: a ring of 8,191 entries, beyond the default
	// cap, which a client without the raised cap would not build.
	bs := startBackends(t, 8)
	var members []member
	for _, b := range bs {
		members = append(members, member{b, 4})
	}
	path, xdsAddr, adminAddr := policyFile(t)
	capped := func(ms []member) string {
		return withHashSetting(t, policyText(xdsAddr, adminAddr, ms), fmt.Sprintf("grpc_ring_cap = %d", ringCap))
	}
	writeAtomic(t, path, capped(members))
	k := startInProcess(t, path, xdsAddr, adminAddr)
	defer k.stop()
	cl := newJSClientWithCap(t, xdsAddr, ringCap)
	ss := sessions(numSessions)
	want := predictWithCap(members, ss, ringCap)
	before := settle(t, cl, ss, want, "a raised cap")
	rest := members[1:]
	writeAtomic(t, path, capped(rest))
	wantRest := predictWithCap(rest, ss, ringCap)
	after := settle(t, cl, ss, wantRest, "after removing a replica")
	own, between := movement(before, after, members[0].b.id, want, wantRest)
	t.Logf("cap %d: removing 1 of %d moved its own %d sessions and %d between the others; shares %v", ringCap, len(members), own, between, shares(before))
	if between > numSessions/100 {
		t.Errorf("removing a replica moved %d sessions between the others", between)
	}
}
