package reconcile

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kvxds/kvxds/fleet"
	"github.com/kvxds/kvxds/test/dnstest"
	"github.com/kvxds/kvxds/xds/server"
	"github.com/kvxds/kvxds/xds/translate"
)

// replica is a vLLM metrics page on a loopback address.
type replica struct {
	host, port string
	waiting    atomic.Int64
}

func startReplica(t *testing.T, addr string) *replica {
	t.Helper()
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	r := &replica{}
	r.host, r.port, _ = net.SplitHostPort(lis.Addr().String())
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		fmt.Fprintf(w, `# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} %d
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 1
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.2
`, r.waiting.Load())
	}))
	srv.Listener.Close()
	srv.Listener = lis
	srv.Start()
	t.Cleanup(srv.Close)
	return r
}

func (r *replica) addr() string { return net.JoinHostPort(r.host, r.port) }

// sink is the xDS server, which can be told to refuse models.
type sink struct {
	*server.Server
	mu     sync.Mutex
	refuse bool
}

func (s *sink) Update(ctx context.Context, m fleet.Model) error {
	s.mu.Lock()
	refuse := s.refuse
	s.mu.Unlock()
	if refuse {
		return errors.New("refused")
	}
	return s.Server.Update(ctx, m)
}

func (s *sink) setRefuse(v bool) {
	s.mu.Lock()
	s.refuse = v
	s.mu.Unlock()
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func endpoints(f fleet.Fleet) map[string]fleet.Endpoint {
	out := map[string]fleet.Endpoint{}
	for _, p := range f.Pools {
		for _, e := range p.Endpoints {
			out[e.Identity()] = e
		}
	}
	return out
}

// The reconciler joins a static replica, replicas a real DNS server
// lists and the decisions scraped from their metric pages; it pushes on
// every change of any of them, and a model the sink refuses leaves the
// last good one in place.
func TestReconciler(t *testing.T) {
	static := startReplica(t, "127.0.0.1:0")
	dns1 := startReplica(t, "127.0.0.2:0")
	port, _ := strconv.Atoi(static.port)
	// The DNS replicas share a port: A records carry none.
	dns2 := startReplica(t, "127.0.0.3:"+dns1.port)

	srv := dnstest.Start(t)
	srv.Set(t, dnstest.Answer, "vllm.test. 0 IN A 127.0.0.2")
	p := mustParse(t, fmt.Sprintf(`
pool "chat" {
  port = 10000
  hash {
    key { header = "x-session-id" }
  }
  static { endpoints = ["127.0.0.1:%d"] }
  dns {
    name     = "vllm.test"
    type     = "A"
    port     = %s
    resolver = %q
    refresh  = "1s"
  }
  metrics {
    interval    = "100ms"
    stale_after = "10s"
  }
  escape {
    max_queue_depth        = 10
    hold                   = "0s"
    max_saturated_fraction = 0.5
  }
}
`, port, dns1.port, srv.Addr))

	reg := prometheus.NewRegistry()
	out := &sink{Server: server.New(server.Options{})}
	r := New(Options{Sink: out, Logger: hclog.NewNullLogger(), Registerer: reg})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	defer r.Close()
	if err := r.Apply(ctx, p); err != nil {
		t.Fatal(err)
	}
	// The DNS source reported before the first push.
	if eps := endpoints(r.Fleet()); len(eps) != 2 || eps[static.addr()].Host == "" || eps[dns1.addr()].Host == "" {
		t.Fatalf("first push: %v, want the static and the DNS replica", eps)
	}
	if !out.Ready() {
		t.Fatal("the sink has no snapshot")
	}
	go r.Run(ctx)

	// Discovery: a record added.
	srv.Set(t, dnstest.Answer, "vllm.test. 0 IN A 127.0.0.2", "vllm.test. 0 IN A 127.0.0.3")
	waitFor(t, "the second DNS replica", func() bool { _, ok := endpoints(r.Fleet())[dns2.addr()]; return ok })
	if n := testutil.ToFloat64(r.updates.WithLabelValues(causeDiscovery)); n < 1 {
		t.Errorf("discovery pushes = %v", n)
	}

	// Metrics: a replica whose queue passes the escape threshold drains.
	static.waiting.Store(50)
	waitFor(t, "the saturated replica to drain", func() bool {
		return endpoints(r.Fleet())[static.addr()].Health == fleet.Draining
	})
	if n := testutil.ToFloat64(r.updates.WithLabelValues(causeMetrics)); n < 1 {
		t.Errorf("metric pushes = %v", n)
	}
	static.waiting.Store(0)
	waitFor(t, "the replica to recover", func() bool {
		return endpoints(r.Fleet())[static.addr()].Health == fleet.Healthy
	})

	// Fail static: a refused model leaves the last good one serving.
	out.setRefuse(true)
	before := r.Fleet()
	versions := out.Versions(translate.Envoy)
	srv.Set(t, dnstest.Answer, "vllm.test. 0 IN A 127.0.0.2")
	waitFor(t, "a refused push", func() bool { return testutil.ToFloat64(r.failures.WithLabelValues(causeDiscovery)) > 0 })
	if _, ok := endpoints(r.Fleet())[dns2.addr()]; !ok || len(endpoints(r.Fleet())) != len(endpoints(before)) {
		t.Fatalf("after a refused push the fleet is %v, want %v", endpoints(r.Fleet()), endpoints(before))
	}
	if got := out.Versions(translate.Envoy); fmt.Sprint(got) != fmt.Sprint(versions) {
		t.Fatalf("versions moved after a refused push: %v → %v", versions, got)
	}
	out.setRefuse(false)
	srv.Set(t, dnstest.Answer, "vllm.test. 0 IN A 127.0.0.2", "vllm.test. 0 IN A 127.0.0.4")
	waitFor(t, "the next good push", func() bool {
		eps := endpoints(r.Fleet())
		_, gone := eps[dns2.addr()]
		return !gone && len(eps) == 3
	})
}
