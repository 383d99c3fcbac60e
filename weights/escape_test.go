package weights

import (
	"testing"
)

func sigQKV(q, kv float64) *Signals {
	s := absentSignals()
	s.QueueDepth, s.KVOccupancy = q, kv
	return &s
}

// relRound is one Step of a relative-saturation script: each listed id's
// observation at the round's time (nil: a failed scrape), and the pool's
// health and Saturated count wanted.
type relRound struct {
	at        float64
	obs       map[string]*Signals
	health    string
	saturated int
}

func TestStepRelativeSaturation(t *testing.T) {
	abcd := []string{"a", "b", "c", "d"}
	// The queue alone, for replicas a, b, c, d in order.
	qs := func(v ...float64) map[string]*Signals {
		m := map[string]*Signals{}
		for i, q := range v {
			m[abcd[i]] = sigQ(q)
		}
		return m
	}
	kvs := func(v ...float64) map[string]*Signals {
		m := map[string]*Signals{}
		for i, kv := range v {
			m[abcd[i]] = sigKV(kv)
		}
		return m
	}
	const (
		allServing = "a:serving b:serving c:serving d:serving"
		aOut       = "a:saturated b:serving c:serving d:serving"
	)
	for _, tc := range []struct {
		name    string
		mutate  func(*Config)
		ids     []string
		domains map[string]string
		rounds  []relRound
	}{
		{name: "all busy: nobody saturates", rounds: []relRound{
			{0, qs(12, 11, 12, 13), allServing, 0},
			{5, kvs(0.95, 0.93, 0.97, 0.95), allServing, 0},
		}},
		{name: "one hot among idle saturates by queue", rounds: []relRound{
			{0, qs(12, 1, 1, 1), aOut, 1},
		}},
		{name: "one hot among idle saturates by KV", rounds: []relRound{
			{0, kvs(0.95, 0.5, 0.5, 0.5), aOut, 1},
		}},
		{name: "queue at max but under twice the peers' mean", rounds: []relRound{
			{0, qs(13, 7, 7, 7), allServing, 0},
			{5, qs(14, 7, 7, 7), aOut, 1}, // exactly twice
		}},
		{name: "KV at max but within the margin of the peers' mean", rounds: []relRound{
			{0, kvs(0.94, 0.85, 0.85, 0.85), allServing, 0},
			{5, kvs(0.95, 0.85, 0.85, 0.85), aOut, 1}, // exactly the margin
		}},
		{name: "twice the peers but under max", rounds: []relRound{
			{0, qs(9, 0, 0, 0), allServing, 0},
			{5, kvs(0.89, 0, 0, 0), allServing, 0},
		}},
		{name: "relative conditions off: all busy all saturate",
			mutate: func(c *Config) { c.RelativeQueue, c.RelativeKVMargin = 0, 0 },
			rounds: []relRound{
				{0, qs(12, 11, 12, 13), "a:saturated b:saturated c:saturated d:saturated", 4},
				{5, kvs(0.5, 0.5, 0.5, 0.95), "a:saturated b:saturated c:saturated d:saturated", 4},
				{35, kvs(0.5, 0.5, 0.5, 0.95), "a:serving b:serving c:serving d:saturated", 1},
			}},
		{name: "queue off, KV relative",
			mutate: func(c *Config) { c.RelativeQueue = 0 },
			rounds: []relRound{
				{0, qs(12, 11, 12, 13), "a:saturated b:saturated c:saturated d:saturated", 4},
			}},
		{name: "preemptions stay absolute", rounds: []relRound{
			{0, map[string]*Signals{"a": sigQP(1, 0), "b": sigQP(1, 0), "c": sigQP(1, 0), "d": sigQP(1, 0)}, allServing, 0},
			{5, map[string]*Signals{"a": sigQP(1, 10), "b": sigQP(1, 10), "c": sigQP(1, 10), "d": sigQP(1, 10)},
				"a:saturated b:saturated c:saturated d:saturated", 4},
		}},
		{name: "hysteresis: resume needs the resume threshold or the peers to catch up", rounds: []relRound{
			{0, qs(12, 2, 2, 2), aOut, 1},
			{5, qs(6, 2, 2, 2), aOut, 1},        // below max, but ≥ 5 and ≥ 2×2: not calm
			{10, qs(6, 4, 4, 4), aOut, 1},       // under 2×4: calm, the hold starts
			{20, qs(9, 2, 2, 2), aOut, 1},       // hot again at the resume values: the run breaks
			{25, qs(4, 2, 2, 2), aOut, 1},       // under resume_queue_depth: calm again
			{50, qs(4, 2, 2, 2), aOut, 1},       // 25 s calm
			{55, qs(4, 2, 2, 2), allServing, 0}, // 30 s: back
			{60, qs(9, 2, 2, 2), allServing, 0}, // between resume and max: stays in
		}},
		{name: "stale peers leave the mean",
			mutate: func(c *Config) { c.StaleAfter = 20e9 },
			rounds: []relRound{
				{0, qs(12, 20, 20, 0), allServing, 0}, // peers' mean 13.3
				{10, map[string]*Signals{"a": sigQ(12), "b": nil, "c": nil, "d": sigQ(0)}, allServing, 0},
				// b and c's last readings are 25 s old: the mean is d's 0.
				{25, map[string]*Signals{"a": sigQ(12), "b": nil, "c": nil, "d": sigQ(0)}, aOut, 1},
			}},
		{name: "no fresh peer: the thresholds alone",
			mutate: func(c *Config) { c.StaleAfter = 20e9 },
			rounds: []relRound{
				{0, qs(12, 12, 12, 12), allServing, 0},
				{25, map[string]*Signals{"a": sigQ(12)}, aOut, 1},
			}},
		{name: "a peer without the signal does not count",
			rounds: []relRound{
				{0, map[string]*Signals{"a": sigQ(12), "b": sigQ(12), "c": sigKV(0.1), "d": sigKV(0.1)}, allServing, 0},
			}},
		{name: "one replica", ids: []string{"a"}, rounds: []relRound{
			{0, map[string]*Signals{"a": sigQ(12)}, "a:saturated", 1},
			{5, map[string]*Signals{"a": sigQ(2)}, "a:saturated", 1},
			{35, map[string]*Signals{"a": sigQ(2)}, "a:serving", 0},
		}},
		{name: "a busy group is its own domain",
			ids:     []string{"a", "b", "g", "h"},
			domains: map[string]string{"g": "group", "h": "group"},
			rounds: []relRound{
				{0, map[string]*Signals{"a": sigQ(0), "b": sigQ(0), "g": sigQ(12), "h": sigQ(12)},
					"a:serving b:serving g:serving h:serving", 0},
			}},
		{name: "the same group in one domain",
			ids: []string{"a", "b", "g", "h"},
			rounds: []relRound{
				// g's peers' mean is 4: 12 is three times it.
				{0, map[string]*Signals{"a": sigQ(0), "b": sigQ(0), "g": sigQ(12), "h": sigQ(12)},
					"a:serving b:serving g:saturated h:saturated", 2},
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := stepTestConfig()
			cfg.RelativeQueue, cfg.RelativeKVMargin = DefaultRelativeQueue, DefaultRelativeKVMargin
			if tc.mutate != nil {
				tc.mutate(&cfg)
			}
			ids := tc.ids
			if ids == nil {
				ids = abcd
			}
			var st State
			for _, r := range tc.rounds {
				var obs []Observation
				for _, id := range ids {
					s, ok := r.obs[id]
					switch {
					case !ok:
					case s == nil:
						obs = append(obs, failedObs(id, r.at))
					default:
						obs = append(obs, goodObs(id, r.at, s))
					}
				}
				var res Result
				st, res = StepDomains(cfg, st, ids, tc.domains, obs, stepAt(r.at))
				if got := stepHealths(res, ids); got != r.health || res.Saturated != r.saturated || res.Fallback {
					t.Fatalf("t=%vs: %s saturated=%d fallback=%v; want %s saturated=%d",
						r.at, got, res.Saturated, res.Fallback, r.health, r.saturated)
				}
			}
		})
	}
}

// Under the defaults a lone busy replica counts as saturated but is never
// taken out: there is nowhere to send its keys.
func TestStepRelativeOneReplicaDefaults(t *testing.T) {
	cfg := DefaultConfig()
	_, res := Step(cfg, State{}, []string{"a"}, []Observation{goodObs("a", 0, sigQKV(20, 0.99))}, stepAt(0))
	if d := res.Decisions["a"]; d.Saturated || res.Saturated != 1 || !res.Fallback {
		t.Fatalf("lone replica: %+v saturated=%d fallback=%v; want serving, 1 saturated, fallback", d, res.Saturated, res.Fallback)
	}
}
