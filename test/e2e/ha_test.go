package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"reflect"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/xds"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kvxds/kvxds/fleet"
	"github.com/kvxds/kvxds/reconcile"
	"github.com/kvxds/kvxds/test/kube"
	"github.com/kvxds/kvxds/xds/bootstrap"
)

// haStatus is an instance's /debug/ha.
func haStatus(t testing.TB, adminAddr string) (reconcile.HAStatus, bool) {
	t.Helper()
	resp, err := http.Get("http://" + adminAddr + "/debug/ha")
	if err != nil {
		return reconcile.HAStatus{}, false
	}
	defer resp.Body.Close()
	var st reconcile.HAStatus
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	return st, true
}

// haLease is the lease duration of the HA tests' policy.
const haLease = 4 * time.Second

// haPolicy is pool "chat" of members with metric-driven health (fixed
// weights), its instances electing a leader through kubeconfig's API
// server with short lease timings; each instance gets its listen
// addresses as flags.
func haPolicy(kubeconfig string, members []member) string {
	return fmt.Sprintf(`ha {
  kubernetes {
    namespace      = "kvxds"
    lease          = "kvxds-chat"
    kubeconfig     = %q
    lease_duration = %q
    renew_deadline = "3s"
    retry_period   = "500ms"
  }
}
`, kubeconfig, haLease) + dynamicPolicy("127.0.0.1:1", "127.0.0.1:2", members, fixedWeights)
}

// haInstance is one kvxds process of an HA group.
type haInstance struct {
	id, xds, admin string
	proc           *binary
	cl             client
}

func (i *haInstance) leading(t *testing.T) bool {
	st, ok := haStatus(t, i.admin)
	return ok && st.Leading
}

func drained(f fleet.Fleet, addr string) bool {
	for _, p := range f.Pools {
		for _, e := range p.Endpoints {
			if e.Address() == addr {
				return e.Health == fleet.Draining
			}
		}
	}
	return false
}

