package e2e

import (
	"cmp"
	"fmt"
	"testing"
)

// Requests that carry no hash key cannot pick a cache; a hash pool spreads
// them with its keyless balancer over the same replicas instead of
// hashing a random value for each, while keyed requests keep their
// affinity on every key of the chain.
func TestKeylessRequests(t *testing.T) {
	for _, tc := range []struct {
		keyless string // "" = the default
		exact   bool   // round robin: a strict rotation
	}{
		{"", true},
		{"least_request", false},
		{"random", false},
	} {
		for _, dp := range dataPlanes {
			t.Run(cmp.Or(tc.keyless, "default")+"/"+dp.name, func(t *testing.T) {
				// grpc-js takes a random hash on the ring for keyless
				// requests whatever the setting (see docs/concepts/clients.md, "What Envoy and
				// gRPC receive").
				exact := tc.exact && dp.name != "grpc-js"
				bs := startBackends(t, 4)
				members := []member{{bs[0], 1}, {bs[1], 1}, {bs[2], 1}, {bs[3], 1}}
				path, xdsAddr, adminAddr := policyFile(t)
				text := policyText(xdsAddr, adminAddr, members)
				if tc.keyless != "" {
					text = withHashSetting(t, text, fmt.Sprintf("keyless = %q", tc.keyless))
				}
				writeAtomic(t, path, text)
				k := startInProcess(t, path, xdsAddr, adminAddr)
				defer k.stop()
				cl := dp.new(t, xdsAddr)

				// Until every replica has served once, some connections may
				// still be coming up.
				warm := map[string]bool{}
				eventually(t, "keyless requests on every replica", func() bool {
					warm[callWith(t, cl)] = true
					return len(warm) == len(bs)
				})
				const n = 400
				seen := map[string]int{}
				for range n {
					seen[callWith(t, cl)]++
				}
				t.Logf("%d keyless requests: %v", n, seen)
				if len(seen) != len(bs) {
					t.Errorf("keyless requests reached %d of %d replicas: %v", len(seen), len(bs), seen)
				}
				if exact {
					for id, c := range seen {
						if c != n/len(bs) {
							t.Errorf("replica %s served %d of %d keyless requests, want exactly %d (round robin)", id, c, n, n/len(bs))
						}
					}
				}

				// Keyed requests stay on one replica, on the first key and on
				// the fallback key alike.
				for _, key := range []string{"x-session-id", "x-tenant-id"} {
					for i := range 20 {
						v := fmt.Sprintf("%s-%d", key, i)
						first := callWith(t, cl, key, v)
						for range 4 {
							if got := callWith(t, cl, key, v); got != first {
								t.Fatalf("%s=%s moved from %s to %s", key, v, first, got)
							}
						}
					}
				}
				if n := metric(t, adminAddr, "kvxds_xds_nacks_total"); n != 0 {
					t.Errorf("gRPC clients rejected %v responses", n)
				}
			})
		}
	}
}
