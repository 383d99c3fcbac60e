package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kvxds/kvxds/fleet"
	"github.com/kvxds/kvxds/test/kube"
)

// The benchmarks below measure kvxds watching a real API server, with the
// built binary (no race detector) and grpc-go's xDS client as the data
// plane. Each is one experiment, however large b.N: run them with
//
//	go test -run '^$' -bench 'EndpointSliceToClient|KubernetesFootprint' -benchtime 1x ./test/e2e/
//
// They report their own metrics (ns/op is suppressed: it would be the
// experiment's wall time).

// benchKvxds runs the kvxds binary on pool "chat" discovering Service vllm
// of cluster, and returns its xDS and admin addresses once it serves n
// pods.
func benchKvxds(b *testing.B, cluster *kube.Cluster, n int) (xdsAddr, adminAddr string) {
	b.Helper()
	xdsAddr, adminAddr = freeAddr(b), freeAddr(b)
	path := filepath.Join(b.TempDir(), "policy.hcl")
	if err := os.WriteFile(path, []byte(kubernetesPolicy(xdsAddr, adminAddr, cluster.Kubeconfig(b))), 0o644); err != nil {
		b.Fatal(err)
	}
	k := startBinaryWith(b, []string{"serve", "--policy", path, "--log-level", "warn"}, outOfCluster(cluster.Kubeconfig(b)))
	b.Cleanup(k.stop)
	waitReady(b, adminAddr)
	pollFor(b, time.Minute, fmt.Sprintf("kvxds to serve %d pods", n), func() bool { return fleetSize(b, adminAddr) == n })
	return xdsAddr, adminAddr
}

// fleetSize is how many endpoints kvxds serves in its one pool.
func fleetSize(b *testing.B, adminAddr string) int {
	b.Helper()
	resp, err := http.Get("http://" + adminAddr + "/debug/fleet")
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	var f fleet.Fleet
	if err := json.NewDecoder(resp.Body).Decode(&f); err != nil {
		b.Fatal(err)
	}
	if len(f.Pools) != 1 {
		return -1
	}
	return len(f.Pools[0].Endpoints)
}

