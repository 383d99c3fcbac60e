package reconcile

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/kvxds/kvxds/fleet"
	"github.com/kvxds/kvxds/xds/server"
	"github.com/kvxds/kvxds/xds/translate"
)

// groupsPolicy is a hash pool of four static replicas with the named
// groups, exclusive ones marked by a leading "!".
func groupsPolicy(groups ...string) string {
	var b strings.Builder
	b.WriteString(`pool "chat" {
  port = 10000
  hash {
    key { header = "x-session-id" }
  }
  static { endpoints = ["10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000", "10.0.0.4:8000"] }
`)
	for _, g := range groups {
		name, excl := strings.TrimPrefix(g, "!"), strings.HasPrefix(g, "!")
		fmt.Fprintf(&b, "  group %q {\n    match {\n      header = \"x-tenant-id\"\n      values = [%q]\n    }\n    replicas = 2\n    exclusive = %t\n  }\n", name, name, excl)
	}
	b.WriteString("}\n")
	return b.String()
}

// stagesOf is each group of the pool by its stage.
func stagesOf(f fleet.Fleet) map[string]string {
	out := map[string]string{}
	for _, g := range f.Pools[0].Groups {
		out[g.Name] = g.Stage
		if g.Stage == fleet.StageLeaving && g.Exclusive {
			out[g.Name] += ",exclusive"
		}
	}
	return out
}

// A group added to a running policy is served without routes for
// GroupStageDelay, then routed; a group removed loses its routes first
// and its cluster GroupStageDelay later (no longer exclusive meanwhile);
// the first push serves its groups routed.
func TestStageGroups(t *testing.T) {
	t0 := time.Unix(1000, 0)
	join := func(groups ...string) fleet.Fleet {
		p := mustParse(t, groupsPolicy(groups...))
		return Join(p, StaticTargets(p), nil)
	}
	var st groupStages
	for i, step := range []struct {
		at       time.Duration
		groups   []string
		want     map[string]string
		wantWake time.Duration
	}{
		{0, []string{"a"}, map[string]string{"a": ""}, 0},
		{time.Second, []string{"a", "b"}, map[string]string{"a": "", "b": fleet.StageAdding}, GroupStageDelay},
		{3 * time.Second, []string{"a", "b"}, map[string]string{"a": "", "b": fleet.StageAdding}, GroupStageDelay - 2*time.Second},
		{time.Second + GroupStageDelay, []string{"a", "b"}, map[string]string{"a": "", "b": ""}, 0},
		{10 * time.Second, []string{"b"}, map[string]string{"a": fleet.StageLeaving, "b": ""}, GroupStageDelay},
		// Back while leaving: its cluster is served, so it is routed.
		{11 * time.Second, []string{"a", "b"}, map[string]string{"a": "", "b": ""}, 0},
		{12 * time.Second, []string{"!a"}, map[string]string{"a": "", "b": fleet.StageLeaving}, GroupStageDelay},
		{12*time.Second + GroupStageDelay, []string{"!a"}, map[string]string{"a": ""}, 0},
		// Added and removed before being routed: gone at once.
		{30 * time.Second, []string{"!a", "c"}, map[string]string{"a": "", "c": fleet.StageAdding}, GroupStageDelay},
		{31 * time.Second, []string{"!a"}, map[string]string{"a": ""}, 0},
		{40 * time.Second, nil, map[string]string{"a": fleet.StageLeaving}, GroupStageDelay},
		{40*time.Second + GroupStageDelay, nil, map[string]string{}, 0},
	} {
		f, next, wake := stageGroups(join(step.groups...), st, t0.Add(step.at))
		if got := stagesOf(f); fmt.Sprint(got) != fmt.Sprint(step.want) || wake != step.wantWake {
			t.Fatalf("step %d: stages %v, wake %v; want %v, %v", i, got, wake, step.want, step.wantWake)
		}
		if _, err := fleet.Prepare(f); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		st = next
	}
}

// Through the reconciler and the ADS server: a group added by a policy
// edit is served as a cluster first, and routed at the stage's push.
func TestGroupStagesServed(t *testing.T) {
	var clock atomic.Int64
	clock.Store(1000)
	srv := server.New(server.Options{})
	r := New(Options{Sink: srv, Logger: hclog.NewNullLogger(), Now: func() time.Time { return time.Unix(clock.Load(), 0) }})
	defer r.Close()
	ctx := context.Background()
	if err := r.Apply(ctx, mustParse(t, groupsPolicy())); err != nil {
		t.Fatal(err)
	}
	if err := r.Apply(ctx, mustParse(t, groupsPolicy("acme"))); err != nil {
		t.Fatal(err)
	}
	served := func() (bool, bool) {
		res, err := translate.Translate(r.model, translate.Envoy)
		if err != nil {
			t.Fatal(err)
		}
		clusters, routed := map[string]bool{}, map[string]bool{}
		for _, c := range res.Clusters {
			clusters[c.GetName()] = true
		}
		for _, rc := range res.Routes {
			for _, vh := range rc.GetVirtualHosts() {
				for _, rt := range vh.GetRoutes() {
					routed[rt.GetRoute().GetCluster()] = true
				}
			}
		}
		n := struct{ clusters, routed map[string]bool }{clusters, routed}
		return n.clusters["chat/group/acme"], n.routed["chat/group/acme"]
	}
	if c, rt := served(); !c || rt {
		t.Fatalf("after the edit: cluster %v, routed %v; want the cluster only", c, rt)
	}
	// The stage's timer asks for a push.
	select {
	case <-r.stageCh:
	case <-time.After(GroupStageDelay + 5*time.Second):
		t.Fatal("no push asked for the group's next stage")
	}
	clock.Add(int64(GroupStageDelay / time.Second))
	r.pushMu.Lock()
	err := r.pushLocked(ctx, r.Policy(), causePolicy)
	r.pushMu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	if c, rt := served(); !c || !rt {
		t.Fatalf("after the stage: cluster %v, routed %v; want both", c, rt)
	}
}
