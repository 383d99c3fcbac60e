package e2e

import (
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/kvxds/kvxds/test/dnstest"
)

// srvRecords are the SRV records (and their targets' A records) of
// members, as Consul serves a service.
func srvRecords(t *testing.T, members []member) []string {
	t.Helper()
	var out []string
	for i, m := range members {
		host, port, err := net.SplitHostPort(m.b.addr)
		if err != nil {
			t.Fatal(err)
		}
		node := fmt.Sprintf("node-%d.test.", i)
		out = append(out,
			fmt.Sprintf("_vllm._tcp.test. 0 IN SRV 1 %d %s %s", m.weight, port, node),
			fmt.Sprintf("%s 0 IN A %s", node, host))
	}
	return out
}

// A pool discovered from DNS (SRV, as from Consul) follows its records
// with every gRPC client: a replica added to DNS takes sessions only for
// itself, a failing resolver moves nothing, and a removed record moves
// only its replica's sessions.
func TestDNSDiscovery(t *testing.T) {
	for _, dp := range dataPlanes {
		t.Run(dp.name, func(t *testing.T) {
			bs := startBackends(t, 4)
			members := []member{{bs[0], 1}, {bs[1], 1}, {bs[2], 2}}
			srv := dnstest.Start(t)
			srv.Set(t, dnstest.Answer, srvRecords(t, members)...)

			path, xdsAddr, adminAddr := policyFile(t)
			text := strings.Replace(policyText(xdsAddr, adminAddr, nil), "  static {\n  }\n", fmt.Sprintf(`  dns {
    name     = "_vllm._tcp.test"
    resolver = %q
    refresh  = "1s"
  }
`, srv.Addr), 1)
			if !strings.Contains(text, "dns {") {
				t.Fatalf("no dns block in\n%s", text)
			}
			writeAtomic(t, path, text)
			k := startInProcess(t, path, xdsAddr, adminAddr)
			defer k.stop()
			cl := dp.new(t, xdsAddr)
			ss := sessions(numSessions)
			want := predict(members, ss)
			before := settle(t, cl, ss, want, "replicas from DNS")

			grown := append(members[:3:3], member{bs[3], 1})
			srv.Set(t, dnstest.Answer, srvRecords(t, grown)...)
			wantGrown := predict(grown, ss)
			after := settle(t, cl, ss, wantGrown, "a replica added to DNS")
			own, between := movement(before, after, bs[3].id, want, wantGrown)
			t.Logf("a replica added to DNS took %d sessions; %d moved between the others", own, between)
			if own == 0 || between > numSessions/100 {
				t.Errorf("adding a replica in DNS: %d sessions to it, %d between the others", own, between)
			}

			// A failing resolver keeps the last good answer.
			for _, mode := range []string{dnstest.ServFail, dnstest.NXDomain, dnstest.Timeout} {
				srv.Set(t, mode)
				time.Sleep(2500 * time.Millisecond) // past two refreshes
				if n, _, _ := moved(after, route(t, cl, ss)); n != 0 {
					t.Fatalf("with the resolver answering %s, %d sessions moved", mode, n)
				}
			}
			if got := metric(t, adminAddr, "kvxds_discovery_errors_total"); got == 0 {
				t.Error("failed lookups were not counted")
			}

			shrunk := []member{grown[0], grown[2], grown[3]}
			srv.Set(t, dnstest.Answer, srvRecords(t, shrunk)...)
			wantShrunk := predict(shrunk, ss)
			final := settle(t, cl, ss, wantShrunk, "a replica removed from DNS")
			own, between = movement(after, final, grown[1].b.id, wantGrown, wantShrunk)
			t.Logf("a replica removed from DNS moved its own %d sessions; %d moved between the others", own, between)
			if between > numSessions/100 {
				t.Errorf("removing a replica from DNS moved %d sessions between the others", between)
			}
		})
	}
}
