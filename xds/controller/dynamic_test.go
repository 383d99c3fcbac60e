package controller

import (
	"testing"

	"github.com/kvxds/kvxds/policy"
	"github.com/kvxds/kvxds/weights"
	"github.com/kvxds/kvxds/xds/fleet"
)

func TestApplyDecisions(t *testing.T) {
	base := fleet.Fleet{Pools: []fleet.Pool{
		{Name: "chat", Endpoints: []fleet.Endpoint{
			{HashKey: "a", Weight: 2},
			{HashKey: "b", Weight: 1},
			{HashKey: "c", Weight: 3},
		}},
		{Name: "static", Endpoints: []fleet.Endpoint{{HashKey: "a", Weight: 5}}},
	}}
	got := applyDecisions(base, map[string]map[string]weights.Decision{
		"chat": {
			"a": {Weight: 4},
			"b": {Weight: 2, Health: weights.Saturated},
			// c has no decision yet: unchanged.
		},
	})
	want := []fleet.Endpoint{
		{HashKey: "a", Weight: 8},
		{HashKey: "b", Weight: 2, Health: fleet.Draining},
		{HashKey: "c", Weight: 3},
	}
	for i, e := range got.Pools[0].Endpoints {
		if e != want[i] {
			t.Errorf("endpoint %d = %+v, want %+v", i, e, want[i])
		}
	}
	if got.Pools[1].Endpoints[0].Weight != 5 {
		t.Error("a pool without decisions changed")
	}
	if base.Pools[0].Endpoints[0].Weight != 2 || base.Pools[0].Endpoints[1].Health != fleet.Healthy {
		t.Error("applyDecisions modified its input")
	}
}

func TestProfileOf(t *testing.T) {
	if p := profileOf(policy.Metrics{Engine: "vllm"}); p == nil || p.Name != "vllm" {
		t.Fatalf("vllm profile = %+v", p)
	}
	p := profileOf(policy.Metrics{Engine: "custom", Signals: map[string]policy.SignalSource{
		"queue_depth":  {Metric: "q", Labels: map[string]string{"gpu": "0"}},
		"kv_occupancy": {Metric: "kv", Scale: 0.01},
	}})
	if len(p.QueueDepth) != 1 || p.QueueDepth[0].Name != "q" || p.QueueDepth[0].Labels["gpu"] != "0" {
		t.Errorf("queue depth = %+v", p.QueueDepth)
	}
	if len(p.KVOccupancy) != 1 || p.KVOccupancy[0].Scale != 0.01 || len(p.Running) != 0 {
		t.Errorf("kv = %+v, running = %+v", p.KVOccupancy, p.Running)
	}
}
