package e2e

import (
	"fmt"
	"io"
	"maps"
	"net/http"
	"reflect"
	"strings"
	"testing"
)

// Two kvxds processes outside Kubernetes, the second following the
// first: clients of either route every session to the same replica,
// through a saturation; with the first killed, the second keeps serving
// its last decisions and says so on /readyz.
func TestHAFollow(t *testing.T) {
	bs := startBackends(t, 4)
	members := []member{{bs[0], 1}, {bs[1], 1}, {bs[2], 1}, {bs[3], 1}}
	first := &haInstance{id: "kvxds-a", xds: freeAddr(t), admin: freeAddr(t)}
	second := &haInstance{id: "kvxds-b", xds: freeAddr(t), admin: freeAddr(t)}
	for _, i := range []*haInstance{first, second} {
		path, _, _ := policyFile(t)
		text := dynamicPolicy(i.xds, i.admin, members, fixedWeights)
		if i == second {
			text = fmt.Sprintf("ha { follow = %q }\n", "http://"+first.admin) + text
		}
		writeAtomic(t, path, text)
		i.proc = startBinaryWith(t, []string{"serve", "--policy", path, "--id", i.id, "--log-level", "warn"}, nil)
		proc := i.proc
		t.Cleanup(func() { proc.cmd.Process.Kill(); proc.cmd.Wait() })
		waitReady(t, i.admin)
		i.cl = newGoClient(t, i.xds)
	}
	ss := sessions(numSessions)
	agree := func(what string) map[string]string {
		t.Helper()
		var a map[string]string
		eventually(t, what, func() bool {
			if !reflect.DeepEqual(servedFleet(t, first.admin), servedFleet(t, second.admin)) {
				return false
			}
			a = route(t, first.cl, ss)
			return maps.Equal(a, route(t, second.cl, ss))
		})
		return a
	}
	agree("steady state")
	bs[1].setLoad(50, 0.5)
	eventually(t, "the saturated replica drained", func() bool { return drained(servedFleet(t, first.admin), bs[1].addr) })
	saturated := agree("saturation")

	first.proc.cmd.Process.Kill()
	first.proc.cmd.Wait()
	bs[1].setLoad(0, 0.1) // nobody decides now: nothing may change
	eventually(t, "the follower to report its source down", func() bool {
		resp, err := http.Get("http://" + second.admin + "/readyz")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode == http.StatusOK && strings.Contains(string(body), "unreachable, serving the last decisions")
	})
	if got := route(t, second.cl, ss); !maps.Equal(got, saturated) {
		n, _, _ := moved(saturated, got)
		t.Errorf("%d sessions moved on the follower with its leader gone", n)
	}
	if v := metric(t, second.admin, "kvxds_ha_source_up"); v != 0 {
		t.Errorf("kvxds_ha_source_up = %v, want 0", v)
	}
}
