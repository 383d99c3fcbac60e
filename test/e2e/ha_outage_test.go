package e2e

import (
	"context"
	"io"
	"maps"
	"net"
	"net/url"
	"path/filepath"
	"reflect"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kvxds/kvxds/test/kube"
)

// cable is a TCP proxy to the API server that a test can cut: one
// instance's own network path.
type cable struct {
	t      *testing.T
	addr   string // where it listens
	target string

	mu    sync.Mutex
	lis   net.Listener
	conns []net.Conn
}

func newCable(t *testing.T, target string) *cable {
	c := &cable{t: t, addr: freeAddr(t), target: target}
	c.connect()
	t.Cleanup(c.cut)
	return c
}

func (c *cable) connect() {
	lis, err := net.Listen("tcp", c.addr)
	if err != nil {
		c.t.Fatal(err)
	}
	c.mu.Lock()
	c.lis = lis
	c.mu.Unlock()
	go func() {
		for {
			in, err := lis.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", c.target)
			if err != nil {
				in.Close()
				continue
			}
			c.mu.Lock()
			c.conns = append(c.conns, in, out)
			c.mu.Unlock()
			go func() { io.Copy(out, in); out.Close() }()
			go func() { io.Copy(in, out); in.Close() }()
		}
	}()
}

// cut closes the listener and every connection through it.
func (c *cable) cut() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lis != nil {
		c.lis.Close()
		c.lis = nil
	}
	for _, conn := range c.conns {
		conn.Close()
	}
	c.conns = nil
}

// kubeconfigVia rewrites a kubeconfig to reach the API server through a
// cable (the server's certificate names 127.0.0.1, whatever the port).
func kubeconfigVia(t *testing.T, path string, c *cable) string {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, cl := range cfg.Clusters {
		cl.Server = "https://" + c.addr
	}
	out := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, out); err != nil {
		t.Fatal(err)
	}
	return out
}

// The leader cut off from the API server loses the lease and stops
// deciding; its successor decides, and the cut-off instance serves the
// successor's decisions once it is back. Then the API server stops for
// 30 s: every instance keeps serving, nothing moves, and after it returns
// a leader carries on from the same decisions.
func TestHAPartitionAndOutage(t *testing.T) {
	// Mostly waiting (outages, leases): runs beside the other waiting tests.
	t.Parallel()
	cluster := kube.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	if _, err := cluster.Client().CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kvxds"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	admin := cluster.Kubeconfig(t)
	u, err := url.Parse(cluster.Config().Host)
	if err != nil {
		t.Fatal(err)
	}
	bs := startBackends(t, 4)
	members := []member{{bs[0], 1}, {bs[1], 1}, {bs[2], 1}, {bs[3], 1}}

	var group []*haInstance
	cables := map[string]*cable{}
	for _, id := range []string{"kvxds-a", "kvxds-b", "kvxds-c"} {
		cb := newCable(t, u.Host)
		cables[id] = cb
		path, _, _ := policyFile(t)
		writeAtomic(t, path, haPolicy(kubeconfigVia(t, admin, cb), members))
		i := &haInstance{id: id, xds: freeAddr(t), admin: freeAddr(t)}
		i.proc = startBinaryWith(t, []string{"serve", "--policy", path, "--xds", i.xds, "--admin", i.admin, "--id", id, "--log-level", "info"}, nil)
		proc := i.proc
		t.Cleanup(func() { proc.cmd.Process.Kill(); proc.cmd.Wait() })
		waitReady(t, i.admin)
		i.cl = newGoClient(t, i.xds)
		group = append(group, i)
	}
	leaderOf := func(is []*haInstance) *haInstance {
		var l []*haInstance
		for _, i := range is {
			if i.leading(t) {
				l = append(l, i)
			}
		}
		if len(l) != 1 {
			return nil
		}
		return l[0]
	}
	eventually(t, "one leader", func() bool { return leaderOf(group) != nil })
	leader := leaderOf(group)
	ss := sessions(numSessions)
	agree := func(what string, is []*haInstance, ref *haInstance) map[string]string {
		t.Helper()
		eventually(t, what+": every instance serves the same fleet", func() bool {
			f := servedFleet(t, ref.admin)
			for _, i := range is {
				if !reflect.DeepEqual(servedFleet(t, i.admin), f) {
					return false
				}
			}
			return true
		})
		var first map[string]string
		eventually(t, what+": clients of every instance agree", func() bool {
			first = route(t, is[0].cl, ss)
			for _, i := range is[1:] {
				if !maps.Equal(route(t, i.cl, ss), first) {
					return false
				}
			}
			return true
		})
		return first
	}

	// Saturate a replica, then cut the leader off.
	bs[0].setLoad(50, 0.5)
	eventually(t, "the saturated replica drained", func() bool { return drained(servedFleet(t, leader.admin), bs[0].addr) })
	saturated := agree("saturation", group, leader)
	cables[leader.id].cut()
	eventually(t, "the cut-off leader to stop leading", func() bool { return !leader.leading(t) })
	var rest []*haInstance
	for _, i := range group {
		if i != leader {
			rest = append(rest, i)
		}
	}
	eventually(t, "a successor", func() bool { return leaderOf(rest) != nil })
	successor := leaderOf(rest)
	for _, i := range group {
		if got := route(t, i.cl, ss); !maps.Equal(got, saturated) {
			n, _, _ := moved(saturated, got)
			t.Errorf("client of %s: %d sessions moved when the leader was cut off", i.id, n)
		}
	}
	// The successor's decisions win: the replica recovers everywhere
	// once the cut-off instance is reachable again.
	bs[0].setLoad(0, 0.1)
	eventually(t, "the successor to bring the replica back", func() bool { return !drained(servedFleet(t, successor.admin), bs[0].addr) })
	if !drained(servedFleet(t, leader.admin), bs[0].addr) {
		t.Error("the cut-off instance changed its decisions while it could not reach anyone")
	}
	cables[leader.id].connect()
	recovered := agree("reconnected", group, successor)
	if st, _ := haStatus(t, leader.admin); st.Leading || st.Leader != successor.id {
		t.Errorf("the reconnected instance's status %+v, want following %s", st, successor.id)
	}

	// The API server stops for 30 s: nothing moves anywhere.
	before := servedFleet(t, successor.admin)
	if err := cluster.Stop(); err != nil {
		t.Fatal(err)
	}
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(3 * time.Second) {
		for _, i := range group {
			if f := servedFleet(t, i.admin); !reflect.DeepEqual(f, before) {
				t.Fatalf("%s's fleet changed while the API server was down", i.id)
			}
			if got := route(t, i.cl, ss[:200]); !maps.Equal(got, subset(recovered, ss[:200])) {
				t.Fatalf("client of %s: sessions moved while the API server was down", i.id)
			}
		}
	}
	for _, i := range group {
		if st, _ := haStatus(t, i.admin); st.Leading {
			t.Errorf("%s still leads without the API server", i.id)
		}
	}
	if err := cluster.StartAgain(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a leader after the outage", func() bool { return leaderOf(group) != nil })
	if after := agree("after the outage", group, leaderOf(group)); !maps.Equal(after, recovered) {
		n, _, _ := moved(recovered, after)
		t.Errorf("%d sessions moved across the outage", n)
	}
}

func subset(m map[string]string, keys []string) map[string]string {
	out := make(map[string]string, len(keys))
	for _, k := range keys {
		out[k] = m[k]
	}
	return out
}
