package kubernetes

import (
	"testing"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/kvxds/kvxds/fleet"
	"github.com/kvxds/kvxds/test/kube"
)

// TestAgainstAPIServer runs the source against a real API server, one
// namespace per case.
func TestAgainstAPIServer(t *testing.T) {
	t.Parallel()
	c := kube.Start(t)
	t.Run("cases", func(t *testing.T) {
		t.Run("scale", func(t *testing.T) { t.Parallel(); testScale(t, c) })
		t.Run("identity", func(t *testing.T) { t.Parallel(); testIdentity(t, c) })
		t.Run("draining", func(t *testing.T) { t.Parallel(); testDraining(t, c) })
		t.Run("merge", func(t *testing.T) { t.Parallel(); testMerge(t, c) })
		t.Run("rbac", func(t *testing.T) { t.Parallel(); testRBAC(t, c) })
	})
	// Alone, so that its timing is its own.
	t.Run("1000 endpoints", func(t *testing.T) { testLarge(t, c) })
}

// testScale scales 4 → 8 → 3 by updating, adding and deleting slices.
func testScale(t *testing.T, c *kube.Cluster) {
	f := newFixture(t, c, "scale")
	f.apply(f.slice("llm-a", podEndpoints(0, 0, 4)...))
	r := start(t, newSource(t, c, f.config()))
	r.waitTargets(podTargets(0, 0, 4), waitFor)

	f.apply(f.slice("llm-a", podEndpoints(0, 0, 5)...))
	f.apply(f.slice("llm-b", podEndpoints(0, 5, 8)...))
	r.waitTargets(podTargets(0, 0, 8), waitFor)

	f.delete("llm-b")
	f.apply(f.slice("llm-a", podEndpoints(0, 0, 3)...))
	r.waitTargets(podTargets(0, 0, 3), waitFor)
}

// testIdentity re-creates a pod under its name with a new IP: it keeps its
// place on the ring.
func testIdentity(t *testing.T, c *kube.Cluster) {
	f := newFixture(t, c, "identity")
	f.apply(f.slice("llm-a", podEndpoints(1, 0, 4)...))
	r := start(t, newSource(t, c, f.config()))
	r.waitTargets(podTargets(1, 0, 4), waitFor)

	moved := podEndpoints(1, 0, 4)
	moved[2] = ep("10.213.1.200", "pod-1-2")
	f.apply(f.slice("llm-a", moved...))
	want := podTargets(1, 0, 4)
	want[2].Host = "10.213.1.200"
	r.waitTargets(sorted(want), waitFor)
}

// testDraining terminates a pod: draining while it serves, gone once it
// is removed.
func testDraining(t *testing.T, c *kube.Cluster) {
	f := newFixture(t, c, "draining")
	f.apply(f.slice("llm-a", podEndpoints(2, 0, 4)...))
	r := start(t, newSource(t, c, f.config()))
	r.waitTargets(podTargets(2, 0, 4), waitFor)

	yes, no := ptr(true), ptr(false)
	terminating := podEndpoints(2, 0, 4)
	terminating[1].Conditions = discoveryv1.EndpointConditions{Ready: no, Serving: yes, Terminating: yes}
	f.apply(f.slice("llm-a", terminating...))
	want := podTargets(2, 0, 4)
	want[1].Health = fleet.Draining
	r.waitTargets(want, waitFor)

	f.apply(f.slice("llm-a", append(podEndpoints(2, 0, 1), podEndpoints(2, 2, 4)...)...))
	r.waitTargets(sorted(podTargets(2, 0, 1), podTargets(2, 2, 4)), waitFor)
}

// testMerge splits the Service over IPv4 and IPv6 slices, one address
// listed in two of them.
func testMerge(t *testing.T, c *kube.Cluster) {
	f := newFixture(t, c, "merge")
	f.apply(f.slice("llm-a", podEndpoints(3, 0, 2)...))
	// pod-1's address again, from a stale endpoint of another slice.
	f.apply(f.slice("llm-b", append(podEndpoints(3, 2, 4), ep("10.213.3.2", "stale"))...))
	f.apply(f.slice("llm-c", ep("fd00::10", "pod-v6")))
	r := start(t, newSource(t, c, f.config()))
	r.waitTargets(sorted(podTargets(3, 0, 4), []fleet.Endpoint{{Host: "fd00::10", Port: portNum, HashKey: "pod-v6"}}), waitFor)
}

// testLarge reports a 1,000-endpoint Service (10 slices of 100) and logs
// how long the last slice takes to reach the receiver.
func testLarge(t *testing.T, c *kube.Cluster) {
	f := newFixture(t, c, "large")
	r := start(t, newSource(t, c, f.config()))
	r.waitTargets(nil, waitFor)

	var want []fleet.Endpoint
	for i := range 10 {
		want = append(want, podTargets(10+i, 0, 100)...)
	}
	want = sorted(want)
	began := time.Now()
	var last time.Time
	for i := range 10 {
		f.apply(f.slice("llm-"+string(rune('a'+i)), podEndpoints(10+i, 0, 100)...))
		last = time.Now()
	}
	r.waitTargets(want, waitFor)
	t.Logf("1,000 targets reported %s after the last slice was created (%s after the first)",
		time.Since(last).Round(time.Millisecond), time.Since(began).Round(time.Millisecond))
}
