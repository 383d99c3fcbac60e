package server

import (
	"bytes"
	"strings"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestCannotHashLoggedOnce: a client version that cannot hash is counted
// while its streams are open, shown in the status, and logged once per
// node however many streams it opens.
func TestCannotHashLoggedOnce(t *testing.T) {
	var buf bytes.Buffer
	m := newMetrics(nil)
	tr := newStreamTracker(hclog.New(&hclog.LoggerOptions{Output: &buf}), m, time.Now)
	node := &core.Node{Id: "py-1", UserAgentName: "gRPC C-core linux Python", UserAgentVersionType: &core.Node_UserAgentVersion{UserAgentVersion: "C-core 29.0.0 Python 1.51.1"}}
	gauge := m.noHash.WithLabelValues("C-core 1.51")
	for id := range int64(3) {
		tr.open(t.Context(), id, false)
		tr.OnStreamRequest(id, &discovery.DiscoveryRequest{Node: node, TypeUrl: "cds"})
		tr.OnStreamRequest(id, &discovery.DiscoveryRequest{Node: node, TypeUrl: "eds"})
	}
	if v := testutil.ToFloat64(gauge); v != 3 {
		t.Errorf("gauge %v with 3 streams open, want 3", v)
	}
	if n := strings.Count(buf.String(), "node py-1: C-core 1.51 cannot hash; upgrade to 1.52 or later"); n != 1 {
		t.Errorf("logged %d times, want once:\n%s", n, buf.String())
	}
	dps := tr.dataPlanes()
	if len(dps) != 1 || dps[0].Kind != "grpc-nohash" || !strings.Contains(dps[0].NoHash, "grpc#31766") || dps[0].UserAgent != "gRPC C-core linux Python C-core 29.0.0 Python 1.51.1" {
		t.Errorf("data planes %+v", dps)
	}
	for id := range int64(3) {
		tr.closed(id, node)
	}
	if v := testutil.ToFloat64(gauge); v != 0 {
		t.Errorf("gauge %v with every stream closed, want 0", v)
	}
}