// pollFor polls cond every 10 ms until it holds, failing after d.
func pollFor(b *testing.B, d time.Duration, what string, cond func() bool) {
	b.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			b.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// landsOn calls session again and again, as tightly as the client
// answers, until it lands on pod; it returns when the answer came.
func landsOn(b *testing.B, cl *goClient, session, pod string, within time.Duration) time.Time {
	b.Helper()
	md := []string{"x-session-id", session}
	deadline := time.Now().Add(within)
	for {
		id, err := cl.call(md)
		now := time.Now()
		if err != nil {
			b.Fatalf("session %s: %v", session, err)
		}
		if id == pod {
			return now
		}
		if now.After(deadline) {
			b.Fatalf("session %s still on %s after %v, want %s", session, id, within, pod)
		}
	}
}

// leaves is landsOn's converse: it returns once session is served
// elsewhere than pod.
func leaves(b *testing.B, cl *goClient, session, pod string, within time.Duration) {
	b.Helper()
	md := []string{"x-session-id", session}
	deadline := time.Now().Add(within)
	for {
		id, err := cl.call(md)
		if err != nil {
			b.Fatalf("session %s: %v", session, err)
		}
		if id != pod {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("session %s still on %s after %v", session, pod, within)
		}
		time.Sleep(time.Millisecond)
	}
}

// sessionOn is a session that the ring of members gives to members[i]
// alone (off the arc that depends on a client's rounding).
func sessionOn(b *testing.B, members []member, i int) string {
	b.Helper()
	cand := make([]string, 100_000)
	for j := range cand {
		cand[j] = fmt.Sprintf("probe-%s-%06d", members[i].b.id, j)
	}
	want := predictKeyed(members, cand, 0, func(m member) string { return m.b.id })
	for _, s := range cand {
		if w := want[s]; w[0] == members[i].b.id && w[1] == w[0] {
			return s
		}
	}
	b.Fatalf("no session hashes to %s", members[i].b.id)
	return ""
}

// percentile is the nearest-rank p-th percentile of ds (sorted in place).
func percentile(ds []time.Duration, p float64) time.Duration {
	slices.Sort(ds)
	i := int(float64(len(ds))*p/100+0.5) - 1
	return ds[max(0, min(i, len(ds)-1))]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// setSlice creates s, or replaces it if it exists.
func setSlice(b *testing.B, ctx context.Context, kc kubernetes.Interface, s *discoveryv1.EndpointSlice) {
	b.Helper()
	api := kc.DiscoveryV1().EndpointSlices("llm")
	cur, err := api.Get(ctx, s.Name, metav1.GetOptions{})
	if err == nil {
		s.ResourceVersion = cur.ResourceVersion
		_, err = api.Update(ctx, s, metav1.UpdateOptions{})
	} else {
		s.ResourceVersion = ""
		_, err = api.Create(ctx, s, metav1.CreateOptions{})
	}
	if err != nil {
		b.Fatal(err)
	}
}

// BenchmarkEndpointSliceToClient is the time from an EndpointSlice write
// (the API call returned) to the new endpoints taking effect at a grpc-go
// client: the first call of a session that the ring model puts on a new
// pod landing there, the session being called in a tight loop.
//
// single: 40 times, one pod joins a Service of 100 (a second slice gets
// it), then leaves again. 100-to-1000: five times, 900 pods join a Service
// of 100 in nine new slices of 100, written one after another; measured
// from the last write (p50_ms, max_ms) and from the first (total_p50_ms),
// to a session of a pod in the last slice; model_p50_ms is from the last
// write to kvxds's /debug/fleet listing all 1,000 (polled every 5 ms).
func BenchmarkEndpointSliceToClient(b *testing.B) {
	b.Run("single", func(b *testing.B) {
		const base, changes = 100, 40
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		cluster, kc := newLargeCluster(b, ctx)
		f := newFleetServer(b, 43, "10.214.4.0/22", base+changes)
		setSlice(b, ctx, kc, f.slices(base)[0])
		extra := f.slices(base + 1)[1] // slice vllm-s1, one pod
		xdsAddr, _ := benchKvxds(b, cluster, base)
		cl := &goClient{cl: newClientOf(b, xdsAddr, "chat")}
		lat := make([]time.Duration, 0, changes)
		for i := range changes {
			joined := f.pods[base+i]
			members := append(f.members(0, base), member{joined, 1})
			session := sessionOn(b, members, base)
			host, _, _ := strings.Cut(joined.addr, ":")
			extra.Endpoints = []discoveryv1.Endpoint{pod(joined.id, host, true, true, false)}
			setSlice(b, ctx, kc, extra)
			written := time.Now()
			lat = append(lat, landsOn(b, cl, session, joined.id, time.Minute).Sub(written))
			extra.Endpoints = nil
			setSlice(b, ctx, kc, extra)
			leaves(b, cl, session, joined.id, time.Minute)
		}
		b.ReportMetric(0, "ns/op")
		b.ReportMetric(ms(percentile(lat, 50)), "p50_ms")
		b.ReportMetric(ms(percentile(lat, 99)), "p99_ms")
		b.ReportMetric(ms(percentile(lat, 100)), "max_ms")
	})

	b.Run("100-to-1000", func(b *testing.B) {
		const base, n, reps = 100, 1000, 5
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		cluster, kc := newLargeCluster(b, ctx)
		f := newFleetServer(b, 44, "10.214.8.0/22", n)
		all := f.slices(n)
		setSlice(b, ctx, kc, all[0])
		xdsAddr, adminAddr := benchKvxds(b, cluster, base)
		cl := &goClient{cl: newClientOf(b, xdsAddr, "chat")}
		// A session on the last pod of the last slice.
		members := f.members(0, n)
		session := sessionOn(b, members, n-1)
		target := members[n-1].b.id
		var fromLast, fromFirst, inModel []time.Duration
		for range reps {
			first := time.Now()
			for _, s := range all[1:] {
				setSlice(b, ctx, kc, s)
			}
			last := time.Now()
			// When kvxds's model holds all 1,000, to split the time between
			// discovery and the push to the client.
			modelled := make(chan time.Time, 1)
			go func() {
				for fleetSize(b, adminAddr) != n {
					time.Sleep(5 * time.Millisecond)
				}
				modelled <- time.Now()
			}()
			landed := landsOn(b, cl, session, target, time.Minute)
			fromLast, fromFirst = append(fromLast, landed.Sub(last)), append(fromFirst, landed.Sub(first))
			inModel = append(inModel, (<-modelled).Sub(last))
			for _, s := range all[1:] {
				if err := kc.DiscoveryV1().EndpointSlices("llm").Delete(ctx, s.Name, metav1.DeleteOptions{}); err != nil {
					b.Fatal(err)
				}
			}
			leaves(b, cl, session, target, time.Minute)
			pollFor(b, time.Minute, "kvxds to serve 100 pods again", func() bool { return fleetSize(b, adminAddr) == base })
		}
		b.ReportMetric(0, "ns/op")
		b.ReportMetric(ms(percentile(fromLast, 50)), "p50_ms")
		b.ReportMetric(ms(percentile(fromLast, 100)), "max_ms")
		b.ReportMetric(ms(percentile(fromFirst, 50)), "total_p50_ms")
		b.ReportMetric(ms(percentile(inModel, 50)), "model_p50_ms")
	})
}

// processMetrics reads kvxds's /metrics, summing each metric's samples.
func processMetrics(b *testing.B, adminAddr string) map[string]float64 {
	b.Helper()
	resp, err := http.Get("http://" + adminAddr + "/metrics")
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) < 2 {
			continue
		}
		name, _, _ := strings.Cut(fields[0], "{")
		if v, err := strconv.ParseFloat(fields[len(fields)-1], 64); err == nil {
			out[name] += v
		}
	}
	return out
}

