package examples_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/hashicorp/go-hclog"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/kvxds/kvxds/controller"
	"github.com/kvxds/kvxds/test/sim"
)

// series are the series names a kvxds instance exports, each with the
// label names its series carry.
type series map[string]map[string]bool

// add records the series of one metric family under the names Prometheus
// stores them: a histogram x as x_bucket (with le), x_sum and x_count, a
// summary x as x (with quantile), x_sum and x_count.
func (s series) add(mf *dto.MetricFamily) {
	base := mf.GetName()
	for _, m := range mf.GetMetric() {
		var names []string
		extra := ""
		switch mf.GetType() {
		case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
			names = []string{base + "_bucket", base + "_sum", base + "_count"}
			extra = model.BucketLabel
		case dto.MetricType_SUMMARY:
			names = []string{base, base + "_sum", base + "_count"}
			extra = model.QuantileLabel
		default:
			names = []string{base}
		}
		for i, name := range names {
			labels := s[name]
			if labels == nil {
				labels = map[string]bool{}
				s[name] = labels
			}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = true
			}
			if i == 0 && extra != "" {
				labels[extra] = true
			}
		}
	}
}

// liveSeries runs a leader kvxds and a follower on a policy file, with
// metric-driven weights over two simulated vLLM replicas, makes a data
// plane NACK, sends the replicas traffic that hits their prefix caches,
// then saturates both so that the pool falls back to pure affinity, and
// returns the union of the series both instances export on their admin
// /metrics meanwhile.
func liveSeries(t *testing.T) series {
	t.Helper()
	// One running request per replica: requests beyond it queue.
	replicas, err := sim.StartFleet(2, sim.Config{MaxRunning: 1})
	if err != nil {
		t.Fatal(err)
	}
	var eps []string
	for _, r := range replicas {
		t.Cleanup(func() { r.Close() })
		eps = append(eps, fmt.Sprintf("%q", r.Addr()))
	}
	pool := `
pool "chat" {
  port = 10000
  hash {
    key { header = "x-session-id" }
  }
  static { endpoints = [` + strings.Join(eps, ", ") + `] }
  metrics {
    interval = "250ms"
    timeout  = "200ms"
  }
  # Absolute thresholds: both replicas queue alike, and the pool must
  # fall back when both saturate (relative ones would judge neither).
  escape {
    max_queue_depth = 2
    relative_queue  = 0
  }
}
`
	leader := startKVXDS(t, "leader", pool)
	follower := startKVXDS(t, "follower", fmt.Sprintf("ha { follow = %q }\n", "http://"+leader.AdminAddr())+pool)
	nack(t, leader.XDSAddr())

	out := series{}
	waitFor := func(what string, want []string, load func()) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			load()
			for _, c := range []*controller.Controller{leader, follower} {
				scrape(t, "http://"+c.AdminAddr()+"/metrics", out)
			}
			missing := ""
			for _, name := range want {
				if _, ok := out[name]; !ok {
					missing = name
				}
			}
			if missing == "" {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: timed out waiting for %s on /metrics", what, missing)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	// Traffic while kvxds scrapes, so that the replicas' prefix caches
	// hit between two scrapes and the pool has a hit rate.
	prompt := strings.Repeat("the same long system prompt ", 40)
	waitFor("traffic", []string{"kvxds_pool_hit_rate", "kvxds_xds_nacks_total", "kvxds_replica_weight_multiplier", "kvxds_ha_source_up"}, func() {
		for _, r := range replicas {
			complete(t, r.Addr(), prompt, 2)
		}
	})
	// Long requests queue on both replicas: both saturate, which is
	// more than max_saturated_fraction, and queue enough for a balance.
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	for _, r := range replicas {
		for range 8 {
			go func() {
				req, err := completionRequest(ctx, r.Addr(), "a long generation", 1000)
				if err != nil {
					return
				}
				if resp, err := http.DefaultClient.Do(req); err == nil {
					resp.Body.Close()
				}
			}()
		}
	}
	waitFor("saturation", []string{"kvxds_pool_affinity_fallback", "kvxds_pool_balance"}, func() {})
	return out
}

// startKVXDS runs kvxds on a policy file until the test ends.
func startKVXDS(t *testing.T, name, policyText string) *controller.Controller {
	t.Helper()
	file := filepath.Join(t.TempDir(), name+".hcl")
	if err := os.WriteFile(file, []byte(policyText), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := controller.New(controller.Options{
		PolicyFile: file, XDSAddress: "127.0.0.1:0", AdminAddress: "127.0.0.1:0", ID: name,
		Logger: hclog.New(&hclog.LoggerOptions{Name: name, Level: hclog.Warn, Output: testWriter{t}}),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("%s: %v", name, err)
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for !c.Server().Ready() {
		if time.Now().After(deadline) {
			t.Fatalf("%s not ready", name)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return c
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// complete sends one completion request to a replica.
func complete(t *testing.T, addr, prompt string, maxTokens int) {
	t.Helper()
	req, err := completionRequest(context.Background(), addr, prompt, maxTokens)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("completion on %s: %s", addr, resp.Status)
	}
}

func completionRequest(ctx context.Context, addr, prompt string, maxTokens int) (*http.Request, error) {
	body, err := json.Marshal(map[string]any{"prompt": prompt, "max_tokens": maxTokens})
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/v1/completions", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	return req, nil
}

// nack connects an Envoy-like data plane over ADS and rejects the
// clusters it is sent.
func nack(t *testing.T, addr string) {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	stream, err := discovery.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&discovery.DiscoveryRequest{Node: &core.Node{Id: "envoy-1", UserAgentName: "envoy"}, TypeUrl: resourcev3.ClusterType}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&discovery.DiscoveryRequest{
		TypeUrl: resourcev3.ClusterType, ResponseNonce: resp.GetNonce(),
		ErrorDetail: &status.Status{Code: 3, Message: "rejected by the test"},
	}); err != nil {
		t.Fatal(err)
	}
}

// scrape adds the series on a /metrics page to s.
func scrape(t *testing.T, url string, s series) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s: %s", url, resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("%s: %v", url, err)
	}
	for _, mf := range families {
		s.add(mf)
	}
}
