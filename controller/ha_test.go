package controller

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/kvxds/kvxds/fleet"
	"github.com/kvxds/kvxds/xds/translate"
)

// engine is a vLLM metrics page on loopback.
type engine struct {
	addr    string
	waiting atomic.Int64
}

func startEngine(t *testing.T) *engine {
	t.Helper()
	e := &engine{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		fmt.Fprintf(w, `# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} %d
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25
`, e.waiting.Load())
	}))
	t.Cleanup(srv.Close)
	e.addr = srv.Listener.Addr().String()
	return e
}

func haPolicy(engines []*engine, extra string) string {
	var eps []string
	for _, e := range engines {
		eps = append(eps, fmt.Sprintf("%q", e.addr))
	}
	return extra + `
pool "chat" {
  port = 10000
  hash {
    key { header = "x-session-id" }
  }
  static { endpoints = [` + strings.Join(eps, ", ") + `] }
  metrics {
    interval    = "100ms"
    stale_after = "30s"
  }
  escape {
    max_queue_depth = 10
    hold            = "0s"
  }
  weights { min_interval = "0s" }
}
`
}

type running struct {
	c      *Controller
	cancel context.CancelFunc
	done   chan error
}

func startController(t *testing.T, name, policyText, admin string) *running {
	t.Helper()
	c, err := New(Options{
		PolicySource: []byte(policyText), PolicyName: name + ".hcl",
		XDSAddress: "127.0.0.1:0", AdminAddress: cmpOr(admin, "127.0.0.1:0"),
		Logger: hclog.New(&hclog.LoggerOptions{Name: name, Level: hclog.Warn, Output: testWriter{t}}),
		ID:     name,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{c: c, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- c.Run(ctx) }()
	t.Cleanup(r.stop)
	waitUntil(t, name+" ready", func() bool { return c.Server().Ready() })
	return r
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func (r *running) stop() {
	if r.cancel != nil {
		r.cancel()
		<-r.done
		r.cancel = nil
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func endpointHealth(f fleet.Fleet, addr string) fleet.Health {
	for _, p := range f.Pools {
		for _, e := range p.Endpoints {
			if e.Address() == addr {
				return e.Health
			}
		}
	}
	return -1
}

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// An instance that follows another serves byte-identical resources and
// versions, including while a replica is saturated and drained; when the
// followed instance goes away, the follower keeps serving its last
// decisions and says so; when it returns, the follower follows again.
func TestFollow(t *testing.T) {
	engines := []*engine{startEngine(t), startEngine(t), startEngine(t), startEngine(t)}
	leader := startController(t, "leader", haPolicy(engines, ""), "")
	leaderAdmin := leader.c.AdminAddr()
	follower := startController(t, "follower", haPolicy(engines, fmt.Sprintf("ha { follow = %q }\n", "http://"+leaderAdmin)), "")

	same := func() bool {
		return reflect.DeepEqual(leader.c.Fleet(), follower.c.Fleet()) &&
			reflect.DeepEqual(leader.c.Server().Versions(translate.Envoy), follower.c.Server().Versions(translate.Envoy)) &&
			reflect.DeepEqual(leader.c.Server().Versions(translate.GRPC), follower.c.Server().Versions(translate.GRPC))
	}
	waitUntil(t, "the follower to serve the leader's decisions", func() bool {
		return follower.c.reconcile.HA().Leader == "leader" && same()
	})

	// A saturated replica drains on both; the follower follows within
	// one long-poll round trip.
	engines[0].waiting.Store(50)
	waitUntil(t, "the leader to drain the saturated replica", func() bool {
		return endpointHealth(leader.c.Fleet(), engines[0].addr) == fleet.Draining
	})
	start := time.Now()
	waitUntil(t, "the follower to drain it too", func() bool { return same() })
	t.Logf("the follower agreed %v after the leader", time.Since(start))
	if endpointHealth(follower.c.Fleet(), engines[0].addr) != fleet.Draining {
		t.Fatal("the follower does not drain the saturated replica")
	}
	if st := follower.c.reconcile.HA(); st.Leading || !st.Reachable || st.Term != 0 {
		t.Errorf("follower status %+v", st)
	}

	// The leader goes away: nothing moves on the follower.
	before := follower.c.Fleet()
	versions := follower.c.Server().Versions(translate.Envoy)
	leader.stop()
	engines[0].waiting.Store(0) // nobody scrapes it now
	waitUntil(t, "the follower to notice", func() bool { return !follower.c.reconcile.HA().Reachable })
	time.Sleep(300 * time.Millisecond)
	if !reflect.DeepEqual(follower.c.Fleet(), before) || !reflect.DeepEqual(follower.c.Server().Versions(translate.Envoy), versions) {
		t.Fatal("the follower's configuration moved while the leader was away")
	}
	if body := get(t, "http://"+follower.c.AdminAddr()+"/readyz"); !strings.Contains(body, "unreachable, serving the last decisions") {
		t.Errorf("/readyz says %q", body)
	}

	// The leader returns on its address: the follower follows again.
	if l, err := net.Listen("tcp", leaderAdmin); err != nil {
		t.Skipf("the leader's admin address was taken meanwhile: %v", err)
	} else {
		l.Close() // only probing that it is free
	}
	leader = startController(t, "leader", haPolicy(engines, ""), leaderAdmin)
	waitUntil(t, "the follower to reach the leader again", func() bool {
		return follower.c.reconcile.HA().Reachable && same() && endpointHealth(follower.c.Fleet(), engines[0].addr) == fleet.Healthy
	})
}

// kvxds answers gRPC health checks, which Envoy's bootstrap for several
// instances uses to leave a dead one.
func TestGRPCHealth(t *testing.T) {
	r := startController(t, "one", haPolicy([]*engine{startEngine(t)}, ""), "")
	cc, err := grpc.NewClient(r.c.XDSAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	resp, err := healthpb.NewHealthClient(cc).Check(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health: %v, %v", resp, err)
	}
}
