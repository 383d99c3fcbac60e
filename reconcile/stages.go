package reconcile

import (
	"maps"
	"slices"
	"time"

	"github.com/kvxds/kvxds/fleet"
)

// GroupStageDelay is how long a tenant group's cluster is served before
// its routes, and after them: long enough for every client to have the
// cluster and its assignment (a push reaches 10,000 streams within about
// a second, docs/operations/scaling.md), short beside policy edits.
const GroupStageDelay = 5 * time.Second

// groupStage is where a group's routes are (fleet.StageAdding, "" or
// fleet.StageLeaving) and since when; def is the group as last joined,
// which a leaving group keeps serving.
type groupStage struct {
	stage string
	since time.Time
	def   fleet.Group
}

// groupStages are the stages of each pool's groups, by pool and group.
type groupStages map[string]map[string]groupStage

// stageGroups stages the groups of the joined fleet f against the
// stages of the last push, make before break (fleet.StageAdding): a group
// new to a pool is adding for GroupStageDelay, then routed; a routed group
// gone from the policy stays leaving, its cluster served without routes
// and its replicas not taken from the pool, for GroupStageDelay. The
// first push (prev nil) serves its groups routed: no client has been
// served anything yet. Groups come from each instance's own policy, so
// this is per instance: instances that load a policy at different times
// differ meanwhile, and serve alike once both stages have passed. It
// returns the staged fleet (f's pools copied where they change), the
// stages to keep, and when the next stage is due (zero: none).
func stageGroups(f fleet.Fleet, prev groupStages, now time.Time) (fleet.Fleet, groupStages, time.Duration) {
	next := groupStages{}
	var wake time.Duration
	due := func(since time.Time) bool {
		left := since.Add(GroupStageDelay).Sub(now)
		if left <= 0 {
			return true
		}
		if wake == 0 || left < wake {
			wake = left
		}
		return false
	}
	pools := slices.Clone(f.Pools)
	for i := range pools {
		p := &pools[i]
		was := prev[p.Name]
		if len(p.Groups) == 0 && len(was) == 0 {
			continue
		}
		cur := map[string]groupStage{}
		groups := make([]fleet.Group, 0, len(p.Groups)+len(was))
		for _, g := range p.Groups {
			st := groupStage{since: now, def: g}
			switch w, ok := was[g.Name]; {
			case prev == nil:
			case !ok:
				st.stage = fleet.StageAdding
				due(now)
			case w.stage == fleet.StageAdding && !due(w.since):
				st.stage, st.since = fleet.StageAdding, w.since
			}
			g.Stage = st.stage
			cur[g.Name] = st
			groups = append(groups, g)
		}
		for _, name := range slices.Sorted(maps.Keys(was)) {
			w := was[name]
			if _, ok := cur[name]; ok {
				continue
			}
			switch {
			case w.stage == "":
				w = groupStage{stage: fleet.StageLeaving, since: now, def: w.def}
				due(w.since)
			case w.stage == fleet.StageLeaving && !due(w.since):
			default:
				continue // gone: adding (never routed), or left long enough
			}
			// Its cluster only: no routes, and its replicas back in the
			// pool's tables.
			g := w.def
			g.Stage, g.Exclusive = fleet.StageLeaving, false
			cur[name] = w
			groups = append(groups, g)
		}
		p.Groups = groups
		if len(cur) > 0 {
			next[p.Name] = cur
		}
	}
	f.Pools = pools
	return f, next, wake
}