// BenchmarkKubernetesFootprint is what kvxds (the binary) costs while it
// watches a 1,000-pod Service (ten slices) and serves one grpc-go client:
// CPU (cores: CPU seconds per second) and resident memory at the end (and
// its peak, sampled every second), idle for 60 s, then with one slice
// update a second for 60 s (a pod of the slice turns unready or ready
// again, so every update is a membership change pushed to the client).
func BenchmarkKubernetesFootprint(b *testing.B) {
	const n, window = 1000, 60 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cluster, kc := newLargeCluster(b, ctx)
	f := newFleetServer(b, 45, "10.214.12.0/22", n)
	all := f.slices(n)
	for _, s := range all {
		setSlice(b, ctx, kc, s)
	}
	xdsAddr, adminAddr := benchKvxds(b, cluster, n)
	cl := &goClient{cl: newClientOf(b, xdsAddr, "chat")}
	if _, err := cl.call([]string{"x-session-id", "warm-up"}); err != nil {
		b.Fatal(err)
	}
	time.Sleep(5 * time.Second) // let start-up work (GC, first pushes) settle

	measure := func(b *testing.B, during func(tick int)) {
		before := processMetrics(b, adminAddr)
		start := time.Now()
		var peak float64
		for tick := 0; time.Since(start) < window; tick++ {
			during(tick)
			peak = max(peak, processMetrics(b, adminAddr)["process_resident_memory_bytes"])
			time.Sleep(time.Until(start.Add(time.Duration(tick+1) * time.Second)))
		}
		after := processMetrics(b, adminAddr)
		elapsed := time.Since(start).Seconds()
		b.ReportMetric(0, "ns/op")
		b.ReportMetric((after["process_cpu_seconds_total"]-before["process_cpu_seconds_total"])/elapsed, "cpu_cores")
		b.ReportMetric(after["process_resident_memory_bytes"]/(1<<20), "rss_MiB")
		b.ReportMetric(max(peak, after["process_resident_memory_bytes"])/(1<<20), "peak_rss_MiB")
		b.ReportMetric(after["kvxds_fleet_updates_total"]-before["kvxds_fleet_updates_total"], "fleet_updates")
	}
	b.Run("idle", func(b *testing.B) { measure(b, func(int) {}) })
	b.Run("churn", func(b *testing.B) {
		measure(b, func(tick int) {
			s := all[tick%len(all)]
			ready := !*s.Endpoints[0].Conditions.Ready
			s.Endpoints[0].Conditions.Ready, s.Endpoints[0].Conditions.Serving = &ready, &ready
			setSlice(b, ctx, kc, s)
		})
	})
}
