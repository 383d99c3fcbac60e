package e2e

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/kvxds/kvxds/status"
)

// TestPythonCCoreSurvives: Debian's gRPC C-core 1.51 (python3-grpcio)
// crashes on a ring hash; kvxds recognises its version and serves it the
// pool without one, so on the default policy it routes every request,
// spreads them evenly, and is reported on the status page and in a
// metric, while grpc-go on the same kvxds keeps its affinity.
func TestPythonCCoreSurvives(t *testing.T) {
	bs := startBackends(t, 4)
	members := []member{{bs[0], 1}, {bs[1], 2}, {bs[2], 3}, {bs[3], 4}}
	path, xdsAddr, adminAddr := policyFile(t)
	writeAtomic(t, path, zonedPolicy(t, xdsAddr, adminAddr, members, []string{"a", "a", "a", "b"}))
	k := startInProcess(t, path, xdsAddr, adminAddr)
	defer k.stop()

	py := newPyClient(t, xdsAddr)
	ss := sessions(400)
	// Keyed requests, then keyless ones: all served, on every replica.
	got := route(t, py, ss)
	t.Logf("%s: %d sessions: %v", py.name(), len(ss), shares(got))
	if len(shares(got)) != len(bs) {
		t.Errorf("sessions reached %d of %d replicas", len(shares(got)), len(bs))
	}
	const n = 400
	seen := map[string]int{}
	ids, errs := py.callMany(make([][]string, n))
	for i, id := range ids {
		if errs[i] != nil {
			t.Fatalf("keyless request: %v", errs[i])
		}
		seen[id]++
	}
	t.Logf("%s: %d keyless requests: %v", py.name(), n, seen)
	for _, b := range bs {
		if c := seen[b.id]; c < n/len(bs)/2 {
			t.Errorf("replica %s served %d of %d keyless requests", b.id, c, n)
		}
	}
	// Still alive after all of them.
	if again := route(t, py, ss[:10]); len(again) != 10 {
		t.Errorf("routed %d of 10 sessions after the first calls", len(again))
	}

	// Reported.
	resp, err := http.Get("http://" + adminAddr + "/api/v1/status")
	if err != nil {
		t.Fatal(err)
	}
	var st status.Status
	err = json.NewDecoder(resp.Body).Decode(&st)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, dp := range st.DataPlanes {
		if !strings.HasPrefix(dp.NodeID, "e2e-py-") {
			continue
		}
		found = true
		t.Logf("data plane %s: kind %s, user agent %q, %s", dp.NodeID, dp.Kind, dp.UserAgent, dp.NoHash)
		if dp.Kind != "grpc-nohash" || !strings.Contains(dp.NoHash, "C-core 1.51 cannot hash; upgrade to 1.52 or later") {
			t.Errorf("data plane %s: kind %q, no_hash %q", dp.NodeID, dp.Kind, dp.NoHash)
		}
		if st.DataPlaneSync(&dp).Level != status.OK {
			t.Errorf("data plane %s: %s", dp.NodeID, st.DataPlaneSync(&dp))
		}
	}
	if !found {
		t.Error("the Python client is not among the data planes")
	}
	if v := metricWhere(t, adminAddr, "kvxds_xds_streams_without_hash", `client="C-core 1.51"`); v != 1 {
		t.Errorf("kvxds_xds_streams_without_hash = %v, want 1", v)
	}
	if v := metric(t, adminAddr, "kvxds_xds_nacks_total"); v != 0 {
		t.Errorf("clients rejected %v responses", v)
	}

	// grpc-go on the same kvxds keeps its ring.
	settle(t, newGoClient(t, xdsAddr), ss, predict(members, ss), "grpc-go beside C-core 1.51")
}
