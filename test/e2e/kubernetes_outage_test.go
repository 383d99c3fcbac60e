package e2e

import (
	"context"
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kvxds/kvxds/test/kube"
)

// eventuallyWithin is eventually with its own deadline, for waits that
// client-go's backoff paces.
func eventuallyWithin(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// A Kubernetes API server that is down for 30 s changes nothing for the
// data plane: kvxds keeps the last pods it saw (fail static), grpc-go and
// grpc-js keep routing every session where it was without a failed call,
// and the served fleet stays as it was. Once the server is back, kvxds's
// watch resumes by itself: a pod added afterwards takes its share of
// sessions, and only those move.
func TestKubernetesAPIServerOutage(t *testing.T) {
	// Mostly waiting (outages, leases): runs beside the other waiting tests.
	t.Parallel()
	const outage = 30 * time.Second
	cluster := kube.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	kc := cluster.Client()
	if _, err := kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "llm"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p, names := newPods(t, ctx, kc, "vllm", 41, 5)
	p.publish(names[:4])

	path, xdsAddr, adminAddr := policyFile(t)
	writeAtomic(t, path, kubernetesPolicy(xdsAddr, adminAddr, cluster.Kubeconfig(t)))
	k := startInProcess(t, path, xdsAddr, adminAddr)
	defer k.stop()

	// Both clients, each with its own ring identity of a pod: grpc-go
	// its name (hash_key), grpc-js its address.
	type routed struct {
		cl   client
		key  func(member) string
		want expectation
		last map[string]string
	}
	ss := sessions(1000)
	clients := []*routed{
		{cl: newGoClient(t, xdsAddr), key: func(m member) string { return m.b.id }},
		{cl: newJSClient(t, xdsAddr), key: func(m member) string { return m.b.addr }},
	}
	for _, c := range clients {
		c.want = predictKeyed(p.members(names[:4]...), ss, 0, c.key)
		c.last = settle(t, c.cl, ss, c.want, "4 pods")
	}
	fleetBefore := servedFleet(t, adminAddr)

	if err := cluster.Stop(); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	passes := 0
	for time.Since(stopped) < outage {
		// route fails the test on any failed call.
		for _, c := range clients {
			if n, from, to := moved(c.last, route(t, c.cl, ss)); n != 0 {
				t.Fatalf("%s, %v into the outage: %d sessions moved (from %v to %v)", c.cl.name(), time.Since(stopped).Round(time.Second), n, from, to)
			}
		}
		if f := servedFleet(t, adminAddr); !reflect.DeepEqual(f, fleetBefore) {
			t.Fatalf("%v into the outage the served fleet changed:\n%+v\nwas\n%+v", time.Since(stopped).Round(time.Second), f, fleetBefore)
		}
		passes++
	}
	t.Logf("API server down for %v: %d passes of %d sessions with each client, none moved or failed", outage, passes, len(ss))
	// kvxds noticed (and counted) that it could no longer tell, but kept
	// serving what it knew.
	if n := metric(t, adminAddr, "kvxds_discovery_errors_total"); n == 0 {
		t.Error("the outage was not counted in kvxds_discovery_errors_total")
	}

	if err := cluster.StartAgain(); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	// A pod added once the server is back reaches the clients only if
	// kvxds's watch resumed. client-go's reflector retries on a backoff
	// grown during the outage (up to 30 s, jittered up to twice that),
	// then may relist after another (the new server's watch cache starts
	// later than kvxds's resource version): 30–55 s here.
	p.publish(names[:5])
	eventuallyWithin(t, 3*time.Minute, "kvxds to serve the pod added after the outage", func() bool {
		return len(servedFleet(t, adminAddr).Pools[0].Endpoints) == 5
	})
	t.Logf("the pod added after the outage was served %v after the API server was back", time.Since(back).Round(100*time.Millisecond))
	for _, c := range clients {
		want := predictKeyed(p.members(names[:5]...), ss, 0, c.key)
		next := settle(t, c.cl, ss, want, "a pod added after the outage")
		own, between := movement(c.last, next, names[4], c.want, want)
		t.Logf("%s: %d sessions moved to the new pod, %d between the others", c.cl.name(), own, between)
		if own == 0 || between > len(ss)/100 {
			t.Errorf("%s: the new pod took %d sessions, and %d moved between the others", c.cl.name(), own, between)
		}
	}
	if n := metric(t, adminAddr, "kvxds_xds_nacks_total"); n != 0 {
		t.Errorf("clients rejected %v responses", n)
	}
}
