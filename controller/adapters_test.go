package controller

import (
	"context"
	"strings"
	"testing"

	datav3 "github.com/envoyproxy/go-control-plane/envoy/data/accesslog/v3"
	"github.com/hashicorp/go-hclog"

	"github.com/kvxds/kvxds/xds/translate"
)

const adaptersPolicy = `
pool "chat" {
  port = 10000
  hash {
    key { header = "x-session-id" }
    hot_keys { enabled = false }
    # No bound: Envoy gets the adapters' clusters and routes, as gRPC
    # clients do (bounding prompt bytes, its pick table places them).
    balance_factor = 0
  }
  static { endpoints = ["10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000", "10.0.0.4:8000"] }
  adapters {
    base_models = ["llama"]
    max_lora    = 2
    interval    = "100ms"
  }
}
`

// An Envoy's access logs, streamed over a real gRPC stream, place the
// adapter that carries three quarters of the pool's requests on
// ceil(0.75 × 4 × 0.5) = 2 replicas: a cluster, an assignment and a route
// of the served resources, on the status document and /metrics, with the
// rejected adapter fields counted.
func TestAdaptersFromAccessLogs(t *testing.T) {
	c, err := New(Options{
		PolicySource: []byte(adaptersPolicy), PolicyName: "lora.hcl",
		XDSAddress: "127.0.0.1:0", AdminAddress: "127.0.0.1:0",
		Logger: hclog.New(&hclog.LoggerOptions{Name: "lora", Level: hclog.Warn, Output: testWriter{t}}),
		ID:     "lora",
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
	defer func() { cancel(); <-done }()
	waitUntil(t, "ready", func() bool { return c.Server().Ready() })
	listeners := c.Server().Versions(translate.Envoy)["type.googleapis.com/envoy.config.listener.v3.Listener"]

	var entries []*datav3.HTTPAccessLogEntry
	for i := range 400 {
		h := map[string]string{"x-session-id": "s"}
		switch i % 4 {
		case 0, 2, 3:
			h["x-kvxds-adapter"] = "sql-lora"
		case 1:
			h["x-kvxds-adapter-rejected"] = "not_string"
		}
		entries = append(entries, &datav3.HTTPAccessLogEntry{
			CommonProperties: &datav3.AccessLogCommon{UpstreamCluster: "chat"},
			Request:          &datav3.HTTPRequestProperties{RequestHeaders: h},
		})
	}
	if err := openLogs(t, c.XDSAddr(), "envoy-1", "kvxds/chat", entries)(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "sql-lora placed", func() bool { return len(c.Fleet().Pools[0].Adapters) == 1 })
	if a := c.Fleet().Pools[0].Adapters[0]; a.Name != "sql-lora" || a.Replicas != 3 {
		t.Errorf("placed %+v, want sql-lora on 3 (ceil(0.75 × 4 × 0.75))", a)
	}
	// Make before break: the adapter's cluster is served first, its
	// route from the next decision on.
	served := func() (cluster, route bool) {
		res := c.Server().Resources(translate.Envoy)
		for _, cl := range res.Clusters {
			cluster = cluster || cl.GetName() == "chat/adapter/sql-lora"
		}
		return cluster, len(res.Routes) > 0 && strings.Contains(res.Routes[0].String(), "sql-lora")
	}
	waitUntil(t, "sql-lora routed", func() bool { _, r := served(); return r })
	if cluster, _ := served(); !cluster {
		t.Errorf("the served resources route to sql-lora without its cluster")
	}
	if v := c.Server().Versions(translate.Envoy)["type.googleapis.com/envoy.config.listener.v3.Listener"]; v != listeners {
		t.Errorf("the listener moved with the placement")
	}

	as := statusOf(t, c.AdminAddr()).Pools[0].Adapters
	if as == nil || len(as.Adapters) != 1 || len(as.Adapters[0].Members) != 3 || as.Requests != 400 || as.AdapterRequests != 300 || as.Rejected["not_string"] != 100 {
		t.Fatalf("status adapters: %+v", as)
	}
	wantMetrics(t, scrape(t, "http://"+c.AdminAddr()+"/metrics"), []metricWant{
		{"kvxds_adapter_replicas", map[string]string{"pool": "chat", "adapter": "sql-lora"}, 3},
		{"kvxds_adapter_members", map[string]string{"pool": "chat", "adapter": "sql-lora"}, 3},
		{"kvxds_adapter_moves_total", map[string]string{"pool": "chat", "cause": "demand"}, 1},
		{"kvxds_adapter_rejected_total", map[string]string{"pool": "chat", "reason": "not_string"}, 100},
		{"kvxds_adapter_requests_logged_total", map[string]string{"pool": "chat", "kind": "adapter"}, 300},
		{"kvxds_access_log_entries_total", map[string]string{"result": "no_key"}, 0},
	})
}
