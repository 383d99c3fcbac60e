package e2e

import (
	"context"
	"reflect"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kvxds/kvxds/test/kube"
)

// BenchmarkHAFailover measures, with three kvxds processes on a real API
// server (lease 4 s, renew 3 s, retry 500 ms): the time from SIGKILL of
// the leader to a new leader (p50, max over b.N kills, each followed by a
// restart of the killed instance), and the time during which instances
// disagree after the leader decides something (a replica saturated or
// recovered): from the leader's new fleet to the last instance's.
func BenchmarkHAFailover(b *testing.B) {
	cluster := kube.Start(b)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	if _, err := cluster.Client().CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kvxds"}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	bs := startBackends(b, 4)
	members := []member{{bs[0], 1}, {bs[1], 1}, {bs[2], 1}, {bs[3], 1}}
	path := b.TempDir() + "/policy.hcl"
	text := haPolicy(cluster.Kubeconfig(b), members)
	writeAtomic(b, path, text)
	start := func(i *haInstance) {
		i.proc = startBinaryWith(b, []string{"serve", "--policy", path, "--xds", i.xds, "--admin", i.admin, "--id", i.id, "--log-level", "warn"}, nil)
		proc := i.proc
		b.Cleanup(func() { proc.cmd.Process.Kill(); proc.cmd.Wait() })
		waitReady(b, i.admin)
	}
	var group []*haInstance
	for _, id := range []string{"kvxds-a", "kvxds-b", "kvxds-c"} {
		i := &haInstance{id: id, xds: freeAddr(b), admin: freeAddr(b)}
		start(i)
		group = append(group, i)
	}
	leader := func() *haInstance {
		for _, i := range group {
			if st, ok := haStatus(b, i.admin); ok && st.Leading {
				return i
			}
		}
		return nil
	}
	for leader() == nil {
		time.Sleep(10 * time.Millisecond)
	}

	var failovers, disagreements []time.Duration
	saturate := true
	for b.Loop() {
		// Disagreement after a decision.
		l := leader()
		before := servedFleet(b, l.admin)
		if saturate {
			bs[0].setLoad(50, 0.5)
		} else {
			bs[0].setLoad(0, 0.1)
		}
		saturate = !saturate
		var changed time.Time
		for changed.IsZero() {
			if !reflect.DeepEqual(servedFleet(b, l.admin), before) {
				changed = time.Now()
			}
			time.Sleep(time.Millisecond)
		}
		ref := servedFleet(b, l.admin)
		for {
			all := true
			for _, i := range group {
				if !reflect.DeepEqual(servedFleet(b, i.admin), ref) {
					all = false
				}
			}
			if all {
				break
			}
			time.Sleep(time.Millisecond)
		}
		disagreements = append(disagreements, time.Since(changed))

		// SIGKILL the leader; time to the next one.
		killed := time.Now()
		l.proc.cmd.Process.Kill()
		l.proc.cmd.Wait()
		for {
			if n := leader(); n != nil && n != l {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		failovers = append(failovers, time.Since(killed))
		start(l)
	}
	slices.Sort(failovers)
	slices.Sort(disagreements)
	b.ReportMetric(failovers[len(failovers)/2].Seconds(), "failover_p50_s")
	b.ReportMetric(failovers[len(failovers)-1].Seconds(), "failover_max_s")
	b.ReportMetric(float64(disagreements[len(disagreements)/2].Microseconds())/1000, "disagree_p50_ms")
	b.ReportMetric(float64(disagreements[len(disagreements)-1].Microseconds())/1000, "disagree_max_ms")
}