// Three kvxds processes share a Lease on a real API server: one scrapes
// and decides, every one serves the same fleet, and grpc-go clients
// attached to different instances route every session to the same
// replica, including while a replica is saturated and drained. The
// leader killed with SIGKILL during the saturation: another leads within
// the lease duration, starting from its decisions, and no client's
// session moves.
func TestHAKubernetes(t *testing.T) {
	// Mostly waiting (outages, leases): runs beside the other waiting tests.
	t.Parallel()
	cluster := kube.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, err := cluster.Client().CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kvxds"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	bs := startBackends(t, 4)
	members := []member{{bs[0], 1}, {bs[1], 1}, {bs[2], 1}, {bs[3], 1}}
	path, _, _ := policyFile(t)
	// A second pool bounds prompt bytes on every Envoy's load: the
	// followers report theirs to the leader at its advertised address.
	text := haPolicy(cluster.Kubeconfig(t), members) + `
pool "docs" {
  port = 10001
  hash {
    key { prompt_prefix = 1024 }
    balance_on    = "prompt_bytes"
    load_interval = "200ms"
  }
  static { endpoints = ["127.0.0.1:1"] }
}
`
	writeAtomic(t, path, text)

	var group []*haInstance
	for _, id := range []string{"kvxds-a", "kvxds-b", "kvxds-c"} {
		i := &haInstance{id: id, xds: freeAddr(t), admin: freeAddr(t)}
		i.proc = startBinaryWith(t, []string{"serve", "--policy", path, "--xds", i.xds, "--admin", i.admin, "--id", id, "--log-level", "info",
			"--advertise-admin", "http://" + i.admin}, nil)
		proc := i.proc
		t.Cleanup(func() { proc.cmd.Process.Kill(); proc.cmd.Wait() })
		waitReady(t, i.admin)
		group = append(group, i)
	}
	leaders := func(is []*haInstance) []*haInstance {
		var out []*haInstance
		for _, i := range is {
			if i.leading(t) {
				out = append(out, i)
			}
		}
		return out
	}
	eventually(t, "one leader", func() bool { return len(leaders(group)) == 1 })
	leader := leaders(group)[0]
	// reporting: every other instance reports its load to the leader.
	reporting := func(leader *haInstance, others []*haInstance) func() bool {
		return func() bool {
			st, ok := haStatus(t, leader.admin)
			if !ok || st.LoadReporters != len(others) {
				return false
			}
			for _, i := range others {
				if st, ok := haStatus(t, i.admin); !ok || st.LoadReportsTo != "http://"+leader.admin || st.LoadReportError != "" {
					return false
				}
			}
			return true
		}
	}
	var followers []*haInstance
	for _, i := range group {
		if i != leader {
			followers = append(followers, i)
		}
	}
	eventually(t, "the followers to report their load to the leader", reporting(leader, followers))
	for _, i := range group {
		i.cl = newGoClient(t, i.xds)
	}
	ss := sessions(numSessions)
	agree := func(what string) map[string]string {
		t.Helper()
		var ref fleet.Fleet
		eventually(t, what+": every instance serves the leader's fleet", func() bool {
			ref = servedFleet(t, leader.admin)
			for _, i := range group {
				if i.proc != nil && !reflect.DeepEqual(servedFleet(t, i.admin), ref) {
					return false
				}
			}
			return true
		})
		var first map[string]string
		eventually(t, what+": clients of every instance agree", func() bool {
			first = route(t, group[0].cl, ss)
			for _, i := range group[1:] {
				if !maps.Equal(route(t, i.cl, ss), first) {
					return false
				}
			}
			return true
		})
		return first
	}
	steady := agree("steady state")

	// A saturated replica drains on every instance at once.
	bs[0].setLoad(50, 0.5)
	eventually(t, "the leader to drain the saturated replica", func() bool { return drained(servedFleet(t, leader.admin), bs[0].addr) })
	saturated := agree("saturation")
	if n, _, _ := moved(steady, saturated); n == 0 {
		t.Fatal("no session moved off the saturated replica")
	}
	for s, id := range saturated {
		if id == bs[0].id {
			t.Fatalf("session %s still on the saturated replica", s)
		}
	}

	// kill -9 the leader during the saturation.
	killed := time.Now()
	leader.proc.cmd.Process.Kill()
	leader.proc.cmd.Wait()
	var rest []*haInstance
	for _, i := range group {
		if i != leader {
			rest = append(rest, i)
		}
	}
	eventually(t, "a new leader", func() bool { return len(leaders(rest)) == 1 })
	took := time.Since(killed)
	t.Logf("new leader %s after SIGKILL (lease duration %s)", took.Round(time.Millisecond), haLease)
	if took > haLease+5*time.Second {
		t.Errorf("new leader after %s, want within the lease duration %s (plus retries)", took, haLease)
	}
	newLeader := leaders(rest)[0]
	st, _ := haStatus(t, newLeader.admin)
	if st.Leader != newLeader.id {
		t.Errorf("new leader's status %+v", st)
	}
	for _, i := range rest {
		if i != newLeader {
			eventually(t, "the other survivor to report its load to the new leader", reporting(newLeader, []*haInstance{i}))
		}
	}
	// Nothing moves: the new leader starts from the published decisions,
	// and the killed instance's client keeps its last configuration.
	for _, i := range group {
		if got := route(t, i.cl, ss); !maps.Equal(got, saturated) {
			n, from, to := moved(saturated, got)
			t.Errorf("client of %s: %d sessions moved at the failover (from %v to %v)", i.id, n, from, to)
		}
	}
	if !drained(servedFleet(t, newLeader.admin), bs[0].addr) {
		t.Error("the new leader does not keep the saturated replica out")
	}
	// A client starting now, whose bootstrap lists the killed instance
	// first, falls back to the next one and routes every session alike.
	fallback := newFallbackClient(t, []string{leader.xds, newLeader.xds})
	if got := route(t, fallback, ss); !maps.Equal(got, saturated) {
		n, _, _ := moved(saturated, got)
		t.Errorf("a client falling back to another instance routes %d sessions elsewhere", n)
	}

	// The new leader decides: the replica recovers on every survivor.
	leader.proc = nil
	leader = newLeader
	bs[0].setLoad(0, 0.1)
	eventually(t, "the new leader to bring the replica back", func() bool { return !drained(servedFleet(t, leader.admin), bs[0].addr) })
	group = rest
	if back := agree("recovery"); !maps.Equal(back, steady) {
		n, _, _ := moved(steady, back)
		t.Errorf("%d sessions not back where they were before the saturation", n)
	}
}

// newFallbackClient is a grpc-go client of pool "chat" whose bootstrap
// lists several kvxds instances, as `kvxds bootstrap --grpc --xds a,b`
// prints it.
func newFallbackClient(t *testing.T, xdsAddrs []string) client {
	t.Helper()
	cfg, err := bootstrap.GRPCJSON(bootstrap.Options{NodeID: "e2e-fallback-" + t.Name(), XDSAddresses: xdsAddrs})
	if err != nil {
		t.Fatal(err)
	}
	r, err := xds.NewXDSResolverWithConfigForTesting(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cc, err := grpc.NewClient("xds:///chat", grpc.WithResolvers(r), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return &goClient{cl: testgrpc.NewTestServiceClient(cc)}
}
