package e2e

import (
	"fmt"
	"strings"
	"testing"
)

// zonedPolicy is policyText with each member in the zone of the same
// index.
func zonedPolicy(t *testing.T, xdsAddr, adminAddr string, members []member, zones []string) string {
	t.Helper()
	text := policyText(xdsAddr, adminAddr, members)
	for i, m := range members {
		old := fmt.Sprintf("    endpoint %q {\n", m.b.addr)
		if !strings.Contains(text, old) {
			t.Fatalf("policy has no %q", old)
		}
		text = strings.Replace(text, old, old+fmt.Sprintf("      region = \"r1\"\n      zone = %q\n", zones[i]), 1)
	}
	return text
}

// TestZonesOfUnequalSize: a pool spread over zones of unequal size, with
// weights 1..4, is one ring for every gRPC client: each routes every
// session where the ring of the replicas' own weights puts it (the zones
// play no part), and keyless requests on grpc-go's round robin reach
// every replica equally.
func TestZonesOfUnequalSize(t *testing.T) {
	for _, layout := range [][]string{
		{"a", "a", "a", "b"},
		{"a", "b", "b", "c", "c", "c"},
	} {
		for _, dp := range dataPlanes {
			t.Run(fmt.Sprintf("%s/%s", dp.name, strings.Join(layout, "")), func(t *testing.T) {
				bs := startBackends(t, len(layout))
				var members []member
				for i, b := range bs {
					members = append(members, member{b, 1 + i%4})
				}
				path, xdsAddr, adminAddr := policyFile(t)
				writeAtomic(t, path, zonedPolicy(t, xdsAddr, adminAddr, members, layout))
				k := startInProcess(t, path, xdsAddr, adminAddr)
				defer k.stop()
				ss := sessions(numSessions)
				cl := dp.new(t, xdsAddr)
				got := settle(t, cl, ss, predict(members, ss), "zones "+strings.Join(layout, ""))
				per := shares(got)
				var parts []string
				for i, m := range members {
					parts = append(parts, fmt.Sprintf("%s (zone %s, weight %d): %d", m.b.id, layout[i], m.weight, per[m.b.id]))
				}
				t.Logf("%d sessions: %s", len(ss), strings.Join(parts, ", "))
				if n := metric(t, adminAddr, "kvxds_xds_nacks_total"); n != 0 {
					t.Errorf("clients rejected %v responses", n)
				}
				if dp.name == "grpc-js" {
					return // no keyless cluster: keyless requests hash at random
				}
				warm := map[string]bool{}
				eventually(t, "keyless requests on every replica", func() bool {
					warm[callWith(t, cl)] = true
					return len(warm) == len(bs)
				})
				n := 100 * len(bs)
				seen := map[string]int{}
				for range n {
					seen[callWith(t, cl)]++
				}
				t.Logf("%d keyless requests: %v", n, seen)
				for _, b := range bs {
					if seen[b.id] != n/len(bs) {
						t.Errorf("replica %s served %d of %d keyless requests, want %d", b.id, seen[b.id], n, n/len(bs))
					}
				}
			})
		}
	}
}
